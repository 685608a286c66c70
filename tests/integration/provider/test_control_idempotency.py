"""Control operators are idempotent across Airflow retries and deferral races: a later try of
the same task instance finds the request of its earlier try instead of issuing another."""

from __future__ import annotations

import os

import pytest
from provider_helpers import EXAMPLE, start_job, wait_for
from savepoint_helpers import FakeTI, make_job, make_savepoint

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
from airflow_checkpoint_provider.operators.control import StopWithSavepointOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

#: the DAG run whose tasks are retried (idempotency keys derive from it)
DAG, RUN = "savepoint_upgrade_restore", "manual__race"


def _requests(store: MetadataStore, job_id: str):
    from sqlalchemy import select

    from airflow_checkpoint_provider.engine.catalog.models import ControlRequestRow

    with store.engine.connect() as conn:
        return conn.execute(select(ControlRequestRow.request_id, ControlRequestRow.status)
                            .where(ControlRequestRow.job_id == job_id)).all()


@pytest.mark.timeout(180)
def test_a_stop_retried_after_its_request_was_answered_succeeds_with_the_same_savepoint(
        metadata_url, tmp_path):
    from airflow.sdk.exceptions import TaskDeferred

    v1 = start_job(metadata_url, tmp_path)
    savepoints = str(tmp_path / "example" / "savepoints")  # an allowed savepoint root
    stop = dict(task_id="stop_v1", job="versioned-sum", directory=savepoints, poll_interval=0.2,
                report_dir=str(tmp_path / "reports"))
    store = MetadataStore(metadata_url)

    # try 1 submits the request and defers; then Airflow loses the task (the deferral race
    # marks it failed) while the job answers the request and stops
    first = FakeTI(DAG, "stop_v1", RUN, try_number=1)
    with pytest.raises(TaskDeferred) as deferred:
        StopWithSavepointOperator(deferrable=True, **stop).execute({"ti": first})
    trigger = deferred.value.trigger
    assert trigger.then_job_states == ["STOPPED", "FINISHED"]  # one deferral per try
    wait_for(lambda: store.get_job(v1).status != "RUNNING", 60, "v1 to stop")
    assert store.get_job(v1).status == "STOPPED"
    [(request_id, status)] = _requests(store, v1)
    assert status == "SUCCEEDED" and first.xcom["request_id"] == request_id

    # try 2 (the Airflow retry) finds its own request and succeeds with its savepoint; though
    # deferrable, without a deferral: the request it finds was answered (no second round trip
    # through the triggerer, which could lose the deferral race again)
    second = FakeTI(DAG, "stop_v1", RUN, try_number=2)
    savepoint = StopWithSavepointOperator(deferrable=True, **stop).execute({"ti": second})

    assert second.xcom["request_id"] == request_id and len(_requests(store, v1)) == 1
    result = store.get_control_request(request_id).result
    assert savepoint == result["location"] and os.path.isdir(savepoint)
    assert savepoint.startswith(savepoints)

    # and the rollback path restarts v1 from it
    restart = SubmitCheckpointedJobOperator(
        task_id="restart_v1", pipeline=f"{EXAMPLE}:build_v1", job_name="versioned-sum",
        restore=savepoint, wait_for="running", runner="local", log_dir=str(tmp_path / "logs"),
        report_dir=str(tmp_path / "reports"))
    restarted = restart.execute({"ti": FakeTI(DAG, "restart_v1", RUN, try_number=1)})
    job = store.get_job(restarted)
    assert restarted != v1 and job.status == "RUNNING" and job.restored_from == savepoint
    store.close()


@pytest.mark.timeout(120)
def test_another_task_instance_gets_its_own_request(metadata_url, tmp_path):
    from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator

    job_id = start_job(metadata_url, tmp_path)
    op = dict(job="versioned-sum", directory=str(tmp_path / "example" / "savepoints"), poll_interval=0.2,
              report_dir=str(tmp_path / "reports"))
    a = TriggerSavepointOperator(task_id="savepoint_a", **op).execute({"ti": FakeTI(DAG, "savepoint_a", RUN, try_number=1)})
    again = TriggerSavepointOperator(task_id="savepoint_a", **op).execute({"ti": FakeTI(DAG, "savepoint_a", RUN, try_number=2)})
    b = TriggerSavepointOperator(task_id="savepoint_b", **op).execute({"ti": FakeTI(DAG, "savepoint_b", RUN, try_number=1)})

    assert again == a and b != a
    with MetadataStore(metadata_url) as store:
        assert len(_requests(store, job_id)) == 2


@pytest.mark.timeout(180)
def test_a_retry_after_a_failed_request_submits_a_new_one(metadata_url, tmp_path):
    """Retries exist for failures: a try whose earlier try's savepoint request FAILED (here:
    declined, a directory outside the allowed roots; in CI: a savepoint of a just-started job)
    submits a new request instead of failing again on the old one; an answered one is reused."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator

    v1 = start_job(metadata_url, tmp_path)
    store = MetadataStore(metadata_url)
    common = dict(task_id="savepoint_blue", job="versioned-sum", poll_interval=0.2,
                  report_dir=str(tmp_path / "reports"), emit_asset=False)
    with pytest.raises(AirflowException, match="outside the allowed roots"):
        TriggerSavepointOperator(directory=str(tmp_path / "elsewhere"), **common).execute(
            {"ti": FakeTI(DAG, "savepoint_blue", RUN, try_number=1)})
    assert [s for _, s in _requests(store, v1)] == ["FAILED"]

    allowed = str(tmp_path / "example" / "savepoints")
    second = FakeTI(DAG, "savepoint_blue", RUN, try_number=2)
    location = TriggerSavepointOperator(directory=allowed, **common).execute({"ti": second})
    assert location.startswith(allowed) and os.path.isdir(location)
    assert sorted(s for _, s in _requests(store, v1)) == ["FAILED", "SUCCEEDED"]

    # a third try (e.g. a deferral race after success) reuses the answered request
    third = FakeTI(DAG, "savepoint_blue", RUN, try_number=3)
    assert TriggerSavepointOperator(directory=allowed, **common).execute({"ti": third}) == location
    assert third.xcom["request_id"] == second.xcom["request_id"] and len(_requests(store, v1)) == 2
    store.close()


@pytest.mark.timeout(120)
def test_a_stop_submitted_while_the_job_is_still_starting_waits_for_its_tasks_and_succeeds(
        metadata_url, tmp_path):
    """The upgrade DAG's ``stop_v1`` on a job whose tasks are still starting (row CREATED):
    the job holds the request until every task runs, then takes the savepoint and stops, in
    one request -- a just-started job does not decline it (nothing to retry). Local runner,
    SQLite; a few seconds."""
    import subprocess
    import sys

    with open(tmp_path / "v1.out", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "run",
             f"{EXAMPLE}:build_v1", "--job-name", "versioned-sum", "--runner", "local",
             "--db", metadata_url], stdout=out, stderr=subprocess.STDOUT)
    store = MetadataStore(metadata_url)
    try:
        job = wait_for(lambda: store.list_jobs(), 60, "the job row", interval=0.005)[0]
        assert job.status == "CREATED", "the request must reach a job still starting"
        ti = FakeTI(DAG, "stop_v1", RUN, try_number=1)
        savepoint = StopWithSavepointOperator(
            task_id="stop_v1", job=job.job_id, poll_interval=0.2,
            report_dir=str(tmp_path / "reports")).execute({"ti": ti})
        assert _requests(store, job.job_id) == [(ti.xcom["request_id"], "SUCCEEDED")]
        assert store.get_job(job.job_id).status == "STOPPED"
        [sp] = store.list_checkpoints(job.job_id, kind="SAVEPOINT")
        assert sp.status == "COMPLETED" and sp.location == savepoint and os.path.isdir(savepoint)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        store.close()


def test_a_retry_whose_stop_request_failed_while_the_job_stopped_takes_the_final_savepoint(
        store, tmp_path):
    """Decided from the metadata DB: the earlier try's request is FAILED, yet the job is
    STOPPED, so its stop savepoint completed (a job is STOPPED by nothing else). The retry
    hands over that final savepoint instead of failing on the STOPPED job as every retry
    did before (CI: stop_blue failed 3 times, blue STOPPED, the fenced green cancelled)."""
    from airflow.sdk.exceptions import TaskDeferred

    blue = make_job(store, name="orders-blue", status="RUNNING")
    first = FakeTI("blue_green_upgrade", "stop_blue", RUN, try_number=1)
    key = CheckpointBaseOperator.idempotency_key({"ti": first})
    request = store.submit_control_request(blue, "STOP_WITH_SAVEPOINT", {}, idempotency_key=key)
    store.finish_control_request(request, status="FAILED", error="job ended with status STOPPED")
    final = make_savepoint(store, tmp_path, blue, 12, hours_old=0.001)
    store.set_job_status(blue, "STOPPED")

    retry = FakeTI("blue_green_upgrade", "stop_blue", RUN, try_number=2)
    op = StopWithSavepointOperator(task_id="stop_blue", job="orders-blue",
                                   report_dir=str(tmp_path / "reports"))
    assert op.execute({"ti": retry}) == final
    assert retry.xcom["savepoint_path"] == final and retry.xcom["checkpoint_id"] == 12
    assert retry.xcom["request_id"] == request and len(_requests(store, blue)) == 1

    # a FAILED request of a job that still runs is not a stop: a new request is submitted
    other = make_job(store, name="orders-other", status="RUNNING")
    ti = FakeTI("blue_green_upgrade", "stop_other", RUN, try_number=1)
    failed = store.submit_control_request(other, "STOP_WITH_SAVEPOINT", {},
                                          idempotency_key=CheckpointBaseOperator.idempotency_key({"ti": ti}))
    store.finish_control_request(failed, status="FAILED", error="checkpoint 3 failed: expired")
    op = StopWithSavepointOperator(task_id="stop_other", job="orders-other", deferrable=True)
    with pytest.raises(TaskDeferred):
        op.execute({"ti": FakeTI("blue_green_upgrade", "stop_other", RUN, try_number=2)})
    assert len(_requests(store, other)) == 2
