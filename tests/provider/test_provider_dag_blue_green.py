"""DAG blue_green_upgrade end to end with dag.test() (local runner, real SQLite metadata DB):
promotion when green is healthy, and the abort path with a green that fails on start."""

from __future__ import annotations

import pytest
from provider_helpers import EXAMPLE, completed_checkpoints, run_dag, start_job, wait_for, xcom

from airflow_checkpoint_provider.engine.catalog import MetadataStore

pytestmark = pytest.mark.usefixtures("airflow_db")


def _conf(tmp_path, **overrides) -> dict:
    # every param, every time: dag.test() keeps a run's conf in the shared DAG object's params
    conf = {"blue_job": "sum-blue", "green_job": "sum-green",
            "green_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            "job_env": {"CKPT_EXAMPLE_DIR": str(tmp_path / "example")}, "min_checkpoints": 2}
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

    assert tis == {"savepoint_blue": "success", "start_green": "success",
                   "health_gate": "success", "stop_blue": "success",
                   "cancel_green": "skipped", "keep_blue": "skipped"}
    assert state == "success"
    savepoint = xcom(dr, "savepoint_blue")
    green = store.get_job(xcom(dr, "start_green"))
    assert green.job_name == "sum-green" and green.version == "v2"
    assert green.status == "RUNNING" and green.restored_from == savepoint
    assert len(completed_checkpoints(store, green.job_id)) >= 2
    assert xcom(dr, "health_gate")["count"] >= 2
    assert store.get_job(blue).status == "STOPPED"
    savepoints = {c.location: c for c in store.list_checkpoints(blue, kind="SAVEPOINT")}
    assert savepoints[savepoint].status == "COMPLETED"
    assert savepoints[xcom(dr, "stop_blue")].status == "COMPLETED"  # the stop's own savepoint
    store.close()


@pytest.mark.timeout(180)
def test_green_failing_on_start_is_abandoned_and_blue_keeps_running(
        airflow_db, metadata_url, tmp_path, caplog):
    store = MetadataStore(metadata_url)
    blue = _running_blue(metadata_url, tmp_path, store)

    state, tis, dr = run_dag(airflow_db, "blue_green_upgrade",
                             _conf(tmp_path, green_pipeline=f"{EXAMPLE}:build_v2_broken"))

    # green fails in open(), before it is RUNNING: start_green itself fails (a job is
    # RUNNING only once every operator opened and restored its state)
    assert tis == {"savepoint_blue": "success", "start_green": "failed",
                   "health_gate": "upstream_failed", "stop_blue": "upstream_failed",
                   "cancel_green": "success", "keep_blue": "success"}
    assert state == "failed"
    green = store.get_job(xcom(dr, "start_green", key="job_id"))
    assert green.status == "FAILED" and "refuses to start" in green.failure_reason
    assert not completed_checkpoints(store, green.job_id)
    blue_job = store.get_job(blue)
    assert blue_job.status == "RUNNING"
    assert xcom(dr, "keep_blue") == blue
    [savepoint] = store.list_checkpoints(blue, kind="SAVEPOINT")
    assert savepoint.status == "COMPLETED" and savepoint.location == xcom(dr, "savepoint_blue")
    assert "Health gate failed" in caplog.text and "keeps running" in caplog.text
    store.close()
