"""Nexmark q13 (the bounded side input on ``temporal_table_join``) and q19 (top 10 per
auction on ``top_n``) against their per-record versions (``q13-rows``: ``temporal_join``;
``q19-rows``: the TopN co-process it replaced) and DuckDB (bench/chaos/reference_duckdb.py,
SQL written from the query texts), in one job at parallelism 2; and q13 under the chaos
matrix's faults (SIGKILLed slots and raised exceptions, restored from checkpoints) against
DuckDB. Real jobs: about 40 s and 60-150 s on a loaded machine."""

from __future__ import annotations

import os
from collections import Counter

import pytest

cloudpickle = pytest.importorskip("cloudpickle")
pytest.importorskip("duckdb")

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    FileSink,
    Pipeline,
    RestartStrategy,
    WatermarkStrategy,
    read_committed,
)
from bench.chaos.reference_duckdb import reference_rows  # noqa: E402
from bench.nexmark import generator, join_queries, queries, source, vector_queries  # noqa: E402

EVENTS = 6_000
CONFIG = generator.NexmarkConfig(events_per_second=500)
NAMES = ("q13", "q13-rows", "q19", "q19-rows")


def _q13(rows) -> Counter:
    return Counter((r["auction"], r["bidder"], r["price"], r["date_time"], r["value"])
                   for r in rows)


def _q19(rows) -> set:
    """(auction, rank, price) of the last row per rank: prices at a rank only rise."""
    best: dict = {}
    for r in rows:
        k = (r["auction"], r["rank_number"])
        best[k] = max(best.get(k, r["price"]), r["price"])
    return {(*k, p) for k, p in best.items()}


@pytest.mark.timeout(300)
def test_q13_and_q19_commit_the_rows_of_their_per_record_versions_and_of_duckdb(tmp_path):
    for m in (generator, join_queries, queries, source, vector_queries):  # no bench/ in slots
        cloudpickle.register_pickle_by_value(m)
    root = str(tmp_path)
    p = Pipeline("nexmark-q13-q19", max_parallelism=64, state_backend="rocksdb",
                 checkpoint=CheckpointConfig(interval_ms=300, directory=os.path.join(root, "c")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    events = p.source(source.NexmarkSource(EVENTS, config=CONFIG, splits=4), uid="events",
                      parallelism=2, watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                          0, timestamp_field="date_time"))
    every = {**queries.QUERIES, **queries.ROW_QUERIES}
    for name in NAMES:
        every[name](events, 2).sink(FileSink(os.path.join(root, "out", name)), uid=f"s-{name}")
    result = p.run()
    assert result.status == "FINISHED", result.failure_reason
    got = {n: list(read_committed(os.path.join(root, "out", n))) for n in NAMES}
    ref13 = _q13(reference_rows("q13", EVENTS, CONFIG))
    assert sum(ref13.values()) > 5_000
    assert _q13(got["q13"]) == ref13
    assert _q13(got["q13-rows"]) == ref13
    ref19 = {(r["auction"], r["rank_number"], r["price"])
             for r in reference_rows("q19", EVENTS, CONFIG)}
    assert len(ref19) > 1_000
    assert _q19(got["q19"]) == ref19
    assert _q19(got["q19-rows"]) == ref19


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_q13_under_kills_and_exceptions_commits_the_duckdb_rows(tmp_path):
    from bench.chaos.run import Cell, run_one

    record = run_one(Cell.parse("q13/local/rocksdb/aligned"), 3, str(tmp_path), max_faults=2)
    fired = [f for f in record["faults"] if f["fired_at"] is not None]
    assert fired and all(f["landed"] for f in fired), record["faults"]
    assert record["ok"], (record["status"], record["failure_reason"], record["differences"],
                          record["replay"])
