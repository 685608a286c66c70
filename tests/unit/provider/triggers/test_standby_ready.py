"""The standby-ready signal in the provider: the condition and trigger the standby upgrade
waits on, the withdrawal of a waiting standby by ``cancel_v2``, and the workflow's standby
mode (graph and refusals). A real SQLite metadata DB; the standby's rows are written as the
engine's standby writes them (``store.mark_standby_ready`` / ``end_standby``)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from provider_helpers import EXAMPLE, events
from savepoint_helpers import FakeTI

from airflow_checkpoint_provider.operators.control import CancelJobOperator
from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator
from airflow_checkpoint_provider.triggers.standby import StandbyReadyTrigger, check_standby_ready


def _ids() -> tuple[str, str]:
    return uuid.uuid4().hex, uuid.uuid4().hex


def test_check_standby_ready_follows_the_standby_row(store):
    standby, v1 = _ids()
    assert check_standby_ready(store, standby) is None  # not up yet: poll again
    store.mark_standby_ready(job_id=standby, job_name="sum", waits_for_job_id=v1)
    ready = check_standby_ready(store, standby)
    assert ready.status == "success" and ready.payload["waits_for_job_id"] == v1
    store.end_standby(standby, "TAKEN_OVER", restore_location="/sp/1")
    assert check_standby_ready(store, standby).status == "success"  # v1 ended meanwhile
    other, _ = _ids()
    store.mark_standby_ready(job_id=other, job_name="sum", waits_for_job_id=v1)
    store.end_standby(other, "FAILED", detail="RestoreError: no snapshot")
    failed = check_standby_ready(store, other)
    assert failed.status == "error" and "FAILED: RestoreError: no snapshot" in failed.message


def test_standby_ready_trigger_serializes_its_arguments_and_fires_on_ready(store):
    standby, v1 = _ids()
    store.mark_standby_ready(job_id=standby, job_name="sum", waits_for_job_id=v1)
    trigger = StandbyReadyTrigger(job_id=standby, poll_interval=0.1, end_time=time.time() + 30)
    path, kwargs = trigger.serialize()
    assert path == "airflow_checkpoint_provider.triggers.standby.StandbyReadyTrigger"
    assert kwargs["job_id"] == standby
    [event] = events(StandbyReadyTrigger(**kwargs))
    assert event["status"] == "success" and event["job_id"] == standby


def test_standby_ready_trigger_times_out_when_the_standby_never_comes_up(store):
    [event] = events(StandbyReadyTrigger(job_id=uuid.uuid4().hex, poll_interval=0.1,
                                         end_time=time.time() + 0.5))
    assert event["status"] == "timeout"


@pytest.mark.timeout(60)
def test_cancel_withdraws_a_waiting_standby_and_the_guard_finds_nothing_to_remove(store):
    standby, v1 = _ids()
    store.mark_standby_ready(job_id=standby, job_name="sum", waits_for_job_id=v1)

    def engine_side() -> None:  # what runners/standby.py does when it sees the request
        while store.get_standby(standby).cancel_requested_at is None:
            time.sleep(0.05)
        store.end_standby(standby, "CANCELED", detail="withdrawn")

    thread = threading.Thread(target=engine_side, daemon=True)
    thread.start()
    ti = FakeTI("d", "cancel_v2")
    assert CancelJobOperator(task_id="cancel_v2", job=standby, missing_ok=True).execute(
        {"ti": ti}) is None
    thread.join(10)
    assert store.get_standby(standby).status == "CANCELED"
    result = GuardRollbackOperator(task_id="guard_rollback", job=standby,
                                   pipeline=f"{EXAMPLE}:build_v2").execute({"ti": ti})
    assert result["committed"] is False and result["job_id"] is None


def test_standby_mode_starts_v2_before_the_stop_and_offers_only_savepoint_mode(airflow_db):
    dag = airflow_db.get_dag("savepoint_upgrade_standby")
    assert "start_v2" in dag.get_task("stop_v1").upstream_task_ids
    assert "stop_v1" in dag.get_task("cancel_v2").upstream_task_ids
    start = dag.get_task("start_v2")
    assert start.wait_for == "standby_ready" and start.deferrable
    assert start.restore == "standby:{{ params.job_name }}"
    assert dag.params.get_param("upgrade_mode").schema["enum"] == ["savepoint"]


def test_standby_mode_refuses_an_upgrade_mode_other_than_savepoint():
    from airflow.sdk import DAG

    from airflow_checkpoint_provider.workflows import savepoint_upgrade

    with DAG(dag_id="team_standby", schedule=None), pytest.raises(ValueError, match="standby"):
        savepoint_upgrade(pipelines=[f"{EXAMPLE}:build_v1", f"{EXAMPLE}:build_v2"],
                          job_name="sum", standby=True, upgrade_mode="last-state")
