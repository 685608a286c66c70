"""DAG blue_green_upgrade end to end with dag.test() (local runner, real SQLite metadata DB):
promotion when green is stable, and the abort paths: a green that cannot restore blue's
savepoint (pre-flight), one that fails, one that keeps restarting and one that lags. Each
abort cancels green and leaves blue running."""

from __future__ import annotations

import pytest
from provider_helpers import EXAMPLE, completed_checkpoints, run_dag, start_job, wait_for, xcom

from airflow_checkpoint_provider.engine.catalog import MetadataStore

pytestmark = pytest.mark.usefixtures("airflow_db")

ABANDONED = {"savepoint_blue": "success", "preflight": "success", "start_green": "success",
             "health_gate": "failed", "stop_blue": "upstream_failed", "cancel_green": "success",
             "keep_blue": "success"}


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
    monkeypatch.setenv("CKPT_EXAMPLE_RATE", "400")


def _conf(tmp_path, **overrides) -> dict:
    # every param, every time: dag.test() keeps a run's conf in the shared DAG object's params
    conf = {"blue_job": "sum-blue", "green_job": "sum-green",
            "green_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            "job_env": {"CKPT_EXAMPLE_DIR": str(tmp_path / "example")}, "min_checkpoints": 2,
            "gate_window_s": 8, "max_restarts": 0, "max_checkpoint_duration_ms": 30000,
            "min_throughput_ratio": 0.8, "max_watermark_lag_growth_ms": None,
            "max_backlog_growth_ms": None}
    conf.update(overrides)
    return conf


def _running_blue(metadata_url, tmp_path, store) -> str:
    blue = start_job(metadata_url, tmp_path, job_name="sum-blue")
    wait_for(lambda: completed_checkpoints(store, blue), 60, "a checkpoint of blue")
    return blue


@pytest.mark.timeout(180)
def test_healthy_green_is_promoted_and_blue_stopped(airflow_db, metadata_url, tmp_path):
    store = MetadataStore(metadata_url)
    blue = _running_blue(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade", _conf(tmp_path))

    assert tis == {"savepoint_blue": "success", "preflight": "success", "start_green": "success",
                   "health_gate": "success", "stop_blue": "success",
                   "cancel_green": "skipped", "keep_blue": "skipped"}
    assert state == "success"
    savepoint = xcom(dr, "savepoint_blue")
    green = store.get_job(xcom(dr, "start_green"))
    assert green.job_name == "sum-green" and green.version == "v2"
    assert green.status == "RUNNING" and green.restored_from == savepoint
    assert len(completed_checkpoints(store, green.job_id)) >= 2
    verdict = xcom(dr, "health_gate")
    assert verdict["ok"] and verdict["job_id"] == green.job_id and verdict["baseline_job_id"] == blue
    checks = {c["name"]: c for c in verdict["checks"]}
    assert checks["restarts"]["figure"] == 0 and checks["checkpoints"]["figure"] >= 2
    assert checks["throughput"]["ok"] and checks["throughput"]["figure"] >= 0.8
    assert store.get_job(blue).status == "STOPPED"
    savepoints = {c.location: c for c in store.list_checkpoints(blue, kind="SAVEPOINT")}
    assert savepoints[savepoint].status == "COMPLETED"
    assert savepoints[xcom(dr, "stop_blue")].status == "COMPLETED"  # the stop's own savepoint
    store.close()


@pytest.mark.timeout(180)
def test_green_that_cannot_restore_is_stopped_by_the_preflight_check_before_it_starts(
        airflow_db, metadata_url, tmp_path, logs):
    store = MetadataStore(metadata_url)
    blue = _running_blue(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_incompatible"))

    assert tis == {"savepoint_blue": "success", "preflight": "failed",
                   "start_green": "upstream_failed", "health_gate": "upstream_failed",
                   "stop_blue": "upstream_failed", "cancel_green": "success",
                   "keep_blue": "success"}
    assert state == "failed"
    assert store.get_job(blue).status == "RUNNING"
    assert [j.job_id for j in store.list_jobs()] == [blue], "green was never started"
    out = logs()
    assert "operator 'running-sum', state 'sum'" in out and "never started" in out
    store.close()


@pytest.mark.timeout(180)
def test_green_failing_after_start_is_abandoned_and_blue_keeps_running(
        airflow_db, metadata_url, tmp_path, logs, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_FAIL_AFTER_S", "3")
    store = MetadataStore(metadata_url)
    blue = _running_blue(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_broken"))

    assert tis == ABANDONED
    assert state == "failed"
    green = store.get_job(xcom(dr, "start_green", key="job_id"))
    assert green.status == "FAILED" and "missing configuration" in green.failure_reason
    checks = {c["name"]: c for c in xcom(dr, "health_gate", key="verdict")["checks"]}
    assert checks["running"]["ok"] is False and checks["running"]["figure"] == "FAILED"
    _blue_untouched(store, blue, dr, logs)
    store.close()


@pytest.mark.timeout(180)
def test_green_that_keeps_restarting_is_rejected_with_its_restarts(
        airflow_db, metadata_url, tmp_path, logs, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_FAIL_EVERY_S", "2")
    store = MetadataStore(metadata_url)
    blue = _running_blue(metadata_url, tmp_path, store)

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
    store.close()


@pytest.mark.timeout(180)
def test_green_that_lags_behind_blue_is_rejected_with_its_throughput(
        airflow_db, metadata_url, tmp_path, logs, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_SLOW_MS", "10")  # at most ~100 records/s against 400
    store = MetadataStore(metadata_url)
    blue = _running_blue(metadata_url, tmp_path, store)

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
    store.close()


def _blue_untouched(store, blue, dr, logs) -> None:
    assert store.get_job(blue).status == "RUNNING"
    assert xcom(dr, "keep_blue") == blue
    [savepoint] = store.list_checkpoints(blue, kind="SAVEPOINT")
    assert savepoint.status == "COMPLETED" and savepoint.location == xcom(dr, "savepoint_blue")
    out = logs()
    assert "is not stable" in out and "Upgrade abandoned" in out
