"""Every deferrable wait of the workflows ends with an error naming the job as soon as the
job cannot get there any more, not at the wait's timeout: a standby whose launcher exits
before or after ``READY``, a standby that failed without a job row, a job whose driver
process was killed (first checkpoint, end, Kafka catch-up, savepoint/stop/promote requests),
a job whose heartbeat went stale (control requests, the cut-over's wait for blue, a standby
that took over). Real processes where a process dies (local runner), a real SQLite metadata
DB throughout.

Each wait's own timeout (``end_time``) is :data:`FAR` seconds away, far beyond the test's
pytest-timeout: a test that passes got its error from the condition, never from the
timeout.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from provider_helpers import EXAMPLE, events, running_job, start_job
from savepoint_helpers import FakeTI, make_job

from airflow_checkpoint_provider.hooks.launcher import find_launch, record_launch
from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook
from airflow_checkpoint_provider.triggers.checkpoint import (
    CheckpointCompletedTrigger,
    ControlRequestTrigger,
    JobStateTrigger,
)
from airflow_checkpoint_provider.triggers.cutover import CutOverTrigger
from airflow_checkpoint_provider.triggers.kafka import KafkaCaughtUpTrigger
from airflow_checkpoint_provider.triggers.standby import StandbyReadyTrigger, check_standby_ready

#: seconds until each wait's own timeout: never reached within a test's pytest-timeout
FAR = 600.0


def _far() -> float:
    return time.time() + FAR


def _standby_hook(url: str, tmp_path, v1: str) -> CheckpointSubmitHook:
    """v2 of the example as a standby of job ``v1`` (local runner)."""
    return CheckpointSubmitHook(pipeline=f"{EXAMPLE}:build_v2", job_id=uuid.uuid4().hex,
                                job_name="versioned-sum", metadata_url=url,
                                restore=f"standby:{v1}", runner="local",
                                log_dir=str(tmp_path / "logs"))


def _kill(pid: int) -> None:
    """SIGKILL a process this test started in its own session (and what it started), then
    reap it: it is this process's child."""
    assert os.getpgid(pid) == pid, "not the leader of its own session"
    os.killpg(pid, signal.SIGKILL)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# -- the launch record ---------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_launch_record_says_exited_only_once_the_process_is_gone(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        job_id = uuid.uuid4().hex
        record = record_launch(job_id=job_id, job_name="orders", pid=proc.pid,
                               log_file=str(tmp_path / "none.log"))
        assert find_launch(job_id) == record and not record.exited()
        proc.kill()
        proc.wait()
        assert record.exited()
    finally:
        proc.kill()
        proc.wait()
    # a zombie (exited, not reaped) is gone too; another host proves nothing
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        record = record_launch(job_id=uuid.uuid4().hex, job_name="orders", pid=zombie.pid,
                               log_file="")
        deadline = time.monotonic() + 30
        while not record.exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert record.exited()
    finally:
        zombie.wait()
    assert not dataclasses.replace(record, host="another-host").exited()
    assert find_launch("versioned-sum") is None  # a name, not a job id: no record


# -- standbys --------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_standby_whose_launcher_exits_before_ready_fails_its_wait_naming_the_job(
        metadata_url, store, tmp_path):
    v1 = make_job(store, name="versioned-sum", status="FINISHED")  # nothing left to wait for
    hook = _standby_hook(metadata_url, tmp_path, v1)
    assert hook.submit_detached(until="spawned")["status"] == "SPAWNED"
    [event] = events(StandbyReadyTrigger(job_id=hook.job_id, poll_interval=0.2,
                                         end_time=_far()))
    assert event["status"] == "error", event
    message = event["message"]
    assert f"standby job versioned-sum ({hook.job_id}) has no job row" in message
    assert "its launcher (pid" in message and "exited" in message
    assert "already FINISHED" in message  # the cause, from the launcher's log


@pytest.mark.timeout(120)
def test_the_deferred_standby_submit_fails_when_its_standby_dies_before_ready(
        metadata_url, store, tmp_path):
    from airflow.sdk.exceptions import AirflowException, TaskDeferred

    from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

    v1 = make_job(store, name="versioned-sum", status="FINISHED")
    op = SubmitCheckpointedJobOperator(
        task_id="start_v2", pipeline=f"{EXAMPLE}:build_v2", job_name="versioned-sum",
        restore=f"standby:{v1}", wait_for="standby_ready", deferrable=True, runner="local",
        poll_interval=0.2, log_dir=str(tmp_path / "logs"), report_dir=str(tmp_path / "rep"))
    ti = FakeTI("team_upgrade", "start_v2")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti})
    assert deferred.value.trigger.end_time - time.time() > 200  # start_timeout: 300 s
    [event] = events(deferred.value.trigger)
    assert event["status"] == "error", event
    with pytest.raises(AirflowException, match=rf"standby job versioned-sum \({ti.xcom['job_id']}\)"):
        op.standby_ready_complete({"ti": ti}, event)


@pytest.mark.timeout(180)
def test_a_ready_standby_whose_launcher_dies_refuses_the_stop_and_fails_the_wait_for_v2(
        metadata_url, store, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    from airflow_checkpoint_provider.operators.control import CancelJobOperator
    from airflow_checkpoint_provider.operators.upgrade import StopForUpgradeOperator

    v1 = running_job(metadata_url, tmp_path, store)
    hook = _standby_hook(metadata_url, tmp_path, v1)
    info = hook.submit_detached(until="standby_ready", timeout=120)
    try:
        assert info["status"] == "READY", info
        assert check_standby_ready(store, hook.job_id).status == "success"
        _kill(info["pid"])

        ready = check_standby_ready(store, hook.job_id)
        assert ready.status == "error", ready
        assert f"standby job versioned-sum ({hook.job_id}) said READY" in ready.message
        assert "its launcher (pid" in ready.message

        # stop_v1 of the standby workflow: v1 is not stopped for a standby that is gone
        stop = StopForUpgradeOperator(task_id="stop_v1", job=v1, standby_job=hook.job_id,
                                      directory=str(tmp_path / "example" / "savepoints"),
                                      deferrable=True)
        with pytest.raises(AirflowException, match="keeps running: standby job"):
            stop.execute({"ti": FakeTI("team_upgrade", "stop_v1")})
        assert store.get_job(v1).status == "RUNNING"
        assert not store.list_control_requests(v1)

        # wait_v2_checkpoint (v2's first checkpoint after its restore) ends at once too
        [event] = events(CheckpointCompletedTrigger(job=hook.job_id, after_restore=True,
                                                    poll_interval=0.2, end_time=_far()))
        assert event["status"] == "error" and "said READY" in event["message"], event

        # cancel_v2 does not wait for a withdrawal a dead standby never answers (its wait
        # for the standby's answer given FAR seconds here)
        cancel = CancelJobOperator(task_id="cancel_v2", job=hook.job_id, missing_ok=True)
        assert cancel._withdraw_standby(hook.job_id, timeout=FAR) is None
        assert cancel.execute({"ti": FakeTI("d", "cancel_v2")}) is None
    finally:
        store.request_standby_cancel(hook.job_id)


def test_a_standby_that_failed_without_a_job_row_fails_the_waits_for_its_job(store):
    standby, v1 = uuid.uuid4().hex, make_job(store, name="versioned-sum", status="RUNNING")
    store.mark_standby_ready(job_id=standby, job_name="versioned-sum", waits_for_job_id=v1)
    store.end_standby(standby, "FAILED",
                      detail="RestoreError: standby: job ended CANCELED and left no snapshot")
    for trigger in (CheckpointCompletedTrigger(job=standby, after_restore=True,
                                               poll_interval=0.1, end_time=_far()),
                    JobStateTrigger(job=standby, target_states=["RUNNING"], poll_interval=0.1,
                                    end_time=_far())):
        [event] = events(trigger)
        assert event["status"] == "error", event
        assert f"job versioned-sum ({standby}) is FAILED: RestoreError" in event["message"]


# -- a job whose driver was killed -----------------------------------------------------------


@pytest.mark.timeout(180)
def test_waits_on_a_job_whose_driver_was_killed_fail_within_seconds(
        metadata_url, store, tmp_path, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_INITIAL_DELAY_MS", "600000")  # no checkpoint comes
    job_id = start_job(metadata_url, tmp_path)
    _kill(int(store.get_job(job_id).driver_process.split(":")[0]))
    assert store.get_job(job_id).status == "RUNNING"  # nothing wrote anything since

    [first] = events(CheckpointCompletedTrigger(job=job_id, poll_interval=0.2,
                                                end_time=_far()))
    assert first["status"] == "error", first
    assert f"job versioned-sum ({job_id}) is LOST" in first["message"]
    assert "driver process" in first["message"] and "is gone" in first["message"]
    for trigger in (
            JobStateTrigger(job=job_id, target_states=["FINISHED", "STOPPED"],
                            poll_interval=0.2, end_time=_far()),
            KafkaCaughtUpTrigger(job=job_id, max_lag=0, for_seconds=1, poll_interval=0.2,
                                 end_time=_far())):
        [event] = events(trigger)
        assert event["status"] == "error" and "LOST" in event["message"], (trigger, event)


@pytest.mark.timeout(180)
def test_requests_waiting_on_a_job_whose_driver_was_killed_fail_within_seconds(
        metadata_url, store, tmp_path):
    job_id = start_job(metadata_url, tmp_path)
    pid = int(store.get_job(job_id).driver_process.split(":")[0])
    os.killpg(pid, signal.SIGSTOP)  # it takes the requests, and never answers them
    savepoint = store.submit_control_request(job_id, "SAVEPOINT", {})
    stop = store.submit_control_request(job_id, "STOP_WITH_SAVEPOINT", {})
    promote = store.submit_control_request(job_id, "PROMOTE", {"snapshot": "/sp/savepoint-1"})
    _kill(pid)

    [event] = events(ControlRequestTrigger(request_id=savepoint, poll_interval=0.2,
                                           end_time=_far()))
    assert event["status"] == "error", event
    assert f"SAVEPOINT request {savepoint} of job {job_id} failed" in event["message"]
    assert "LOST" in event["message"] and "is gone" in event["message"]
    for trigger in (  # the cut-over's stop of blue, a promotion of green
            CutOverTrigger(stop_request_id=stop, key="cutover-test", poll_interval=0.2,
                           end_time=_far()),
            ControlRequestTrigger(request_id=promote, then_job_states=["RUNNING"],
                                  poll_interval=0.2, end_time=_far())):
        [event] = events(trigger)
        assert event["status"] == "error" and "LOST" in event["message"], (trigger, event)


# -- a job whose heartbeat went stale (no process on this host to look at) -------------------


def test_waits_on_jobs_whose_heartbeat_went_stale_fail(store, monkeypatch):
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "1")
    blue = make_job(store, name="orders-blue", status="RUNNING")
    savepoint = store.submit_control_request(blue, "SAVEPOINT", {})
    green = make_job(store, name="orders-green", status="RUNNING")
    promote = store.submit_control_request(green, "PROMOTE", {"snapshot": "/sp/savepoint-1"})
    stopped_blue = make_job(store, name="orders-stopping", status="RUNNING")
    standby = uuid.uuid4().hex  # took over, then went silent
    store.mark_standby_ready(job_id=standby, job_name="orders-v2", waits_for_job_id=blue)
    store.end_standby(standby, "TAKEN_OVER", restore_location="/sp/savepoint-1")
    store.create_job(job_id=standby, job_name="orders-v2", parallelism=1)
    store.set_job_status(standby, "RUNNING")
    time.sleep(1.5)  # every one of them is silent for longer than the heartbeat timeout

    [event] = events(ControlRequestTrigger(request_id=savepoint, poll_interval=0.1,
                                           end_time=_far()))
    assert event["status"] == "error" and "LOST" in event["message"], event
    [event] = events(ControlRequestTrigger(request_id=promote, then_job_states=["RUNNING"],
                                           poll_interval=0.1, end_time=_far()))
    assert event["status"] == "error" and "no heartbeat" in event["message"], event
    # the cut-over after blue's stop savepoint: blue must end STOPPED, it went silent
    [event] = events(CutOverTrigger(stop_request_id=None, snapshot="/sp/savepoint-1",
                                    blue_job_id=stopped_blue, key="cutover-stale",
                                    poll_interval=0.1, end_time=_far()))
    assert event["status"] == "error", event
    assert f"({stopped_blue}) ended LOST after its stop savepoint" in event["message"]
    [event] = events(StandbyReadyTrigger(job_id=standby, poll_interval=0.1, end_time=_far()))
    assert event["status"] == "error", event
    assert f"standby job orders-v2 ({standby}) ended LOST after taking over" in event["message"]


# -- the workflow ----------------------------------------------------------------------------


def test_the_standby_workflow_stops_v1_only_while_its_standby_can_take_over(airflow_db):
    standby = airflow_db.get_dag("savepoint_upgrade_standby").get_task("stop_v1")
    assert standby.standby_job == "{{ ti.xcom_pull(task_ids='start_v2', key='job_id') }}"
    assert "standby_job" in standby.template_fields
    plain = airflow_db.get_dag("savepoint_upgrade_restore").get_task("stop_v1")
    assert plain.standby_job is None
