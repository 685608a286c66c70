"""Issue 36, item 2, and issue 41 (the in-place cut-over) through the real deployment
(tests/deployment/cluster/conftest.py), in one blue-green run: parallelism 3 with 1 s checkpoints into two
PostgreSQL 2PC sinks, on a server with ``max_prepared_transactions=100``
(tests/support/pg_server.py), Airflow (scheduler, triggerer, api-server; the DAG triggered and
approved over the REST API) submitting to the Spark standalone cluster.

Before the fix, the fenced green's prepared transactions went 3 -> 30 -> 72 -> 100 in ~20 s
and blue failed over ("maximum number of prepared transactions reached"). Asserted: the
prepared transactions are sampled all along (the fenced green's and everyone's maximum are
printed and bounded); blue keeps publishing while green validates and green publishes
nothing before the cut-over; after the Approve (HITL REST API) green is promoted in place
(same job id, same Spark application, no ``go_live`` submit; it restores blue's final
savepoint after blue's hand-over savepoint); each table holds every (key, count) of the
running sums exactly once; green's first published row comes after blue's last (the output
gap, sampled from the table every 0.5 s, and the DAG's duration are printed, with the cut-over's
breakdown -- every task, request, checkpoint and attempt between blue's last row and green's
first -- and the run line ``bench/downtime.py --from-logs LOG --record --runner airflow``
merges into BENCHMARKS.md; never a timed assertion); at the end no
prepared transaction and no replication slot is left in the sinks' database.

Blue and green each need 3 cores (one barrier slot per subtask): one more Spark worker (4
cores) joins the cluster for this test, and each application takes two 2-core executors
(fewer executor JVMs to start on a loaded machine than three 1-core ones).
Bounded: about 5-8 minutes on this machine.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
from deploy_support import (
    EXAMPLE,
    RUN_TIMEOUT_S,
    PreparedSampler,
    cancel_active_jobs,
    cutover_breakdown,
    cutover_figures,
    extra_spark_worker,
    pg_connect,
    sink_rows,
    wait_first_checkpoint,
    wait_job,
    wait_task,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]

TABLES = ("sums_a", "sums_b")
DAG = "blue_green_upgrade"
CUTOVER = ("stop_blue", "fenced_cutover", "promote_green", "needs_resubmit")
PROMOTED_IN_PLACE = {
    "check_conf": "success", "copy_cdc_slots": "success", "savepoint_blue": "success",
    "preflight": "success", "start_green": "success", "health_gate": "success",
    "approval": "success", "approve": "success", "no_approval_needed": "skipped",
    **dict.fromkeys(CUTOVER, "success"),
    **dict.fromkeys(("preflight_final", "end_validation", "go_live"), "skipped"),
    "cancel_green": "skipped", "keep_blue": "skipped"}
#: one epoch of both sinks at parallelism 3; a fenced green prepares nothing at all
FENCED_BOUND = 2 * 3


def _exactly_once(rows: list[tuple[str, int]]) -> tuple[int, int]:
    """(duplicates, missing) of running-sum rows: per key, every count 1..max exactly once."""
    seen = Counter(rows)
    duplicates = sum(n - 1 for n in seen.values())
    top: dict[str, int] = {}
    for key, count in seen:
        top[key] = max(top.get(key, 0), count)
    missing = sum(top[k] - len({c for kk, c in seen if kk == k}) for k in top)
    return duplicates, missing


@pytest.mark.timeout(1500)
def test_in_place_blue_green_at_parallelism_3_into_postgres_2pc_sinks_through_a_real_airflow(
        deployment, postgres_server):
    dep, store, spark_cluster = deployment, deployment.store, deployment.cluster
    cancel_active_jobs(store)  # blue and green need all 6 cores
    url = dep.example_pg_url  # behind the deployment's example_pg connection
    with pg_connect(url) as conn:
        assert conn.execute("SHOW max_prepared_transactions").fetchone()[0] == "100"
        for t in TABLES:
            conn.execute(f"CREATE TABLE {t} (key text, count bigint, sum bigint, version text)")
    root = os.path.join(dep.jobs_dir, "pg-blue-green")
    # the run's conf: bounded options, a workspace name and the sink connection's id; blue
    # (ckpt run, the operator's tool) gets the same directory and URL in its environment
    job_env = {"CKPT_EXAMPLE_WORKSPACE": "pg-blue-green",
               "CKPT_EXAMPLE_PG_TABLES": ",".join(TABLES), "CKPT_EXAMPLE_PARALLELISM": 3,
               "CKPT_EXAMPLE_INTERVAL_MS": 1000, "CKPT_EXAMPLE_RATE": 50}
    blue_env = {**{k: str(v) for k, v in job_env.items()}, "CKPT_EXAMPLE_PG_URL": url}
    conf = {"blue_job": "pg-blue", "green_job": "pg-green", "sink_conn_id": "example_pg",
            "green_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": os.path.join(root, "savepoints"), "runner": "spark",
            "job_env": job_env, "min_checkpoints": 3, "gate_window_s": 15,
            "max_restarts": 0, "max_checkpoint_duration_ms": 60000,
            "min_throughput_ratio": 0.5, "max_watermark_lag_growth_ms": None,
            "max_backlog_growth_ms": None, "require_approval": True, "in_place": True}
    started = time.monotonic()
    cores = {"spark.cores.max": "4", "spark.executor.cores": "2"}
    with extra_spark_worker(spark_cluster, cores=4), dep.spark_defaults(**cores), \
            PreparedSampler(url, TABLES[0]) as sampler:
        blue = dep.start_job(spark_cluster.url, "pg-blue", blue_env)
        assert store.get_job(blue).parallelism == 3
        wait_first_checkpoint(store, blue)
        run = dep.airflow.trigger(DAG, conf)
        triggered = time.monotonic()
        wait_task(dep.airflow, DAG, run, "start_green", ("success", "failed"), RUN_TIMEOUT_S)
        green = dep.airflow.xcom(DAG, run, "start_green", "job_id")
        fenced_app = store.get_job(green).spark_app_id  # the fenced green's application
        blue_rows_at_green_start = len(sink_rows(url, TABLES[0], "v1"))
        state = wait_task(dep.airflow, DAG, run, "approve",
                          ("awaiting_input", "failed", "upstream_failed"), RUN_TIMEOUT_S)
        tis = dep.airflow.task_states(DAG, run)
        assert state == "awaiting_input", (
            f"{tis}\n{dep.airflow.failed_task_logs(DAG, run)}")
        # green validated (the gate passed): blue kept publishing all along, green nothing
        validated = time.monotonic()
        assert store.get_job(blue).status == "RUNNING"
        assert len(sink_rows(url, TABLES[0], "v1")) > blue_rows_at_green_start, "blue stalled"
        assert sink_rows(url, TABLES[0], "v2") == [], "the fenced green published"
        dep.airflow.respond(DAG, run, "approve", "Approve")
        state = dep.airflow.wait_for_run(DAG, run, RUN_TIMEOUT_S)
        dag_s = time.monotonic() - triggered
        dep.durations["postgres_blue_green"] = round(time.monotonic() - started, 1)
        tis = dep.airflow.task_states(DAG, run)
        why = f"{tis}\n{dep.airflow.failed_task_logs(DAG, run)}"
        assert state == "success", why
        # approved over the HITL REST API, then in place: the resubmit path (and
        # preflight_final, which only runs before a resubmit) is skipped
        assert tis == PROMOTED_IN_PLACE, why
        assert dep.airflow.xcom(DAG, run, "promote_green", "promoted") is True
        verdict = dep.airflow.xcom(DAG, run, "health_gate")
        assert verdict["ok"] and verdict["baseline_job_id"] == blue, verdict
        # in place: the same green job, in the same Spark application, restored blue's final
        # savepoint after blue's hand-over savepoint
        final = dep.airflow.xcom(DAG, run, "stop_blue")
        assert store.resolve_job("pg-green").job_id == green, "no second green job"
        job = store.get_job(green)
        assert job.restored_from == final, job
        assert job.spark_app_id == fenced_app, (job, fenced_app)  # no new spark-submit
        dep.assert_on_cluster(green)
        attempts = store.list_attempts(green)
        assert attempts[-1].restored_from == final, attempts
        assert attempts[0].restored_from == dep.airflow.xcom(DAG, run, "savepoint_blue")
        assert store.get_job(blue).status == "STOPPED"
        promoted = attempts[-1].started_at
        # green live: two checkpoints of the promoted attempt committed
        deadline = time.monotonic() + 180
        while len([c for c in store.list_checkpoints(green)
                   if c.status in ("COMPLETED", "SUBSUMED") and c.trigger_time > promoted]) < 2:
            assert time.monotonic() < deadline, "green live did not checkpoint twice"
            time.sleep(1)
        assert store.get_job(green).status == "RUNNING"
        store.submit_control_request(green, "CANCEL", {})
        wait_job(store, green, "CANCELED", 120)
    cancel_active_jobs(store)

    with pg_connect(url) as conn:
        deadline = time.monotonic() + 30
        while (left := [g for (g,) in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")]):
            assert time.monotonic() < deadline, f"prepared transactions left: {left}"
            time.sleep(1)
        slots = conn.execute("SELECT slot_name FROM pg_replication_slots "
                             "WHERE database = current_database()").fetchall()
    fenced_max, overall_max = sampler.max(green, until=validated), sampler.max()
    counts = {t: (len(rows := sink_rows(url, t)), *_exactly_once(rows)) for t in TABLES}
    green_rows = len(sink_rows(url, TABLES[0], "v2"))
    gap = sampler.output_gap()
    print(f"\nreal deployment, in-place blue-green at parallelism 3 into PostgreSQL 2PC sinks: "
          f"{dep.durations['postgres_blue_green']} s (DAG {dag_s:.0f} s), output gap "
          f"{'none' if gap is None else f'{gap:.1f} s'}, "
          f"prepared transactions max {overall_max} "
          f"(fenced green {fenced_max}; max_prepared_transactions 100) over "
          f"{len(sampler.samples)} samples; (rows, duplicates, missing) per table {counts}; "
          f"{green_rows} rows published by green after the cut-over")
    ends = sampler.gap_ends()
    if ends is not None:
        print(f"cut-over breakdown (load average {os.getloadavg()[0]:.1f}):\n"
              + cutover_breakdown(dep.airflow, store, DAG, run, blue=blue, green=green,
                                  blue_last=ends[0], green_first=ends[1]))
        # the line bench/downtime.py --from-logs LOG --record --runner airflow merges
        duplicates = sum(d for _, d, _ in counts.values())
        missing = sum(m for _, _, m in counts.values())
        figures = cutover_figures(store, blue=blue, green=green, blue_last=ends[0],
                                  green_first=ends[1])
        print("blue-green-in-place 0 " + json.dumps(
            {**figures, "lost": missing, "duplicated": duplicates, "unexpected": 0,
             "rows": counts[TABLES[0]][0], "dag_s": round(dag_s, 1)}))
    assert fenced_max <= FENCED_BOUND, fenced_max
    assert overall_max < 50, overall_max
    assert slots == [], slots
    for t, (rows, duplicates, missing) in counts.items():
        assert (duplicates, missing) == (0, 0), (t, rows, duplicates, missing)
    assert sorted(sink_rows(url, TABLES[0])) == sorted(sink_rows(url, TABLES[1]))
    assert green_rows > 0, "green published nothing after the cut-over"
    assert gap is not None and gap > 0, f"green's first row did not follow blue's last: {gap}"
    # the gate and the cut-over waited in the triggerer process, not in a worker
    # (savepoint_blue defers only when its savepoint has not completed by its first check;
    # its trigger, ControlRequestTrigger, is stop_v1's in test_real_deployment.py)
    fired = set(dep.airflow.deferrals())
    assert {f"{DAG}/health_gate", f"{DAG}/stop_blue"} <= fired, fired
