"""VerifyRestoreOperator against a running job's latest checkpoint: the compatible v2
passes, the incompatible v2 fails the task naming the operator and the state, before
anything is stopped; a failed pre-flight savepoint is taken again while the job runs."""

from __future__ import annotations

import threading

import pytest
from airflow.sdk.exceptions import AirflowException
from provider_helpers import EXAMPLE, completed_checkpoints, start_job, wait_for
from savepoint_helpers import FakeTI

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator


@pytest.mark.timeout(180)
def test_verify_restore_passes_v2_and_names_what_breaks_v2_incompatible(metadata_url, tmp_path,
                                                                         monkeypatch):
    # checkpoints outlive a check (at 500 ms three newer ones subsume it meanwhile)
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "4000")
    job_id = start_job(metadata_url, tmp_path)
    store = MetadataStore(metadata_url)
    wait_for(lambda: completed_checkpoints(store, job_id), 60, "a completed checkpoint")
    ok = VerifyRestoreOperator(task_id="verify", pipeline=f"{EXAMPLE}:build_v2",
                               job_name="versioned-sum", parallelism=2).execute({})
    assert ok["ok"] and ok["parallelism"]["running-sum"] == 2
    with pytest.raises(AirflowException, match="operator 'running-sum', state 'sum'") as err:
        VerifyRestoreOperator(task_id="verify", pipeline=f"{EXAMPLE}:build_v2_incompatible",
                              job_name="versioned-sum").execute({})
    print(err.value)
    assert store.get_job(job_id).status == "RUNNING", "nothing was stopped"
    store.close()


def test_needs_a_snapshot_or_a_job():
    with pytest.raises(ValueError, match="give snapshot="):
        VerifyRestoreOperator(task_id="v", pipeline=f"{EXAMPLE}:build_v2")


def _ti() -> FakeTI:
    return FakeTI("savepoint_upgrade_restore", "preflight")


@pytest.mark.timeout(180)
def test_a_failed_preflight_savepoint_is_taken_again_while_the_job_runs(metadata_url, tmp_path):
    """A just-started job (no completed checkpoint yet) whose first savepoint fails -- here a
    file where its savepoint directory should be, removed once that savepoint failed. Before,
    the check fell back to the latest checkpoint at once and failed the upgrade DAG's
    ``preflight`` ("has no completed checkpoint to check"); now it takes another savepoint,
    each attempt a request of its own in the metadata DB (key suffix ``preflight:n``).
    Local runner, SQLite; about 10 s."""
    blocked = tmp_path / "example" / "savepoints"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the savepoint directory should be")
    job_id = start_job(metadata_url, tmp_path, interval_ms=0)  # no periodic checkpoint
    store = MetadataStore(metadata_url)

    def failed_savepoints() -> list:
        return [c for c in store.list_checkpoints(job_id, kind="SAVEPOINT")
                if c.status == "FAILED"]

    def unblock() -> None:
        wait_for(failed_savepoints, 60, "the first savepoint failing")
        blocked.unlink()

    fixer = threading.Thread(target=unblock, daemon=True)
    fixer.start()
    ti = _ti()
    report = VerifyRestoreOperator(task_id="preflight", pipeline=f"{EXAMPLE}:build_v2",
                                   job_name="versioned-sum", take_savepoint=True,
                                   savepoint_attempts=5, savepoint_retry_delay=1).execute({"ti": ti})
    fixer.join(timeout=10)
    savepoints = store.list_checkpoints(job_id, kind="SAVEPOINT")
    assert report["ok"], report
    assert [c.status for c in savepoints][0] == "FAILED"
    assert [c.status for c in savepoints][-1] == "COMPLETED", savepoints
    assert report["snapshot"] == ti.xcom["snapshot"] == savepoints[-1].location
    assert completed_checkpoints(store, job_id) == [], "there was no checkpoint to fall back on"
    assert store.get_job(job_id).status == "RUNNING"
    store.close()


@pytest.mark.timeout(180)
def test_the_preflight_names_why_its_savepoint_failed_when_nothing_else_can_be_checked(
        metadata_url, tmp_path):
    """Every savepoint attempt fails and the job has no checkpoint: the error says so and
    names the savepoint's failure (the file in the way), not only the missing checkpoint."""
    blocked = tmp_path / "example" / "savepoints"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the savepoint directory should be")
    job_id = start_job(metadata_url, tmp_path, interval_ms=0)
    with pytest.raises(AirflowException, match=r"has no completed checkpoint to check \(and "
                       r"the pre-flight savepoint failed: SAVEPOINT request \w+ of job "
                       rf"{job_id} failed: checkpoint 2 failed: declined") as err:
        VerifyRestoreOperator(task_id="preflight", pipeline=f"{EXAMPLE}:build_v2",
                              job_name="versioned-sum", take_savepoint=True,
                              savepoint_attempts=2, savepoint_retry_delay=0).execute(
            {"ti": _ti()})
    print(err.value)
    store = MetadataStore(metadata_url)
    assert [c.status for c in store.list_checkpoints(job_id, kind="SAVEPOINT")] == ["FAILED"] * 2
    store.close()


@pytest.mark.timeout(180)
def test_the_preflight_refuses_a_snapshot_the_restore_would_not_trust(metadata_url, tmp_path,
                                                                      monkeypatch):
    """Issue 54 item 4: the check reads the snapshot's signature against the connection's
    metadata DB, as the job's restore does: a checkpoint of another deployment's DB is
    refused unless trust_snapshot=True."""
    import json

    from airflow_checkpoint_provider.engine.catalog import upgrade_database

    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "60000")  # no checkpoint subsumes it
    job_id = start_job(metadata_url, tmp_path, interval_ms=60000)
    store = MetadataStore(metadata_url)
    store.submit_control_request(job_id, "CHECKPOINT", {})
    wait_for(lambda: completed_checkpoints(store, job_id), 90, "a completed checkpoint")
    location = completed_checkpoints(store, job_id)[-1].location
    store.close()
    other = f"sqlite:///{tmp_path}/other-deployment.db"
    upgrade_database(other)
    monkeypatch.setenv("AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT",
                       json.dumps({"conn_type": "checkpoint_metadata", "extra": {"url": other}}))
    with pytest.raises(AirflowException, match="is untrusted"):
        VerifyRestoreOperator(task_id="verify", pipeline=f"{EXAMPLE}:build_v2",
                              snapshot=location).execute({})
    ok = VerifyRestoreOperator(task_id="verify", pipeline=f"{EXAMPLE}:build_v2",
                               snapshot=location, trust_snapshot=True).execute({})
    assert ok["ok"], ok
