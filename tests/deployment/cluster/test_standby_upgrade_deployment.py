"""Issue 54 item 2 (the savepoint upgrade with a standby) through the real deployment
(tests/deployment/cluster/conftest.py: Airflow 3 as separate processes, the Spark standalone cluster,
PostgreSQL), in one DAG run of ``savepoint_upgrade_standby`` triggered over the REST API.

v1 (``ckpt run --detach`` on the cluster, 1 s checkpoints into a PostgreSQL 2PC sink) reads a
bounded input at 50 records/s; the DAG starts v2 as a standby of it in its own Spark
application, waits (in the triggerer) for its READY row in the metadata DB, stops v1 with a
savepoint and v2 restores it at once, then waits for v2's first checkpoint. Asserted: every
task's state; v2 restored v1's stop savepoint, on the cluster, and was READY before v1's stop
was requested; after v2 read the rest of the input (its conf's rate) the sink table holds
every running count of the generator's records exactly once (0 lost, 0 duplicated). Printed
(``pytest -s``, never asserted on): the output gap as a reader of the table sees it (sampled
every 0.5 s, as the blue-green deployment test does), where it went (v1's stop, the
standby's hand-over, its slots and restore, its first commit: every task, request,
checkpoint and attempt phase between v1's last row and v2's first) and the run line
``bench/downtime.py --runner airflow --record --from-logs LOG`` merges into BENCHMARKS.md.

Both applications take one core each (the deployment's Spark defaults): the 2 x 2-core
cluster holds them side by side. About 4-6 minutes here after the deployment is up.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from deploy_support import (
    UPGRADE_TASKS,
    PreparedSampler,
    cancel_active_jobs,
    cutover_breakdown,
    lost_and_duplicated,
    pg_connect,
    sink_rows,
    standby_figures,
    wait_first_checkpoint,
    wait_job,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]

DAG = "savepoint_upgrade_standby"
TABLE = "standby_sums"
JOB = "standby-sum"
#: v1 at 50 records/s would need 800 s for all of them: the DAG stops it long before (~4 min
#: at load 30); v2 reads the rest at V2_RATE
RECORDS, KEYS, V2_RATE = 40_000, 20, 4000
UPGRADED = {"check_conf": "success", "preflight": "success", "start_v2": "success",
            "stop_v1": "success", "wait_v2_checkpoint": "success", "upgraded": "success",
            "cancel_v2": "skipped", "guard_rollback": "skipped", "restart_v1": "skipped",
            "ask_rollback": "skipped", "decide_rollback": "skipped", "rollback_ok": "skipped"}


@pytest.mark.timeout(1500)  # with the deployment's start when this module runs alone
def test_standby_upgrade_through_a_real_airflow_restores_v1s_stop_savepoint_exactly_once(
        deployment):
    dep, store, spark_cluster = deployment, deployment.store, deployment.cluster
    cancel_active_jobs(store)  # v1 and the standby take a core each
    dep.airflow.wait_for_dag(DAG)
    url = dep.example_pg_url  # behind the deployment's example_pg connection
    with pg_connect(url) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (key text, count bigint, sum bigint, version text)")
    root = os.path.join(dep.jobs_dir, "standby")
    job_env = {"CKPT_EXAMPLE_WORKSPACE": "standby", "CKPT_EXAMPLE_PG_TABLES": TABLE,
               "CKPT_EXAMPLE_RECORDS": RECORDS, "CKPT_EXAMPLE_KEYS": KEYS,
               "CKPT_EXAMPLE_INTERVAL_MS": 1000}
    v1_env = {**{k: str(v) for k, v in job_env.items()}, "CKPT_EXAMPLE_RATE": "50",
              "CKPT_EXAMPLE_PG_URL": url}
    conf = dep.conf(job_name=JOB, savepoint_dir=os.path.join(root, "savepoints"),
                    sink_conn_id="example_pg",
                    job_env={**job_env, "CKPT_EXAMPLE_RATE": V2_RATE})
    with PreparedSampler(url, TABLE) as sampler:
        v1 = dep.start_job(spark_cluster.url, JOB, v1_env)
        wait_first_checkpoint(store, v1)  # an upgrade starts from a job that runs steadily
        triggered = time.monotonic()
        state, run, tis = dep.run_dag("standby_upgrade", DAG, conf)
        dag_s = time.monotonic() - triggered
        why = f"{tis}\n{dep.airflow.failed_task_logs(DAG, run)}"
        assert tis == UPGRADED, why
        assert state == "success", why
        v2 = dep.airflow.xcom(DAG, run, "start_v2")
        savepoint = dep.airflow.xcom(DAG, run, "stop_v1")
        assert store.get_job(v1).status == "STOPPED"
        job = store.get_job(v2)
        assert job.version == "v2" and job.restored_from == savepoint, job
        dep.assert_on_cluster(v2)
        # the DAG stopped v1 only once the standby said READY; the standby restored the
        # savepoint of that stop
        standby = store.get_standby(v2)
        stops = [r for r in store.list_control_requests(v1) if r.action == "STOP_WITH_SAVEPOINT"]
        assert stops and max(stops, key=lambda r: r.created_at).status == "SUCCEEDED", stops
        assert standby is not None and standby.status == "TAKEN_OVER", standby
        assert standby.waits_for_job_id == v1 and standby.restore_location == savepoint
        assert standby.ready_at < min(r.created_at for r in stops), (standby, stops)
        wait_job(store, v2, "FINISHED")  # it read the rest of the bounded input
        time.sleep(2 * sampler.period)  # the sampler sees its last commit too
    cancel_active_jobs(store)

    rows = sink_rows(url, TABLE)
    result = lost_and_duplicated(rows, RECORDS, KEYS)
    gap, ends = sampler.output_gap(), sampler.gap_ends()
    print(f"\nreal deployment, savepoint upgrade with a standby ({DAG}, parallelism 1, 1 s "
          f"checkpoints into a PostgreSQL 2PC sink): DAG {dag_s:.0f} s, output gap "
          f"{'none' if gap is None else f'{gap:.1f} s'}, {len(rows)} rows for {RECORDS} "
          f"records ({len(sink_rows(url, TABLE, 'v2'))} by v2), {result}")
    if ends is not None:
        print(f"standby cut-over breakdown (load average {os.getloadavg()[0]:.1f}):\n"
              + cutover_breakdown(dep.airflow, store, DAG, run, blue=v1, green=v2,
                                  blue_last=ends[0], green_first=ends[1],
                                  tasks=UPGRADE_TASKS, names=("v1", "v2")))
        # the line bench/downtime.py --from-logs LOG --record --runner airflow merges
        figures = standby_figures(store, old=v1, new=v2, old_last=ends[0],
                                  new_first=ends[1])
        print("savepoint-standby 0 " + json.dumps(
            {**figures, **result, "rows": len(rows), "dag_s": round(dag_s, 1)}))
    assert result == {"lost": 0, "duplicated": 0, "unexpected": 0}, result
    assert gap is not None and gap > 0, f"v2's first row did not follow v1's last: {gap}"
