"""A savepoint of v1 restored by a v2 that adds a join: v1 runs a co-process over impressions
and clicks (keyed state and timers of both inputs, tests/support/join_pipelines.py) and is stopped
with a savepoint mid-stream; v2 is v1 plus a left outer interval join of the same two
sources under a new uid (and two sinks of the raw records it reads, new uids too). v2 adds
only, so it restores without ``allow_non_restored_state``: v1's operators get their state
back (the co-process output over both runs is exactly the reference over all records: the
windows open at the savepoint complete with the counts from before it), the sources resume
where v1 stopped, and the join starts empty: its output is exactly the join of the records
read after the savepoint."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest
from join_pipelines import (
    LOWER_MS,
    N_CLICKS,
    N_IMPRESSIONS,
    UPPER_MS,
    CoWindowSums,
    clicks,
    committed_co,
    committed_interval_join,
    expected_co,
    impressions,
    pair,
    watermarks,
)
from pipelines import TEST_RESTARTS, Background

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    Pipeline,
    RestartStrategy,
    read_committed,
)

pytestmark = pytest.mark.slow


def upgraded_pipeline(root: str, version: str, *, rate: float | None = None,
                      parallelism: int = 2) -> Pipeline:
    """v1: imps + clicks -> co-process; v2: the same plus an interval join of the two and
    sinks of the raw records (all new uids)."""
    p = Pipeline("join-upgrade", version=version, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=150, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "savepoints"),
                                             allowed_savepoint_roots=(root,)),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    imps = p.source(impressions(rate=rate), uid="imps", parallelism=parallelism,
                    watermarks=watermarks())
    clks = p.source(clicks(rate=rate / 2 if rate else None), uid="clicks",
                    parallelism=parallelism, watermarks=watermarks())
    (imps.connect(clks).key_by("key", "key").process(CoWindowSums(), uid="co", parallelism=2)
         .sink(FileSink(os.path.join(root, "co")), uid="co-out"))
    if version == "v2":
        (imps.key_by("key").interval_join(clks.key_by("key"), how="left")
             .between(LOWER_MS, UPPER_MS).process(pair, uid="ij", parallelism=parallelism)
             .sink(FileSink(os.path.join(root, "ij")), uid="ij-out"))
        imps.sink(FileSink(os.path.join(root, "imps")), uid="imps-out")
        clks.sink(FileSink(os.path.join(root, "clicks")), uid="clicks-out")
    return p


def left_join(imps: list[dict], clks: list[dict]) -> Counter:
    """The left outer interval join of two lists of records (nested loop)."""
    by_key = defaultdict(list)
    for c in clks:
        by_key[c["key"]].append(c)
    out: Counter = Counter()
    for a in imps:
        hits = [c for c in by_key[a["key"]] if a["ts"] + LOWER_MS <= c["ts"] <= a["ts"] + UPPER_MS]
        for c in hits:
            out[(a["key"], a["id"], c["id"])] += 1
        if not hits:
            out[(a["key"], a["id"], None)] += 1
    return out


@pytest.mark.timeout(240)
def test_v2_adding_a_join_restores_v1_state_and_the_join_starts_empty(workdir):
    root = str(workdir)
    bg = Background(upgraded_pipeline(root, "v1", rate=3_000))
    job = bg.wait_running(min_checkpoints=2, timeout=90)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    before = sum(committed_co(root).values())
    assert 0 < before < sum(expected_co().values()), "stopped mid-stream"

    # v2 only adds operators: no allow_non_restored_state needed
    result = upgraded_pipeline(root, "v2", parallelism=3).run(restore=req.result["location"])
    assert result.status == "FINISHED" and result.restored_from == req.result["location"]
    assert committed_co(root) == expected_co(), "v1's state carried over, exactly once"

    imps, clks = (list(read_committed(os.path.join(root, d))) for d in ("imps", "clicks"))
    assert 0 < len(imps) < N_IMPRESSIONS and 0 < len(clks) < N_CLICKS, \
        "the sources resumed where v1 stopped"
    assert len({r["id"] for r in imps}) == len(imps)
    ours = committed_interval_join(root)
    assert ours == left_join(imps, clks), "the join saw exactly the records after the savepoint"
    assert min(r["id"] for r in imps) > 0
