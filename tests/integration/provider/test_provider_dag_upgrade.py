"""DAG savepoint_upgrade_restore end to end: dag.test() against real jobs (local runner) and a
real SQLite metadata DB. The local runner keeps these under ~30 s each; the Spark path of the
same operators is covered by test_provider_spark.py."""

from __future__ import annotations

import os

import pytest
from provider_helpers import (
    EXAMPLE,
    completed_checkpoints,
    run_dag,
    running_job,
    xcom,
)

pytestmark = pytest.mark.usefixtures("airflow_db")

ROLLED_BACK = {"check_conf": "success", "preflight": "success", "stop_v1": "success", "start_v2": "success",
               "wait_v2_checkpoint": "failed", "upgraded": "upstream_failed",
               "cancel_v2": "success", "guard_rollback": "success", "restart_v1": "success",
               "ask_rollback": "skipped", "decide_rollback": "skipped", "rollback_ok": "success"}
UPGRADED = {"check_conf": "success", "preflight": "success", "stop_v1": "success", "start_v2": "success",
            "wait_v2_checkpoint": "success", "upgraded": "success", "cancel_v2": "skipped",
            "guard_rollback": "skipped", "restart_v1": "skipped", "ask_rollback": "skipped",
            "decide_rollback": "skipped", "rollback_ok": "skipped"}


@pytest.fixture(autouse=True)
def _broken_v2_runs_first(monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_FAIL_AFTER_S", "5")


def _preflight_savepoint(store, dr, job_id):
    """The savepoint the pre-flight check took of the running v1 (and checked)."""
    [sp] = [c for c in store.list_checkpoints(job_id, kind="SAVEPOINT")
            if c.location == xcom(dr, "preflight", key="snapshot")]
    assert sp.status == "COMPLETED"
    return sp


def _conf(tmp_path, **overrides) -> dict:
    # every param, every time: dag.test() keeps a run's conf in the shared DAG object's params
    conf = {"job_name": "versioned-sum", "v1_pipeline": f"{EXAMPLE}:build_v1",
            # under the example's savepoint root; $CKPT_EXAMPLE_DIR is the worker's (fixture)
            "v2_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints"),
            "runner": "local", "job_env": {},
            "upgrade_mode": "savepoint", "max_checkpoint_age_s": None}
    conf.update(overrides)
    return conf


@pytest.mark.timeout(180)
def test_upgrade_stops_v1_with_a_savepoint_and_v2_checkpoints_after_restoring_it(
        airflow_db, metadata_url, store, tmp_path):
    v1 = running_job(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore", _conf(tmp_path))

    assert tis == UPGRADED
    assert state == "success"
    assert xcom(dr, "preflight")["ok"]
    assert xcom(dr, "preflight")["snapshot"] == _preflight_savepoint(store, dr, v1).location
    assert xcom(dr, "stop_v1", key="upgrade_mode_used") == "savepoint"
    savepoint = xcom(dr, "stop_v1")
    assert savepoint and os.path.isfile(os.path.join(savepoint, "_metadata"))
    v1_job = store.get_job(v1)
    assert v1_job.status == "STOPPED"
    preflight = _preflight_savepoint(store, dr, v1)
    [sp] = [c for c in store.list_checkpoints(v1, kind="SAVEPOINT") if c != preflight]
    assert sp.status == "COMPLETED" and sp.location == savepoint
    v2 = xcom(dr, "start_v2")
    v2_job = store.get_job(v2)
    assert v2_job.status == "RUNNING" and v2_job.version == "v2"
    assert v2_job.restored_from == savepoint
    assert completed_checkpoints(store, v2)
    assert xcom(dr, "wait_v2_checkpoint")["job_id"] == v2


@pytest.mark.timeout(180)
def test_failed_upgrade_cancels_v2_and_restarts_v1_from_the_same_savepoint(
        airflow_db, metadata_url, store, tmp_path):
    v1 = running_job(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore",
                             _conf(tmp_path, v2_pipeline=f"{EXAMPLE}:build_v2_broken"))

    # v2 restores fine (the pre-flight check passes) and is RUNNING, then fails before
    # its first checkpoint: the wait for that checkpoint fails and v1 is restarted
    assert tis == ROLLED_BACK
    assert state == "failed"
    savepoint = xcom(dr, "stop_v1")
    assert store.get_job(v1).status == "STOPPED"
    v2_job = store.get_job(xcom(dr, "start_v2", key="job_id"))
    assert v2_job.status == "FAILED" and "missing configuration" in v2_job.failure_reason
    v1_again = store.get_job(xcom(dr, "restart_v1"))
    assert v1_again.job_id != v1 and v1_again.version == "v1"
    assert v1_again.status == "RUNNING" and v1_again.restored_from == savepoint


@pytest.mark.timeout(180)
def test_incompatible_v2_fails_the_preflight_check_before_v1_is_touched(
        airflow_db, metadata_url, store, tmp_path, capsys):
    v1 = running_job(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore",
                             _conf(tmp_path, v2_pipeline=f"{EXAMPLE}:build_v2_incompatible"))

    assert tis == {"check_conf": "success", "preflight": "failed", "stop_v1": "upstream_failed",
                   "start_v2": "upstream_failed", "wait_v2_checkpoint": "upstream_failed",
                   "upgraded": "upstream_failed", "cancel_v2": "success",
                   "guard_rollback": "success", "restart_v1": "upstream_failed",
                   "ask_rollback": "skipped", "decide_rollback": "skipped",
                   "rollback_ok": "success"}
    assert state == "failed"
    assert store.get_job(v1).status == "RUNNING", "v1 was not touched"
    # the pre-flight savepoint (v1 keeps running) is the only one, and it is kept
    assert store.list_checkpoints(v1, kind="SAVEPOINT") == [_preflight_savepoint(store, dr, v1)]
    assert [j.job_id for j in store.list_jobs()] == [v1], "no v2 was started"
    log = capsys.readouterr().out  # the task logs of dag.test()
    assert "operator 'running-sum', state 'sum'" in log and "value state" in log


@pytest.mark.timeout(180)
def test_last_state_upgrade_cancels_v1_and_restores_v2_from_its_latest_checkpoint(
        airflow_db, metadata_url, store, tmp_path):
    v1 = running_job(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore",
                             _conf(tmp_path, upgrade_mode="last-state", max_checkpoint_age_s=60))

    assert tis == UPGRADED
    assert state == "success"
    snapshot = xcom(dr, "stop_v1")
    assert xcom(dr, "stop_v1", key="upgrade_mode_used") == "last-state"
    assert xcom(dr, "stop_v1", key="fallback_reason") is None
    assert store.get_job(v1).status == "CANCELED"
    assert store.list_checkpoints(v1, kind="SAVEPOINT") == [_preflight_savepoint(store, dr, v1)]
    newest = completed_checkpoints(store, v1)[-1]
    assert snapshot == newest.location and os.path.isfile(os.path.join(snapshot, "_metadata"))
    v2 = store.get_job(xcom(dr, "start_v2"))
    assert v2.status == "RUNNING" and v2.version == "v2" and v2.restored_from == snapshot


@pytest.mark.timeout(180)
def test_last_state_upgrade_refuses_a_checkpoint_older_than_the_limit(
        airflow_db, metadata_url, store, tmp_path, capsys):
    v1 = running_job(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore",
                             _conf(tmp_path, upgrade_mode="last-state",
                                   max_checkpoint_age_s=0.001))

    assert tis["stop_v1"] == "failed" and tis["start_v2"] == "upstream_failed", tis
    assert state == "failed"
    assert store.get_job(v1).status == "RUNNING", "v1 was not touched"
    assert "max_checkpoint_age 0 s" in capsys.readouterr().out


@pytest.mark.timeout(180)
def test_savepoint_or_last_state_falls_back_when_the_savepoint_fails(
        airflow_db, metadata_url, store, tmp_path, capsys):
    v1 = running_job(metadata_url, tmp_path, store)
    # inside the allowed savepoint root, but a file: the savepoint's files cannot be written
    not_a_directory = tmp_path / "example" / "savepoints" / "full-disk"
    not_a_directory.parent.mkdir(parents=True, exist_ok=True)
    not_a_directory.write_text("a file where the savepoint directory should be")

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore",
                             _conf(tmp_path, upgrade_mode="savepoint-or-last-state",
                                   savepoint_dir=str(not_a_directory)))

    assert tis == UPGRADED
    assert state == "success"
    assert xcom(dr, "stop_v1", key="upgrade_mode_used") == "last-state"
    assert "savepoint failed" in xcom(dr, "stop_v1", key="fallback_reason")
    preflight = _preflight_savepoint(store, dr, v1)
    [failed] = [c for c in store.list_checkpoints(v1, kind="SAVEPOINT") if c != preflight]
    assert failed.status == "FAILED"
    assert store.get_job(v1).status == "CANCELED"
    v2 = store.get_job(xcom(dr, "start_v2"))
    assert v2.status == "RUNNING" and v2.restored_from == xcom(dr, "stop_v1")
    assert v2.restored_from == completed_checkpoints(store, v1)[-1].location
    assert "falls back to last-state" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_upgrade_onto_spark_restores_v2_from_the_savepoint_in_a_spark_application(
        airflow_db, metadata_url, store, tmp_path):
    """v1 runs on the local runner; the DAG starts v2 detached with spark-submit (local[2])."""
    running_job(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore",
                             _conf(tmp_path, runner="spark"))

    assert tis == UPGRADED
    assert state == "success"
    v2 = store.get_job(xcom(dr, "start_v2"))
    assert v2.status == "RUNNING" and v2.spark_app_id and v2.spark_app_id.startswith("local-")
    assert v2.restored_from == xcom(dr, "stop_v1")
    assert os.path.isfile(xcom(dr, "start_v2", key="log_file"))
