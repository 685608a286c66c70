"""``restore="latest"`` when every retained checkpoint of the latest job is unusable (issue 25,
item 2): falling back past that job -- here to empty state -- removes what the job committed,
as failover does, so the output equals a failure-free run's; a sink that cannot remove
committed output makes the restore refuse, saying what to do, and the refusal sticks (the
checkpoints stay COMPLETED, so the next ``latest`` refuses again instead of duplicating)."""

from __future__ import annotations

import os
import shutil

import pytest
from deltalake import DeltaTable
from pipelines import check_exactly_once, expected_running_sums, running_sum_pipeline

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
from airflow_checkpoint_provider.engine.errors import UnsafeRestoreFallbackError

N, KEYS, SEED = 4000, 50, 7


def _pipeline(root, **kw):
    return running_sum_pipeline(str(root), num_records=N, num_keys=KEYS, seed=SEED, rate=4000,
                                interval_ms=100, source_parallelism=1, keyed_parallelism=2,
                                **kw)


def _break_every_checkpoint(root, job_id: str, how: str) -> None:
    job_dir = next(d for d, _, _ in os.walk(root / "ckpt") if os.path.basename(d) == job_id)
    if how == "checkpoint_dir_deleted":
        shutil.rmtree(job_dir)
        return
    removed = 0
    for d, _, files in os.walk(job_dir):
        if "_metadata" in files:
            os.remove(os.path.join(d, "_metadata"))
            removed += 1
    assert removed >= 1


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["all_metadata_removed", "checkpoint_dir_deleted"])
def test_restore_latest_past_a_job_without_usable_checkpoints_writes_once(workdir, how):
    first = _pipeline(workdir).run()
    assert first.status == "FINISHED" and first.checkpoints_completed >= 2
    _break_every_checkpoint(workdir, first.job_id, how)

    second = _pipeline(workdir).run(restore="latest")

    assert second.status == "FINISHED" and second.restored_from is None
    # the old job's committed files were removed; the new job wrote everything once
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))
    with MetadataStore(f"sqlite:///{workdir}/meta.db") as store:
        states = {r.status for r in store.list_checkpoints(first.job_id)
                  if r.kind == "CHECKPOINT"}
        assert "COMPLETED" not in states and "CORRUPT" in states


@pytest.mark.timeout(180)
def test_restore_latest_past_a_job_refuses_when_a_sink_cannot_remove_its_output(workdir):
    table = str(workdir / "sums")
    first = _pipeline(workdir, sink=DeltaSink(table)).run()
    assert first.status == "FINISHED"
    rows = DeltaTable(table).to_pyarrow_table().num_rows
    _break_every_checkpoint(workdir, first.job_id, "all_metadata_removed")

    for _ in range(2):  # the refusal sticks
        with pytest.raises(UnsafeRestoreFallbackError,
                           match=r"(?s)cannot remove it.*restore=PATH.*--restore none"):
            _pipeline(workdir, sink=DeltaSink(table)).run(restore="latest")

    assert DeltaTable(table).to_pyarrow_table().num_rows == rows  # nothing written twice
    with MetadataStore(f"sqlite:///{workdir}/meta.db") as store:
        jobs = store.list_jobs()
        refused = [j for j in jobs if j.job_id != first.job_id]
        assert len(refused) == 2 and all(
            j.status == "FAILED" and "UnsafeRestoreFallbackError" in j.failure_reason
            for j in refused)
        assert any(r.status == "COMPLETED" for r in store.list_checkpoints(first.job_id))
