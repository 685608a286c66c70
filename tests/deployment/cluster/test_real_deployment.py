"""The path users take, with real processes: Airflow 3 (api-server, scheduler, dag-processor,
triggerer; LocalExecutor; Airflow's DB on PostgreSQL) submits jobs to a 2-worker Spark
standalone cluster; the metadata DB of the jobs is a second PostgreSQL database. DAG runs
are triggered and polled through the REST API.

The deployment (tests/deployment/cluster/conftest.py, shared with the other modules of tests/deployment/cluster)
runs here: savepoint_upgrade_restore (happy path), scheduled_savepoints (its asset event read
back over the REST API) and the same upgrade DAG rolled back after a lost sensor deferral
(exactly once). The rollback after a v2 that fails by itself runs through a real Airflow in
tests/deployment/tutorial/test_airflow_tutorial.py (the tutorial's step 6). Every upgrade starts with the
pre-flight restore check. Blue-green (stability gate, approval over the HITL REST API, the
in-place cut-over, exactly once) runs in test_postgres_blue_green_deployment.py, the
savepoint upgrade with a standby in test_standby_upgrade_deployment.py; the last-state modes
and the DAGs' abort paths run with ``dag.test()`` in tests/integration/provider/. Durations and the
number of deferrals the triggerer ran are printed (``pytest -s``) for the closing notes.
"""

from __future__ import annotations

import os
import time

import pytest
from deploy_support import (
    ACTIVE,
    RUN_TIMEOUT_S,
    Deployment,
    cancel_active_jobs,
    wait_first_checkpoint,
    wait_job,
    wait_task,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]

UPGRADED = {"check_conf": "success", "preflight": "success", "stop_v1": "success", "start_v2": "success",
            "wait_v2_checkpoint": "success", "upgraded": "success", "cancel_v2": "skipped",
            "guard_rollback": "skipped", "restart_v1": "skipped", "ask_rollback": "skipped",
            "decide_rollback": "skipped", "rollback_ok": "skipped"}


def _start_v1(dep: Deployment, spark_url: str) -> str:
    v1 = dep.start_job(spark_url, "versioned-sum", {"CKPT_EXAMPLE_DIR": dep.jobs_dir})
    wait_first_checkpoint(dep.store, v1)  # an upgrade starts from a job that runs steadily
    return v1


@pytest.mark.timeout(900)  # the deployment's start counts too: 370 s with 3 at load 45
def test_upgrade_through_a_real_airflow_on_a_spark_cluster(deployment):
    dep, store, spark_cluster = deployment, deployment.store, deployment.cluster
    v1 = _start_v1(dep, spark_cluster.url)
    dep.assert_on_cluster(v1)

    # 1. savepoint -> upgrade -> restore, happy path
    state, run, tis = dep.run_dag("upgrade", "savepoint_upgrade_restore", dep.conf())
    assert tis == UPGRADED, tis
    assert state == "success"
    assert dep.airflow.xcom("savepoint_upgrade_restore", run, "preflight")["ok"]
    savepoint = dep.airflow.xcom("savepoint_upgrade_restore", run, "stop_v1")
    assert store.get_job(v1).status == "STOPPED"
    v2 = store.get_job(dep.airflow.xcom("savepoint_upgrade_restore", run, "start_v2"))
    assert v2.status == "RUNNING" and v2.version == "v2" and v2.restored_from == savepoint
    dep.assert_on_cluster(v2.job_id)

    # The rollback paths run in test_a_lost_sensor_deferral_rolls_back_exactly_once...
    # below (on this cluster: cancel_v2, guard_rollback, restart_v1 from the same savepoint)
    # and, for a v2 that fails by itself (build_v2_broken: the sensor's trigger reports the
    # failure), in tests/deployment/tutorial/test_airflow_tutorial.py (the same DAG and conf through a real
    # Airflow, Spark in local mode; its wait_v2_checkpoint deferral is asserted there).
    # Last-state and savepoint-or-last-state upgrades are not repeated here: the same DAG
    # runs them against real jobs with `dag.test()` (tests/integration/provider/test_provider_dag_upgrade.py).
    # Blue-green runs once on this deployment, approved over the HITL REST API and promoted
    # in place, in test_postgres_blue_green_deployment.py; its abort paths (a rejection, a
    # failed stop_blue, ...) run with `dag.test()` in tests/integration/provider/test_provider_dag_blue_green.py.

    # the stop waited in the triggerer process, not in a worker (wait_v2_checkpoint defers
    # only if v2 has not checkpointed by its first check: asserted where it must, above)
    assert "savepoint_upgrade_restore/stop_v1" in set(dep.airflow.deferrals())


@pytest.mark.timeout(900)
def test_a_scheduled_savepoint_emits_an_asset_event_visible_through_the_rest_api(deployment):
    """scheduled_savepoints on a job of its own: the savepoint task's asset event
    (checkpoint://<job>/savepoints) is read back through /api/v2/assets/events with the
    savepoint's job id, checkpoint id and location; retention reports why it kept it.

    The job runs on the local runner: what is proven here is Airflow's side (the scheduled
    DAG, its savepoint request, the asset event, retention), which is the same for a job on
    the cluster; the other tests of this module submit to the cluster (a spark-submit costs
    a driver and an executor JVM: ~60-90 s at load 30-40)."""
    dep, store = deployment, deployment.store
    # an earlier test's jobs (the promoted green) would keep running, and using CPU, meanwhile
    cancel_active_jobs(store)
    job_name, job_dir = "asset-events-sum", os.path.join(dep.jobs_dir, "asset-events")
    job = store.get_job(dep.start_job(None, job_name, {"CKPT_EXAMPLE_DIR": job_dir}))
    try:
        assert job.status == "RUNNING"
        wait_first_checkpoint(store, job.job_id)
        dep.airflow.set_paused("scheduled_savepoints", False)
        state, run, tis = dep.run_dag("scheduled_savepoints", "scheduled_savepoints", {
            "job_name": job_name, "savepoint_dir": os.path.join(job_dir, "savepoints"),
            "max_count": 5, "max_age_hours": 72})
        assert tis == {"check_conf": "success", "savepoint": "success",
                       "retention": "success"}, tis
        assert state == "success"
        # the unpause scheduled no run of its own ahead of this one (CKPT_SAVEPOINT_CRON)
        runs = dep.airflow.get("/api/v2/dags/scheduled_savepoints/dagRuns")["dag_runs"]
        assert [r["dag_run_id"] for r in runs] == [run], runs
        savepoint = dep.airflow.xcom("scheduled_savepoints", run, "savepoint")
        checkpoint_id = dep.airflow.xcom("scheduled_savepoints", run, "savepoint", "checkpoint_id")

        [event] = dep.airflow.asset_events(source_dag_id="scheduled_savepoints",
                                           source_run_id=run)
        assert event["uri"] == event["name"] == f"checkpoint://{job_name}/savepoints"
        assert event["source_task_id"] == "savepoint"
        extra = event["extra"]
        assert {k: extra[k] for k in ("job_id", "job_name", "checkpoint_id", "location",
                                      "kind")} == {
            "job_id": job.job_id, "job_name": job_name, "checkpoint_id": checkpoint_id,
            "location": savepoint, "kind": "SAVEPOINT"}
        row = store.get_checkpoint(job.job_id, checkpoint_id)
        assert row.kind == "SAVEPOINT" and row.status == "COMPLETED" and row.location == savepoint

        report = dep.airflow.xcom("scheduled_savepoints", run, "retention", "retention_report")
        assert [(e["location"], e["decision"], e["rule"]) for e in report["savepoints"]] == [
            (savepoint, "kept", "newest")], report
    finally:
        dep.airflow.set_paused("scheduled_savepoints", True)
        if store.get_job(job.job_id).status in ACTIVE:
            store.submit_control_request(job.job_id, "CANCEL", {})
            deadline = time.monotonic() + 60
            while store.get_job(job.job_id).status in ACTIVE and time.monotonic() < deadline:
                time.sleep(0.5)
        assert store.get_job(job.job_id).status == "CANCELED"


@pytest.mark.timeout(1200)
def test_a_lost_sensor_deferral_rolls_back_exactly_once_through_a_real_airflow(deployment):
    """Issue 36 through the real deployment: the upgrade DAG loses its sensor's deferral:
    the triggerer is down while bounded v2 runs to its end and commits everything, then the
    sensor is marked FAILED over the REST API (what the scheduler did with
    `task-state-changed-externally`). The rollback removes what v2 committed before v1
    restarts from the same savepoint: the output has no duplicate and no gap (before: 6,558
    duplicates).

    (Issue 36's failed stop_blue -- the fenced green cancelled, blue serving on -- runs with
    `dag.test()`: tests/integration/provider/test_provider_dag_blue_green.py::
    test_a_failed_stop_blue_cancels_the_fenced_green_and_blue_keeps_serving.)"""
    dep, store, spark_cluster = deployment, deployment.store, deployment.cluster
    cancel_active_jobs(store)  # the cluster's cores are for these jobs
    dag = "savepoint_upgrade_restore"
    name, root, n = "rollback-sum", os.path.join(dep.jobs_dir, "rollback"), 20_000
    env = {"CKPT_EXAMPLE_DIR": root, "CKPT_EXAMPLE_RECORDS": str(n)}
    v1 = dep.start_job(spark_cluster.url, name, {**env, "CKPT_EXAMPLE_RATE": "50"})
    # the upgrade starts from a v1 that runs steadily (CI triggered it right after the start,
    # at a high load: preflight or stop_v1 failed and start_v2 ended upstream_failed)
    wait_first_checkpoint(store, v1)
    # v2 and the restarted v1 read the rest fast; v2 takes no periodic checkpoint before the
    # sensor defers (its facts-first check finds none), only the final one when its input
    # ends (~50 s). The first periodic checkpoint comes after a random delay up to the
    # interval: at 30 s it came 10 s after v2 was RUNNING while Airflow took 17 s from there to
    # the sensor's check at load 40 (the sensor passed, the test failed); at 1 h it comes in
    # the first minute in under 2% of the runs
    # conf names no directory: the run's workspace is a name under the deployment's root
    conf = dep.conf(job_name=name, savepoint_dir=os.path.join(root, "savepoints"),
                    job_env={"CKPT_EXAMPLE_WORKSPACE": "rollback", "CKPT_EXAMPLE_RECORDS": n,
                             "CKPT_EXAMPLE_RATE": 400, "CKPT_EXAMPLE_INTERVAL_MS": 3_600_000})
    started = time.monotonic()
    run = dep.airflow.trigger(dag, conf)
    wait_task(dep.airflow, dag, run, "start_v2", ("running", "success", "failed"))
    dep.airflow.stop_component("triggerer")
    try:
        wait_task(dep.airflow, dag, run, "wait_v2_checkpoint", ("deferred",))
        v2 = store.resolve_job(name)
        assert v2.job_id != v1 and v2.version == "v2"
        wait_job(store, v2.job_id, "FINISHED")  # it committed everything
        dep.airflow.mark_failed(dag, run, "wait_v2_checkpoint")
    finally:
        dep.airflow.start_component("triggerer")
    state = dep.airflow.wait_for_run(dag, run, RUN_TIMEOUT_S)
    dep.durations["lost_deferral_rollback"] = round(time.monotonic() - started, 1)
    tis = dep.airflow.task_states(dag, run)
    assert tis == {"check_conf": "success", "preflight": "success", "stop_v1": "success",
                   "start_v2": "success", "wait_v2_checkpoint": "failed", "upgraded": "upstream_failed",
                   "cancel_v2": "success", "guard_rollback": "success",
                   "ask_rollback": "skipped", "decide_rollback": "skipped",
                   "rollback_ok": "success", "restart_v1": "success"}, tis
    assert state == "failed"
    guard = dep.airflow.xcom(dag, run, "guard_rollback")
    assert guard["job_id"] == v2.job_id and guard["committed"] and guard["discarded"]["file-sink"]
    # v1 restarted on the cluster from the savepoint v2 had restored
    savepoint = dep.airflow.xcom(dag, run, "stop_v1")
    assert store.get_job(v2.job_id).restored_from == savepoint
    again = dep.airflow.xcom(dag, run, "restart_v1")
    restarted = store.get_job(again)
    assert restarted.version == "v1" and restarted.restored_from == savepoint, restarted
    dep.assert_on_cluster(again)
    wait_job(store, again, "FINISHED")
    from airflow_checkpoint_provider.engine import read_committed

    seen: dict[tuple, int] = {}
    for r in read_committed(os.path.join(root, "output")):
        seen[(r["key"], r["count"])] = seen.get((r["key"], r["count"]), 0) + 1
    duplicates, missing = sum(c - 1 for c in seen.values()), n - len(seen)
    print(f"\nreal deployment, rollback after a lost sensor deferral: {sum(seen.values())} rows "
          f"for {n} records, {duplicates} duplicates, {missing} missing")
    assert (duplicates, missing) == (0, 0)
