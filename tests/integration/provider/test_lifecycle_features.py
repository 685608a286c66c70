"""Airflow 3 lifecycle features: Deadline Alerts on the savepoint and freshness DAGs, a cron
savepoint schedule, the event trigger behind an AssetWatcher (one event per completed
checkpoint, none for a fenced validation run), and re-attaching a retried submit task to
the job its earlier try started."""

from __future__ import annotations

import asyncio
import time

import pytest
from provider_helpers import EXAMPLE, completed_checkpoints, start_job, wait_for
from savepoint_helpers import FakeTI

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.triggers.events import CheckpointCommittedEventTrigger

REPORT = "airflow_checkpoint_provider.deadlines.report_missed_deadline"


def test_dags_carry_deadline_alerts_a_cron_schedule_and_an_asset_watcher(airflow_db):
    savepoints = airflow_db.get_dag("scheduled_savepoints")
    assert savepoints.timetable.expression == "0 * * * *"
    [alert] = savepoints.deadline
    assert alert.callback.path == REPORT and alert.interval.total_seconds() == 15 * 60
    assert alert.callback.kwargs["what"] == "a savepoint has not completed"
    [fresh] = airflow_db.get_dag("checkpoint_freshness").deadline
    assert fresh.callback.path == REPORT and fresh.interval.total_seconds() == 5 * 60
    committed = airflow_db.get_dag("on_committed_checkpoint")
    [asset] = committed.timetable.asset_condition.objects
    [watcher] = asset.watchers
    assert isinstance(watcher.trigger, CheckpointCommittedEventTrigger)
    assert watcher.trigger.serialize()[1]["job_name"] == "versioned-sum"


async def _collect(trigger, count: int, timeout: float) -> list[dict]:
    out: list[dict] = []

    async def consume():
        async for event in trigger.run():
            out.append(event.payload)
            if len(out) >= count:
                return

    try:
        await asyncio.wait_for(consume(), timeout)
    except TimeoutError:
        pass
    return out


@pytest.mark.timeout(180)
def test_event_trigger_fires_once_per_new_checkpoint_and_never_for_a_fenced_job(
        metadata_url, tmp_path, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "500")
    store = MetadataStore(metadata_url)
    job = start_job(metadata_url, tmp_path, job_name="watched")
    wait_for(lambda: completed_checkpoints(store, job), 60, "a checkpoint")
    before = max(c.checkpoint_id for c in completed_checkpoints(store, job))

    events = asyncio.run(_collect(
        CheckpointCommittedEventTrigger(job_name="watched", poll_interval=0.3), 3, 60))

    ids = [e["checkpoint_id"] for e in events]
    assert len(ids) == 3 and ids == sorted(set(ids)) and ids[0] > before, events
    assert {e["job_id"] for e in events} == {job} and {e["kind"] for e in events} == {"CHECKPOINT"}

    fenced = start_job(metadata_url, tmp_path, job_name="watched-fenced", fence_sinks=True)
    wait_for(lambda: len(completed_checkpoints(store, fenced)) >= 1, 60, "a fenced checkpoint")
    started = time.monotonic()
    quiet = asyncio.run(_collect(
        CheckpointCommittedEventTrigger(job_name="watched-fenced", poll_interval=0.3), 1, 4))
    assert quiet == [], "a fenced job's checkpoints publish nothing: no event"
    assert len(completed_checkpoints(store, fenced)) >= 3, "it did checkpoint meanwhile"
    assert time.monotonic() - started >= 4
    store.close()


@pytest.mark.timeout(120)
def test_missed_deadline_reports_the_jobs_newest_checkpoint(metadata_url, tmp_path):
    from airflow_checkpoint_provider.deadlines import report_missed_deadline

    store = MetadataStore(metadata_url)
    job = start_job(metadata_url, tmp_path, job_name="late")
    wait_for(lambda: completed_checkpoints(store, job), 60, "a checkpoint")

    message = asyncio.run(report_missed_deadline(job_name="late", what="a savepoint has not "
                                                 "completed"))

    assert message.startswith("Deadline missed: a savepoint has not completed of job late "
                              "(RUNNING); newest checkpoint: ")
    assert "s old" in message and "newest savepoint: none" in message
    store.close()


@pytest.mark.timeout(180)
def test_a_retried_submit_task_reattaches_to_the_job_of_its_earlier_try(metadata_url, tmp_path):
    def submit(try_number: int) -> tuple[str, FakeTI]:
        ti = FakeTI("d", "submit", try_number=try_number)
        op = SubmitCheckpointedJobOperator(
            task_id="submit", pipeline=f"{EXAMPLE}:build_v1", job_name="long-running",
            runner="local", log_dir=str(tmp_path / "logs"), report_dir=str(tmp_path / "r"),
            reconnect=False)  # not by name: by the task's own identity
        return op.execute({"ti": ti}), ti

    first, _ = submit(1)
    again, ti = submit(2)  # the worker of try 1 died; the job did not

    store = MetadataStore(metadata_url)
    assert again == first == SubmitCheckpointedJobOperator.job_id_for({"ti": ti}, 1)
    assert ti.xcom["job_id"] == first
    assert [j.job_id for j in store.list_jobs("long-running")] == [first], "no second copy"
    store.close()
