"""Incremental heap snapshots end to end (``Pipeline(heap_incremental=True)``): exactly-once
under failures and kills, a rescale from a chain, storage that holds only the files of
retained checkpoints."""

from __future__ import annotations

import os

import pytest
from pipelines import FaultPlan, check_exactly_once, expected_running_sums, running_sum_pipeline

from airflow_checkpoint_provider.engine import RestartStrategy
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.errors import JobFailedError
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

N, KEYS, SEED = 12_000, 400, 7


def incremental(p):
    p.heap_incremental = True
    return p


def _chain_handles(location: str) -> list[dict]:
    snap = load_snapshot(location)
    return [sub["keyed"] for op in snap.operators.values() for sub in op["subtasks"]
            if (sub.get("keyed") or {}).get("type") == "heap-changelog"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failures_and_kills_with_incremental_heap_snapshots_commit_exactly_once(workdir):
    faults = FaultPlan(str(workdir / "faults"), [("record", 2500), ("kill", 6000),
                                                 ("snapshot", 4), ("record", 9500)])
    p = incremental(running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED,
                                         faults=faults, rate=4000, interval_ms=150))
    result = p.run()
    assert result.status == "FINISHED" and len(faults.fired()) == 4
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))
    handles = _chain_handles(result.latest_checkpoint)
    assert handles, "the heap operator wrote no incremental handle"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_restored_from_a_chain_at_another_parallelism_commits_exactly_once(workdir):
    """A job stops for good (no restarts) after several incremental checkpoints; a second
    job restores its latest checkpoint, a chain, with 2 subtasks instead of 3. Where the
    first job stops is timing: its latest checkpoint may be a compaction (a new base, one
    file), and a restore must take the latest (an older one would replay committed output),
    so the pair runs again, in a fresh directory, until the latest is a chain (at most 3)."""
    for attempt in range(3):
        work = workdir / f"try-{attempt}"
        work.mkdir()
        faults = FaultPlan(str(work / "faults"), [("record", 7000)])
        first = incremental(running_sum_pipeline(
            str(work), num_records=N, num_keys=KEYS, seed=SEED, faults=faults, rate=4000,
            interval_ms=150, keyed_parallelism=3,
            restart=RestartStrategy.fixed_delay(attempts=0, delay_ms=0)))
        with pytest.raises(JobFailedError, match="injected failure record 7000"):
            first.run(job_id="first")
        with MetadataStore(first.metadata_url) as store:
            latest = max((c for c in store.list_checkpoints("first")
                          if c.status == "COMPLETED"), key=lambda c: c.checkpoint_id).location
        if any(len(h["files"]) > 1 for h in _chain_handles(latest)):
            break
    else:
        pytest.fail("the latest checkpoint of 3 runs of the first job was never a chain")
    second = incremental(running_sum_pipeline(
        str(work), num_records=N, num_keys=KEYS, seed=SEED, rate=8000, interval_ms=150,
        keyed_parallelism=2)).run(restore=latest, job_id="second")
    assert second.status == "FINISHED"
    check_exactly_once(str(work / "out"), expected_running_sums(N, KEYS, SEED))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_storage_holds_only_the_files_of_retained_incremental_heap_checkpoints(workdir):
    p = incremental(running_sum_pipeline(str(workdir), num_records=20_000, num_keys=3000,
                                         rate=3000, interval_ms=100, retained=2))
    result = p.run()
    assert result.checkpoints_completed >= 8
    job_dir = os.path.dirname(result.latest_checkpoint)
    with MetadataStore(p.metadata_url) as store:
        retained = [c for c in store.list_checkpoints(result.job_id) if c.status == "COMPLETED"]
    assert len(retained) == 2
    referenced = set()
    for c in retained:
        snap = load_snapshot(c.location)
        referenced.add(os.path.relpath(os.path.join(c.location, "_metadata"), job_dir))
        for op in snap.operators.values():
            for sub in op["subtasks"]:
                keyed = sub.get("keyed") or {}
                for f in keyed.get("files", []):
                    referenced.add(f["shared"])
                if "path" in keyed:
                    referenced.add(os.path.relpath(os.path.join(c.location, keyed["path"]),
                                                   job_dir))
    on_disk = set()
    for root, _dirs, files in os.walk(job_dir):
        on_disk |= {os.path.relpath(os.path.join(root, f), job_dir) for f in files}
    assert on_disk == referenced
    assert any(c.checkpointed_size < c.state_size for c in retained)  # deltas
