"""KafkaCaughtUpSensor and KafkaCaughtUpTrigger against a real SQLite metadata DB whose
checkpoints carry Kafka lag in their task statistics, written with the store's own methods
(no job processes): the caught-up span, what breaks it, errors, ownership, deferral."""

from __future__ import annotations

import importlib
import time
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from provider_helpers import events
from savepoint_helpers import FakeTI

from airflow_checkpoint_provider.engine.connectors.kafka.lag import merge_task_lag, partition_lag
from airflow_checkpoint_provider.ownership import JobOwnershipError
from airflow_checkpoint_provider.sensors.kafka import KafkaCaughtUpSensor
from airflow_checkpoint_provider.triggers.kafka import KafkaCaughtUpTrigger

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
START = datetime(2026, 1, 1)


def _job(store, job_id="job-k", name="orders", status="RUNNING", dag_id=None):
    if dag_id:  # reserved before the row is created, as the submit operator does
        store.reserve_job_owner(job_id, dag_id)
    store.create_job(job_id=job_id, job_name=name, parallelism=2)
    store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=None)
    store.set_job_status(job_id, status)
    return job_id


def _stats(lags: dict[str, int | None]) -> list[dict]:
    """One task per partition, each with its lag (``None``: unknown)."""
    return [{"vertex": 0, "subtask": i, "source_lag": {"in": merge_task_lag(
        None, split, partition_lag(None if lag is None else 100, 100 - (lag or 0)))}}
        for i, (split, lag) in enumerate(lags.items())]


def _checkpoints(store, job_id, totals, *, every_s=2.0, stats=None):
    """Completed checkpoints 1..n, triggered every ``every_s`` from T0, lag split over two
    partitions (``None``: one partition unknown)."""
    for n, total in enumerate(totals, 1):
        at = T0 + timedelta(seconds=every_s * (n - 1))
        store.add_pending_checkpoint(job_id, n, kind="CHECKPOINT", trigger_time=at,
                                     location=f"/ckpt/chk-{n}")
        task_stats = stats if stats is not None else _stats(
            {"orders:0": None if total is None else total // 2,
             "orders:1": None if total is None else total - total // 2})
        store.complete_checkpoint(job_id, n, complete_time=at + timedelta(milliseconds=50),
                                  duration_ms=50, state_size=1, checkpointed_size=1,
                                  task_stats=task_stats)


def test_serialize_returns_the_classpath_and_exactly_the_constructor_kwargs():
    trigger = KafkaCaughtUpTrigger(job="orders", max_lag=5, for_seconds=10.0,
                                   after_time="2026-01-01T00:00:00+00:00", checkpoint_conn_id="c",
                                   poll_interval=3, end_time=12.5,
                                   access={"dag_id": "d", "allowed": []})
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert classpath == "airflow_checkpoint_provider.triggers.kafka.KafkaCaughtUpTrigger"


@pytest.mark.timeout(30)
def test_fires_once_the_lag_stayed_within_the_bound_for_the_span(store):
    job = _job(store)
    _checkpoints(store, job, [900, 40, 4, 0, 1])  # within 5 from checkpoint 3 on: 4 s
    [event] = events(KafkaCaughtUpTrigger(job="orders", max_lag=5, for_seconds=4,
                                          poll_interval=0.05))
    assert event["status"] == "success", event
    assert event["job_id"] == job and event["checkpoint_id"] == 5 and event["total_lag"] == 1
    assert event["partitions"] == {"orders:0": 0, "orders:1": 1}
    assert event["caught_up_since"] == (T0 + timedelta(seconds=4)).isoformat()
    assert event["seconds"] == 4.0
    assert "checkpoints 3 to 5" in event["message"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("totals", [
    [0, 0, 0, 9],        # the newest checkpoint is above the bound: the span starts over
    [0, 0, None, 0],     # an unknown lag breaks the span like a lag above it
    [900, 0, 0],         # within the bound for 2 s only
])
def test_does_not_fire_before_the_lag_stayed_within_the_bound_long_enough(store, totals):
    _checkpoints(store, _job(store), totals)
    [event] = events(KafkaCaughtUpTrigger(job="orders", max_lag=5, for_seconds=4,
                                          poll_interval=0.05, end_time=time.time() + 0.5))
    assert event["status"] == "timeout", event
    assert "to catch up with Kafka" in event["message"]


@pytest.mark.timeout(30)
def test_for_seconds_zero_needs_one_checkpoint_within_the_bound(store):
    _checkpoints(store, _job(store), [900, 3])
    [event] = events(KafkaCaughtUpTrigger(job="orders", max_lag=3, for_seconds=0,
                                          poll_interval=0.05))
    assert event["status"] == "success" and event["checkpoint_id"] == 2


@pytest.mark.timeout(30)
def test_only_checkpoints_after_after_time_count(store):
    _checkpoints(store, _job(store), [0, 0, 0, 0])  # at T0, +2, +4, +6
    after = (T0 + timedelta(seconds=3)).isoformat()
    [event] = events(KafkaCaughtUpTrigger(job="orders", max_lag=0, for_seconds=4,
                                          after_time=after, poll_interval=0.05,
                                          end_time=time.time() + 0.5))
    assert event["status"] == "timeout"  # checkpoints 3 and 4 span 2 s only


@pytest.mark.timeout(30)
def test_a_job_that_ended_or_reads_no_kafka_fails_the_wait(store):
    job = _job(store)
    _checkpoints(store, job, [900])
    store.set_job_status(job, "FAILED", failure_reason="task 1.0 failed: broker gone")
    [event] = events(KafkaCaughtUpTrigger(job="orders", max_lag=0, for_seconds=0,
                                          poll_interval=0.05))
    assert event["status"] == "error" and "broker gone" in event["message"]

    other = _job(store, job_id="job-p", name="files")
    _checkpoints(store, other, [0], stats=[{"vertex": 0, "subtask": 0, "records": {}}])
    [event] = events(KafkaCaughtUpTrigger(job="files", max_lag=0, for_seconds=0,
                                          poll_interval=0.05))
    assert event["status"] == "error" and "reads no Kafka topic" in event["message"]


@pytest.mark.timeout(30)
def test_a_restarting_job_is_not_caught_up_until_it_runs_again(store):
    job = _job(store, status="RESTARTING")
    _checkpoints(store, job, [0, 0])
    [event] = events(KafkaCaughtUpTrigger(job="orders", max_lag=0, for_seconds=0,
                                          poll_interval=0.05, end_time=time.time() + 0.4))
    assert event["status"] == "timeout"


@pytest.mark.timeout(30)
def test_the_sensor_decides_from_the_db_first_and_defers_otherwise(store, monkeypatch):
    job = _job(store)
    _checkpoints(store, job, [50, 50])
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    with DAG("kafka_dag", schedule=None, start_date=START):
        sensor = KafkaCaughtUpSensor(task_id="caught_up", job=job, max_lag="10",
                                     for_seconds="2", poke_interval=0.5, timeout=60)
    assert sensor.deferrable  # Airflow's [operators] default_deferrable
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": FakeTI("kafka_dag", "caught_up")})
    trigger = deferred.value.trigger
    assert isinstance(trigger, KafkaCaughtUpTrigger)
    assert (trigger.job, trigger.max_lag, trigger.for_seconds) == (job, 10, 2.0)
    assert trigger.access == {"dag_id": "kafka_dag", "allowed": []}
    for n, total in [(3, 8), (4, 0)]:  # within 10 since checkpoint 3: 2 s
        at = T0 + timedelta(seconds=2 * (n - 1))
        store.add_pending_checkpoint(job, n, kind="CHECKPOINT", trigger_time=at,
                                     location=f"/ckpt/chk-{n}")
        store.complete_checkpoint(job, n, complete_time=at, duration_ms=1, state_size=1,
                                  checkpointed_size=1,
                                  task_stats=_stats({"orders:0": total, "orders:1": 0}))
    result = sensor.execute({"ti": FakeTI("kafka_dag", "caught_up")})
    assert result["status"] == "success" and result["checkpoint_id"] == 4
    with pytest.raises(AirflowFailException, match="unknown trigger|lag"):
        sensor.execute_complete({}, {"status": "error", "message": "job lag error"})


@pytest.mark.timeout(30)
def test_the_sensor_and_its_trigger_refuse_another_dags_job(store):
    job = _job(store, dag_id="team_b")
    _checkpoints(store, job, [0, 0])
    with DAG("dag_a", schedule=None, start_date=START):
        sensor = KafkaCaughtUpSensor(task_id="caught_up", job=job, max_lag=0, for_seconds=0,
                                     deferrable=True, timeout=5)
        allowed = KafkaCaughtUpSensor(task_id="allowed", job=job, max_lag=0, for_seconds=0,
                                      allowed_owner_dags=["team_b"], timeout=5)
    with pytest.raises(JobOwnershipError, match="belongs to DAG 'team_b'"):
        sensor.execute({"ti": FakeTI("dag_a", "caught_up")})
    [event] = events(sensor.trigger(end_time=time.time() + 5))
    assert event["status"] == "error" and "belongs to DAG 'team_b'" in event["message"]
    assert allowed.execute({"ti": FakeTI("dag_a", "allowed")})["status"] == "success"
