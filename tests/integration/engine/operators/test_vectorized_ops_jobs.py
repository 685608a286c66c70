"""engine/vectorized_ops in real jobs (local runner, slot processes): Nexmark q9
(max_by_join), q18 (latest_by_key), q20 (unique_key_join) and q13 (temporal_table_join with
a static side input whose source ended before the savepoint) in one job at parallelism 2,
stopped with a savepoint mid-stream and restored at parallelism 3 on RocksDB: the committed
rows equal a failure-free run's (exactly once across the savepoint and the rescale).
About a minute on a quiet machine (three short jobs)."""

from __future__ import annotations

import os
import sys
from collections import Counter

import cloudpickle
import pytest
from repo_paths import REPO_ROOT
from scenarios import savepoint_then_restore_rescaled

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    Pipeline,
    RestartStrategy,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.connectors.files.sink import FileSink, read_committed

ROOT = str(REPO_ROOT)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from bench.nexmark import generator, join_queries, queries, source, vector_queries  # noqa: E402

EVENTS = 6_000
QUERIES = ("q9", "q18", "q20", "q13")


def nexmark_ops_pipeline(root: str, *, rate: float | None = None, parallelism: int = 2,
                         state_backend: str = "rocksdb", out: str | None = None) -> Pipeline:
    for m in (generator, join_queries, queries, source, vector_queries):
        cloudpickle.register_pickle_by_value(m)
    p = Pipeline("nexmark-ops", max_parallelism=64, state_backend=state_backend,
                 checkpoint=CheckpointConfig(interval_ms=300,
                                             directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "sp")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    events = p.source(source.NexmarkSource(EVENTS, config=generator.NexmarkConfig(
        events_per_second=500), splits=4, events_per_second_wall=rate), uid="events",
        parallelism=parallelism, watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
            0, timestamp_field="date_time"))
    for q in QUERIES:
        queries.QUERIES[q](events, parallelism).sink(
            FileSink(os.path.join(out or os.path.join(root, "out"), q)), uid=f"sink-{q}")
    return p


def outputs(out: str) -> dict:
    got = {q: list(read_committed(os.path.join(out, q))) for q in QUERIES}
    return {"q9": Counter(tuple(sorted(r.items())) for r in got["q9"]),
            "q20": Counter(tuple(sorted(r.items())) for r in got["q20"]),
            "q13": Counter(tuple(sorted(r.items())) for r in got["q13"]),
            # an upsert stream by (bidder, auction): per key its newest row (the committed
            # files sort by job id first, so the read order is not the commit order)
            "q18": {(r["bidder"], r["auction"]): r
                    for r in sorted(got["q18"], key=lambda r: r["date_time"])}}


@pytest.mark.timeout(600)
def test_a_savepoint_of_the_vectorized_queries_restores_at_parallelism_three(tmp_path):
    clean = tmp_path / "clean"
    result = nexmark_ops_pipeline(str(clean)).run()
    assert result.status == "FINISHED", result.failure_reason
    expected = outputs(str(clean / "out"))
    assert sum(expected["q9"].values()) > 20 and sum(expected["q20"].values()) > 20
    assert sum(expected["q13"].values()) > 5_000
    first = tmp_path / "first"
    out = savepoint_then_restore_rescaled(
        lambda root, **kw: nexmark_ops_pipeline(root, **kw), first, tmp_path, rate=1_500)
    stopped = outputs(str(first / "out"))
    assert sum(stopped["q20"].values()) < sum(expected["q20"].values()), "stopped mid-stream"
    got = outputs(out)
    for q in QUERIES:  # one by one: a failure names the query
        assert got[q] == expected[q], q
