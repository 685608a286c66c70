"""One live job per name; a job whose driver stopped heartbeating is LOST: it no longer
blocks its name, control requests to it fail at once, and a driver that finds itself LOST
stops."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pipelines import Background, running_sum_pipeline

from airflow_checkpoint_provider.engine import JobNameInUseError
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main


def _ghost(store: MetadataStore, job_id: str = "ghost", name: str = "running-sum") -> None:
    """A RUNNING row whose driver died long ago (no heartbeat since creation)."""
    store.create_job(job_id=job_id, job_name=name, parallelism=1)
    store.set_job_status(job_id, "RUNNING")


@pytest.mark.timeout(120)
def test_a_second_job_with_a_live_name_is_refused_also_with_restore_latest(workdir):
    p = running_sum_pipeline(str(workdir), num_records=50_000, rate=2000,
                             source_parallelism=1, keyed_parallelism=1)
    bg = Background(p)
    first = bg.wait_running(min_checkpoints=1)
    try:
        for restore in (None, "latest"):
            with pytest.raises(JobNameInUseError, match=f"in use by live job {first.job_id}"):
                p.run(restore=restore)
    finally:
        bg.request(first.job_id, "CANCEL")
        bg.result()
    assert [j.job_id for j in bg.store.list_jobs(p.name)] == [first.job_id]


@pytest.mark.timeout(120)
def test_a_job_without_heartbeat_is_lost_and_superseded(workdir, monkeypatch):
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "0")
    p = running_sum_pipeline(str(workdir), num_records=500, source_parallelism=1,
                             keyed_parallelism=1)
    store = MetadataStore(p.metadata_url)
    _ghost(store)

    with pytest.raises(ValueError, match=r"is LOST \(no heartbeat since"):
        store.submit_control_request("ghost", "SAVEPOINT", {})
    result = p.run()  # the name is free again

    assert result.status == "FINISHED"
    ghost = store.get_job("ghost")
    assert ghost.status == "LOST" and "presumed dead" in ghost.failure_reason
    store.close()


def test_ckpt_jobs_shows_lost_jobs(workdir, monkeypatch):
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "0")
    db = f"sqlite:///{workdir}/meta.db"
    with MetadataStore(db) as store:
        _ghost(store)
        request = None
        monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "3600")
        request = store.submit_control_request("ghost", "CANCEL", {})  # still fresh enough
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "0")
    res = CliRunner().invoke(main, ["jobs", "--db", db])
    assert res.exit_code == 0 and "LOST" in res.output, res.output
    with MetadataStore(db) as store:
        req = store.get_control_request(request)
        assert req.status == "FAILED" and "is LOST" in req.error


@pytest.mark.timeout(120)
def test_a_new_job_removes_the_staged_files_of_the_ended_job_it_restored(workdir):
    p = running_sum_pipeline(str(workdir), num_records=300, source_parallelism=1,
                             keyed_parallelism=1)
    first = p.run(job_id="first")
    staging = workdir / "out" / "_staging"
    orphan = staging / "out~first~a0~s0~deadbeef.inprogress"  # what a killed driver leaves
    other = staging / "out~first-2~a0~s0~cafe0000.inprogress"  # a job whose id extends "first"
    for f in (orphan, other):
        f.write_text('{"id": -1}\n')

    second = p.run(restore=first.latest_checkpoint, job_id="second")

    assert second.status == "FINISHED"
    assert not orphan.exists() and other.exists()
