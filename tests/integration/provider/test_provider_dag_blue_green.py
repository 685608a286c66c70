"""DAG blue_green_upgrade end to end with dag.test() (local runner, real SQLite metadata DB):
promotion when green is stable (exactly-once: green validated fenced, then restarted from
blue's final snapshot; with a human approval, and in last-state mode), and the abort paths:
a rejection at the approval step, a green that cannot restore blue's savepoint (pre-flight),
one that fails, one that keeps restarting and one that lags. Each abort cancels green and
leaves blue running."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from provider_helpers import (
    EXAMPLE,
    completed_checkpoints,
    run_dag,
    running_job,
    wait_for,
    xcom,
)

pytestmark = pytest.mark.usefixtures("airflow_db")

CUTOVER = ("approval", "approve", "no_approval_needed", "stop_blue", "fenced_cutover",
           "preflight_final", "promote_green", "needs_resubmit", "end_validation", "go_live")
ABANDONED = {"check_conf": "success", "copy_cdc_slots": "success", "savepoint_blue": "success", "preflight": "success", "start_green": "success",
             "health_gate": "failed", **dict.fromkeys(CUTOVER, "upstream_failed"),
             "cancel_green": "success", "keep_blue": "success"}
PROMOTED = {"check_conf": "success", "copy_cdc_slots": "success", "savepoint_blue": "success", "preflight": "success", "start_green": "success",
            "health_gate": "success", "approval": "success", "approve": "skipped",
            "no_approval_needed": "success", "stop_blue": "success", "fenced_cutover": "success",
            "preflight_final": "skipped", "promote_green": "success",
            "needs_resubmit": "success", "end_validation": "skipped", "go_live": "skipped",
            "cancel_green": "skipped", "keep_blue": "skipped"}
#: in_place off (or refused): the fenced green is cancelled and submitted again
RESUBMITTED = {**PROMOTED, "preflight_final": "success", "end_validation": "success",
               "go_live": "success"}


@pytest.fixture
def logs(capsys, caplog):
    """The task logs of dag.test() so far: operators log to stdout, @task functions through
    the logging module."""
    def read() -> str:
        out = capsys.readouterr()
        return out.out + out.err + caplog.text
    return read


@pytest.fixture(autouse=True)
def _example_env(monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "1000")
    # 200 records/s: what the throughput criterion compares (a running job's CPU grows with it)
    monkeypatch.setenv("CKPT_EXAMPLE_RATE", "200")


def _conf(tmp_path, **overrides) -> dict:
    # every param, every time: dag.test() keeps a run's conf in the shared DAG object's params
    conf = {"blue_job": "sum-blue", "green_job": "sum-green",
            "green_pipeline": f"{EXAMPLE}:build_v2",
            # under the example's savepoint root; $CKPT_EXAMPLE_DIR is the worker's (fixture)
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            "job_env": {}, "min_checkpoints": 2,
            "gate_window_s": 8, "max_restarts": 0, "max_checkpoint_duration_ms": 30000,
            "min_throughput_ratio": 0.8, "max_watermark_lag_growth_ms": None,
            "max_backlog_growth_ms": None, "exactly_once": True, "handover": "savepoint",
            "cutover": "savepoint", "max_checkpoint_age_s": None, "require_approval": False,
            "in_place": True}
    conf.update(overrides)
    return conf


class FakeUser:
    """The user a HITL response is recorded for (what the api-server's auth gives)."""

    def get_id(self) -> str:
        return "reviewer"

    def get_name(self) -> str:
        return "Reviewer"


def respond_when_asked(dag_id: str, task_id: str, option: str, timeout: float = 900) -> dict:
    """In a thread: once ``task_id`` waits for input (AWAITING_INPUT), answer ``option``
    through the same code as the HITL REST API (``PATCH .../hitlDetails``). It gives up when
    the DAG's run started after it ended without asking (or after ``timeout``): on a loaded
    machine the question may come minutes later, and unanswered, dag.test() waits for an
    answer for the approval's whole response timeout (24 h)."""
    from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
    from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    outcome: dict = {}
    since = datetime.now(UTC)

    def answer() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with create_session() as session:
                run = session.query(DagRun).filter(DagRun.dag_id == dag_id,
                                                   DagRun.start_date >= since).first()
                if run is not None and run.state != DagRunState.RUNNING:
                    return  # ended without asking
                ti = session.query(TaskInstance).filter(
                    TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id,
                    TaskInstance.state == TaskInstanceState.AWAITING_INPUT).first()
                if ti is not None:
                    update_hitl_detail(dag_id=dag_id, dag_run_id=ti.run_id, task_id=task_id,
                                       update_hitl_detail_payload=UpdateHITLDetailPayload(
                                           chosen_options=[option]),
                                       user=FakeUser(), session=session)
                    outcome["answered"] = option
                    return
            time.sleep(0.5)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def committed_output(example_dir) -> dict[str, list[int]]:
    """Per key, the counts the file sink committed (running sums: 1..n once each, if every
    record was published exactly once)."""
    from airflow_checkpoint_provider.engine import read_committed

    counts: dict[str, list[int]] = defaultdict(list)
    for r in read_committed(str(example_dir / "output")):
        counts[r["key"]].append(r["count"])
    return counts


def assert_exactly_once(counts: dict[str, list[int]]) -> tuple[int, int]:
    duplicates = sum(len(c) - len(set(c)) for c in counts.values())
    missing = sum(max(c) - len(set(c)) for c in counts.values())
    assert (duplicates, missing) == (0, 0), counts
    return duplicates, missing


def _promoted(store, dr, blue, tmp_path, *, handover="savepoint", in_place=True) -> None:
    snapshot = xcom(dr, "savepoint_blue")
    fenced = store.get_job(xcom(dr, "start_green", key="job_id"))
    final = xcom(dr, "stop_blue")
    out = tmp_path / "example" / "output"
    assert xcom(dr, "promote_green", key="promoted") is in_place
    if in_place:  # the same job (and application) went live: no new submit
        live = fenced
        attempts = store.list_attempts(live.job_id)
        assert [a.restored_from for a in attempts] == [snapshot, final], attempts
    else:
        live = store.get_job(xcom(dr, "go_live", key="job_id"))
        assert fenced.restored_from == snapshot and fenced.status == "CANCELED"
        assert not [n for n in os.listdir(out) if fenced.job_id in n], "fenced green published"
    assert fenced.job_name == live.job_name == "sum-green" and live.version == "v2"
    assert live.status == "RUNNING" and live.restored_from == final
    assert store.get_job(blue).status in ("STOPPED", "CANCELED")
    wait_for(lambda: len(completed_checkpoints(store, live.job_id)) >= 2, 60,
             "two checkpoints of green live")
    counts = committed_output(tmp_path / "example")
    assert [n for n in os.listdir(out) if live.job_id in n], "green live publishes"
    print("blue-green DAG output (duplicates, missing):", assert_exactly_once(counts),
          "rows", sum(len(c) for c in counts.values()))


@pytest.mark.timeout(240)
def test_healthy_green_is_approved_promoted_exactly_once_and_blue_stopped(
        airflow_db, metadata_url, store, tmp_path):
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")
    responder = respond_when_asked("blue_green_upgrade", "approve", "Approve")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, require_approval=True))

    assert responder.get("answered") == "Approve"
    assert tis == {**PROMOTED, "approve": "success", "no_approval_needed": "skipped"}
    assert state == "success"
    verdict = xcom(dr, "health_gate")
    green = xcom(dr, "start_green", key="job_id")
    assert verdict["ok"] and verdict["job_id"] == green and verdict["baseline_job_id"] == blue
    checks = {c["name"]: c for c in verdict["checks"]}
    assert checks["restarts"]["figure"] == 0 and checks["checkpoints"]["figure"] >= 2
    assert checks["throughput"]["ok"] and checks["throughput"]["figure"] >= 0.8
    assert store.get_job(blue).status == "STOPPED"
    savepoints = {c.location: c for c in store.list_checkpoints(blue, kind="SAVEPOINT")}
    assert savepoints[xcom(dr, "savepoint_blue")].status == "COMPLETED"
    assert savepoints[xcom(dr, "stop_blue")].status == "COMPLETED"  # the stop's own savepoint
    _promoted(store, dr, blue, tmp_path)


@pytest.mark.timeout(240)
def test_last_state_handover_and_cutover_are_exactly_once(airflow_db, metadata_url, store, tmp_path,
                                                          monkeypatch):
    # A running blue subsumes a checkpoint `retained` (3) intervals later; the hand-over pins
    # it, so blue keeps its files until green restored it. Blue checkpoints every second
    # (green's start takes longer than 3 s on a loaded machine: without the pin, preflight
    # found the checkpoint deleted); green every second too, so the gate sees its checkpoints.
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "1000")
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")
    conf = _conf(tmp_path, handover="last-state", cutover="last-state", gate_window_s=10,
                 in_place=False)
    conf["job_env"] = {**conf["job_env"], "CKPT_EXAMPLE_INTERVAL_MS": 1000}

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade", conf)

    assert tis == RESUBMITTED and state == "success"
    assert xcom(dr, "savepoint_blue", key="handover_used") == "last-state"
    handed = xcom(dr, "savepoint_blue")
    holder = xcom(dr, "savepoint_blue", key="pin_holder")
    from airflow_checkpoint_provider.engine.fs.storage import canonical_location

    pins = store.list_savepoint_pins(location=canonical_location(handed))
    assert [p.holder for p in pins] == [holder], "the hand-over did not pin blue's checkpoint"
    blue_id = xcom(dr, "savepoint_blue", key="checkpoint_id")
    assert store.get_checkpoint(blue, blue_id).status == "SUBSUMED", "blue moved on meanwhile"
    assert xcom(dr, "stop_blue", key="upgrade_mode_used") == "last-state"
    assert store.list_checkpoints(blue, kind="SAVEPOINT") == [], "no savepoint was taken"
    assert store.get_job(blue).status == "CANCELED"
    _promoted(store, dr, blue, tmp_path, handover="last-state", in_place=False)


@pytest.mark.timeout(240)
def test_rejection_at_the_approval_step_cancels_green_and_blue_keeps_serving(
        airflow_db, metadata_url, store, tmp_path, logs):
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")
    responder = respond_when_asked("blue_green_upgrade", "approve", "Reject")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, require_approval=True))

    assert responder.get("answered") == "Reject"
    assert tis == {**PROMOTED, "approve": "failed", "no_approval_needed": "skipped",
                   **dict.fromkeys(CUTOVER[3:], "upstream_failed"),
                   "cancel_green": "success", "keep_blue": "success"}
    assert state == "failed"
    green = store.get_job(xcom(dr, "start_green", key="job_id"))
    assert green.status == "CANCELED"
    assert store.get_job(blue).status == "RUNNING"
    assert xcom(dr, "keep_blue") == blue
    out = tmp_path / "example" / "output"
    assert not [n for n in os.listdir(out) if green.job_id in n], "fenced green published"
    assert "Upgrade abandoned" in logs()


@pytest.mark.timeout(180)
def test_green_that_cannot_restore_is_stopped_by_the_preflight_check_before_it_starts(
        airflow_db, metadata_url, store, tmp_path, logs):
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_incompatible"))

    assert tis == {"check_conf": "success", "copy_cdc_slots": "success",
                   "savepoint_blue": "success", "preflight": "failed",
                   "start_green": "upstream_failed", "health_gate": "upstream_failed",
                   **dict.fromkeys(CUTOVER, "upstream_failed"), "cancel_green": "success",
                   "keep_blue": "success"}
    assert state == "failed"
    assert store.get_job(blue).status == "RUNNING"
    assert [j.job_id for j in store.list_jobs()] == [blue], "green was never started"
    out = logs()
    assert "operator 'running-sum', state 'sum'" in out and "never started" in out


@pytest.mark.timeout(180)
def test_green_failing_after_start_is_abandoned_and_blue_keeps_running(
        airflow_db, metadata_url, store, tmp_path, logs, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_FAIL_AFTER_S", "3")
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_broken"))

    assert tis == ABANDONED
    assert state == "failed"
    green = store.get_job(xcom(dr, "start_green", key="job_id"))
    assert green.status == "FAILED" and "missing configuration" in green.failure_reason
    checks = {c["name"]: c for c in xcom(dr, "health_gate", key="verdict")["checks"]}
    assert checks["running"]["ok"] is False and checks["running"]["figure"] == "FAILED"
    _blue_untouched(store, blue, dr, logs)


@pytest.mark.timeout(180)
def test_green_that_keeps_restarting_is_rejected_with_its_restarts(
        airflow_db, metadata_url, store, tmp_path, logs, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_FAIL_EVERY_S", "2")
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_flaky",
                                   gate_window_s=20))

    assert tis == ABANDONED
    assert state == "failed"
    verdict = xcom(dr, "health_gate", key="verdict")
    checks = {c["name"]: c for c in verdict["checks"]}
    assert not verdict["ok"] and checks["restarts"]["ok"] is False
    assert checks["restarts"]["figure"] >= 1 and "feature store" in checks["restarts"]["detail"]
    green = store.get_job(xcom(dr, "start_green", key="job_id"))
    assert green.status == "CANCELED"
    _blue_untouched(store, blue, dr, logs)


@pytest.mark.timeout(180)
def test_green_that_lags_behind_blue_is_rejected_with_its_throughput(
        airflow_db, metadata_url, store, tmp_path, logs, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_SLOW_MS", "10")  # at most ~100 records/s against 200
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_slow",
                                   gate_window_s=12))

    assert tis == ABANDONED
    assert state == "failed"
    verdict = xcom(dr, "health_gate", key="verdict")
    checks = {c["name"]: c for c in verdict["checks"]}
    print(verdict)
    assert checks["restarts"]["ok"] and checks["running"]["ok"], "it runs, it does not restart"
    assert checks["throughput"]["ok"] is False or checks["checkpoints"]["ok"] is False
    assert store.get_job(xcom(dr, "start_green", key="job_id")).status == "CANCELED"
    _blue_untouched(store, blue, dr, logs)


def _blue_untouched(store, blue, dr, logs) -> None:
    assert store.get_job(blue).status == "RUNNING"
    assert xcom(dr, "keep_blue") == blue
    [savepoint] = store.list_checkpoints(blue, kind="SAVEPOINT")
    assert savepoint.status == "COMPLETED" and savepoint.location == xcom(dr, "savepoint_blue")
    out = logs()
    assert "is not stable" in out and "Upgrade abandoned" in out


@pytest.mark.timeout(360)
def test_a_failed_stop_blue_cancels_the_fenced_green_and_blue_keeps_serving(
        airflow_db, metadata_url, store, tmp_path, logs):
    """Issue 36, item 3: the cut-over fails at stop_blue (a last-state cut-over refuses
    blue's checkpoint as too old, before blue is touched); the fenced green must not be
    left running."""
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, cutover="last-state", max_checkpoint_age_s=0.001))

    assert tis == {**PROMOTED, "stop_blue": "failed",
                   **dict.fromkeys(CUTOVER[4:], "upstream_failed"),
                   "cancel_green": "success", "keep_blue": "success"}, tis
    assert state == "failed"
    green = store.get_job(xcom(dr, "start_green", key="job_id"))
    assert green.status == "CANCELED", f"green left {green.status}"
    assert store.get_job(blue).status == "RUNNING"
    assert xcom(dr, "keep_blue") == blue
    assert "Upgrade abandoned" in logs()
