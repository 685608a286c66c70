"""Triggers, sensors' callbacks and the metadata hook against a real SQLite metadata DB whose
rows are written with the store's own writer methods (no job processes: fast)."""

from __future__ import annotations

import asyncio
import importlib
import time
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout
from provider_helpers import events
from sqlalchemy import update

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.catalog.models import JobRow
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor
from airflow_checkpoint_provider.triggers.checkpoint import (
    CheckpointCompletedTrigger,
    ControlRequestTrigger,
    JobStateTrigger,
)


def _job(store, job_id="job-1", name="orders", status="RUNNING", restored_from=None):
    store.create_job(job_id=job_id, job_name=name, parallelism=1, restored_from=restored_from)
    store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=restored_from)
    store.set_job_status(job_id, status)
    return job_id


def _checkpoint(store, job_id, chk, kind="CHECKPOINT"):
    store.add_pending_checkpoint(job_id, chk, kind=kind, trigger_time=datetime.now(UTC),
                                 location=f"/ckpt/chk-{chk}")
    store.complete_checkpoint(job_id, chk, complete_time=datetime.now(UTC), duration_ms=5,
                              state_size=10, checkpointed_size=10, task_stats=[])


@pytest.mark.parametrize("trigger", [
    JobStateTrigger(job="orders", target_states=["RUNNING"], failure_states=["FAILED"],
                    checkpoint_conn_id="c", poll_interval=3, end_time=12.5),
    CheckpointCompletedTrigger(job="orders", kind=None, after_checkpoint_id=4,
                               after_time="2026-01-01T00:00:00+00:00", after_restore=True,
                               min_count=3, require_running=True, checkpoint_conn_id="c",
                               poll_interval=3, end_time=1.0),
    ControlRequestTrigger(request_id="r1", checkpoint_conn_id="c", poll_interval=3, end_time=None),
])
def test_serialize_returns_the_classpath_and_exactly_the_constructor_kwargs(trigger):
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert set(kwargs) == set(type(trigger).__init__.__code__.co_varnames[1:len(kwargs) + 1])


@pytest.mark.timeout(30)
def test_job_state_trigger_fires_one_success_event(store):
    _job(store)
    [event] = events(JobStateTrigger(job="orders", target_states=["RUNNING"], poll_interval=0.1))
    assert event["status"] == "success" and event["job_id"] == "job-1"


@pytest.mark.timeout(30)
def test_failed_job_fires_an_error_with_the_jobs_own_failure_reason(store):
    job = _job(store)
    store.set_job_status(job, "FAILED", failure_reason="task 1.0 failed: boom")
    [event] = events(CheckpointCompletedTrigger(job=job, poll_interval=0.1))
    assert event["status"] == "error" and "task 1.0 failed: boom" in event["message"]


@pytest.mark.timeout(30)
def test_unknown_job_times_out_with_one_timeout_event(store):
    [event] = events(JobStateTrigger(job="nope", target_states=["RUNNING"], poll_interval=0.05,
                                     end_time=time.time() + 0.3))
    assert event["status"] == "timeout"


@pytest.mark.timeout(30)
def test_checkpoint_trigger_counts_only_newer_checkpoints_after_a_restore(store):
    job = _job(store, restored_from="/sp/savepoint-1")
    for chk in (1, 2, 3):
        _checkpoint(store, job, chk)
    [event] = events(CheckpointCompletedTrigger(job=job, after_checkpoint_id=1, min_count=2,
                                                after_restore=True, poll_interval=0.1))
    assert event["status"] == "success" and event["checkpoint_id"] == 3 and event["count"] == 2
    [event] = events(CheckpointCompletedTrigger(job=job, after_checkpoint_id=2, min_count=2,
                                                poll_interval=0.05, end_time=time.time() + 0.3))
    assert event["status"] == "timeout"


@pytest.mark.timeout(30)
def test_after_restore_fails_at_once_for_a_job_that_restored_nothing(store):
    job = _job(store)
    [event] = events(CheckpointCompletedTrigger(job=job, after_restore=True, poll_interval=0.1))
    assert event["status"] == "error" and "did not restore" in event["message"]


@pytest.mark.timeout(30)
def test_control_request_trigger_reports_success_result_and_failure_error(store):
    job = _job(store)
    ok = store.submit_control_request(job, "SAVEPOINT", {})
    store.finish_control_request(ok, status="SUCCEEDED", result={
        "checkpoint_id": 7, "location": "/sp/savepoint-job-7", "kind": "SAVEPOINT"})
    bad = store.submit_control_request(job, "CHECKPOINT", {})
    store.finish_control_request(bad, status="FAILED", error="CHECKPOINT declined: not running")
    [event] = events(ControlRequestTrigger(request_id=ok, poll_interval=0.1))
    assert event["status"] == "success" and event["location"] == "/sp/savepoint-job-7"
    [event] = events(ControlRequestTrigger(request_id=bad, poll_interval=0.1))
    assert event["status"] == "error" and "declined: not running" in event["message"]


@pytest.mark.timeout(30)
def test_polling_does_not_block_the_event_loop(store, monkeypatch):
    """Every DB call sleeps 0.3 s (a slow DB); a ticker on the same loop ticks during the
    calls. A call made on the loop's thread would block it: no tick could fall inside one."""
    _job(store, status="CREATED")
    slow = MetadataStore.resolve_job
    calls: list[tuple[float, float]] = []

    def slow_resolve(self, ref):
        start = time.monotonic()
        time.sleep(0.3)
        calls.append((start, time.monotonic()))
        return slow(self, ref)

    monkeypatch.setattr(MetadataStore, "resolve_job", slow_resolve)

    async def scenario():
        ticks: list[float] = []

        async def ticker():
            while True:
                await asyncio.sleep(0.01)
                ticks.append(time.monotonic())

        task = asyncio.create_task(ticker())
        trigger = JobStateTrigger(job="orders", target_states=["RUNNING"], poll_interval=0.01,
                                  end_time=time.time() + 1.0)
        got = [e.payload async for e in trigger.run()]
        task.cancel()
        return got, ticks

    got, ticks = asyncio.run(scenario())
    assert [e["status"] for e in got] == ["timeout"]
    assert calls, "the trigger polled the DB"
    during = [t for t in ticks if any(a < t < b for a, b in calls)]
    assert during, "the event loop stood still during every DB call"


def test_hook_reads_the_url_from_extra_host_or_postgres_fields():
    from airflow.sdk import Connection

    url = CheckpointMetadataHook.url_from_connection
    assert url(Connection(conn_id="a", conn_type="checkpoint_metadata",
                          extra='{"url": "sqlite:////x/m.db"}')) == "sqlite:////x/m.db"
    assert url(Connection(conn_id="b", conn_type="checkpoint_metadata",
                          host="/data/m.db")) == "/data/m.db"
    pg = url(Connection(conn_id="c", conn_type="checkpoint_metadata", host="db", port=5432,
                        schema="ckpt", login="u", password="p@ss"))
    assert pg == "postgresql+psycopg://u:p%40ss@db:5432/ckpt"
    with pytest.raises(ValueError, match="names no metadata DB"):
        url(Connection(conn_id="d", conn_type="checkpoint_metadata"))


def test_hook_returns_the_engines_records(store):
    _job(store)
    _checkpoint(store, "job-1", 1)
    hook = CheckpointMetadataHook()
    try:
        assert hook.resolve_job("orders").job_id == "job-1"
        assert [c.checkpoint_id for c in hook.list_checkpoints("job-1")] == [1]
        assert hook.latest_completed_checkpoint(job_name="orders").location == "/ckpt/chk-1"
        assert hook.find_job("unknown") is None
    finally:
        hook.close()


def test_callbacks_fail_on_error_timeout_and_unknown_statuses():
    sensor = CheckpointCompletedSensor(task_id="s", job="orders", deferrable=True)
    assert sensor.execute_complete({}, {"status": "success", "message": "ok", "job_id": "j"})
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, {"status": "timeout", "message": "late"})
    with pytest.raises(AirflowException, match="boom"):
        sensor.execute_complete({}, {"status": "error", "message": "boom"})
    with pytest.raises(AirflowException, match="unknown trigger event status"):
        sensor.execute_complete({}, {"status": "weird", "message": "?"})
    for event in ({"status": "weird"}, {"status": "error", "message": "boom"}, None):
        with pytest.raises(AirflowException):
            CheckpointBaseOperator.check_event(event)


def test_sensor_trigger_carries_the_deadline_and_criteria():
    sensor = CheckpointCompletedSensor(task_id="s", job="j", min_count="3", after_checkpoint_id="5",
                                       after_time="2026-01-01T00:00:00", timeout=60,
                                       poke_interval=2)
    trigger = sensor.trigger(end_time=100.0)
    _, kwargs = trigger.serialize()
    assert kwargs["min_count"] == 3 and kwargs["after_checkpoint_id"] == 5
    assert kwargs["after_time"] == "2026-01-01T00:00:00+00:00" and kwargs["end_time"] == 100.0
    assert datetime.fromisoformat(kwargs["after_time"]) < datetime.now(UTC) - timedelta(days=1)


def test_a_job_name_resolves_to_its_active_job_before_a_newer_ended_one(store):
    _job(store, job_id="v2-failed", status="FAILED")  # newer (below), but ended
    _job(store, job_id="v1-again", status="RUNNING")  # one live job per name: created last
    with store.engine.begin() as conn:
        conn.execute(update(JobRow).where(JobRow.job_id == "v2-failed")
                     .values(created_at=datetime.now(UTC) + timedelta(hours=1)))
    hook = CheckpointMetadataHook()
    try:
        assert store.resolve_job("orders").job_id == "v1-again"
        assert hook.resolve_job("orders").job_id == "v1-again"
        assert hook.resolve_job("v2-failed").job_id == "v2-failed"
    finally:
        hook.close()


@pytest.mark.timeout(30)
def test_a_request_answered_soon_is_seen_within_the_fast_poll_not_the_poll_interval(store):
    """Issue 41: a cut-over's steps end within seconds; a fixed 5 s poll added up to 5 s of
    latency per step. The first FAST_PHASE_SECONDS of a wait poll every FAST_POLL_SECONDS."""
    import threading

    from airflow_checkpoint_provider.triggers.checkpoint import FAST_POLL_SECONDS, poll_delay

    job = _job(store)
    rid = store.submit_control_request(job, "SAVEPOINT", {})
    answered: list[float] = []

    def answer() -> None:
        store.finish_control_request(rid, status="SUCCEEDED", result={"location": "/sp"})
        answered.append(time.monotonic())

    threading.Timer(0.6, answer).start()
    [event] = events(ControlRequestTrigger(request_id=rid, poll_interval=5.0))
    seen = time.monotonic()
    assert event["status"] == "success"
    assert seen - answered[0] < 1.5, f"seen {seen - answered[0]:.2f} s after the answer"
    assert poll_delay(0.0, 5.0) == FAST_POLL_SECONDS and poll_delay(600.0, 5.0) == 5.0
    assert poll_delay(0.0, 0.05) == 0.05  # a shorter configured interval is kept
