"""Checkpoints of the columnar aggregate state written from parts (most copied from the
last snapshot, state/columnar/snapshot_parts.py) keep a vectorized job exactly-once: a job
failed and SIGKILLed mid-stream, across many checkpoints written from parts, commits what
the failure-free run commits; and a savepoint of it restores at another parallelism."""

from __future__ import annotations

import pyarrow as pa
import pytest
from columnar_pipelines import expected_growing, final_growing, growing_keys_pipeline
from pipelines import FaultPlan
from scenarios import savepoint_then_restore_rescaled

from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot, read_state_file
from airflow_checkpoint_provider.engine.state.columnar.snapshot_parts import PART_ROWS_ENV

N, SEED = 12_000, 7


@pytest.fixture
def small_parts(monkeypatch):
    """Parts of 16 rows and runs of 32 pairs in the slots: hundreds of parts, most of them
    unchanged from one checkpoint to the next (the keys keep coming)."""
    monkeypatch.setenv(PART_ROWS_ENV, "16")


@pytest.fixture(scope="module")
def expected():
    return expected_growing(N, SEED)


@pytest.mark.timeout(300)
def test_failures_across_checkpoints_from_parts_commit_the_failure_free_results(
        workdir, small_parts, expected):
    free = workdir / "free"
    free.mkdir()
    result = growing_keys_pipeline(str(free), num_records=N, seed=SEED).run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert final_growing(str(free / "out")) == expected
    points = [("record", 2_500), ("kill", 5_000), ("record", 8_000), ("kill", 10_500)]
    faults = FaultPlan(str(workdir / "faults"), points)
    result = growing_keys_pipeline(str(workdir), num_records=N, seed=SEED, faults=faults,
                                   rate=2_000).run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(points) and result.restarts == len(points)
    assert result.checkpoints_completed >= 6
    assert final_growing(str(workdir / "out")) == final_growing(str(free / "out")) == expected
    # the job's snapshots were written from parts: many record batches, runs of pairs
    snap = load_snapshot(result.latest_checkpoint)
    for sub in snap.metadata.operators["agg"].subtasks:
        data = read_state_file(snap.directory, sub.keyed)
        reader = pa.ipc.open_stream(pa.py_buffer(data))
        batches = list(reader)
        assert len(batches) > 10 and "_pairs" in reader.schema.names


@pytest.mark.timeout(300)
def test_a_savepoint_written_from_parts_restores_at_three(workdir, tmp_path, small_parts,
                                                          expected):
    def make(root, **options):
        return growing_keys_pipeline(root, num_records=N, seed=SEED, **options)

    out = savepoint_then_restore_rescaled(make, workdir, tmp_path, rate=3_000)
    assert final_growing(out) == expected
