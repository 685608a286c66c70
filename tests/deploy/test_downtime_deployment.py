"""The exactly-once blue-green cut-over with the restore in place, through a real Airflow on a
Spark standalone cluster (issue 41).

Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor; its DB on
PostgreSQL), a 2-worker Spark standalone cluster, the jobs' metadata DB on PostgreSQL: the
deployment tests/deploy/conftest.py starts once for tests/deploy. Blue runs v1;
``blue_green_upgrade`` runs with
``in_place`` on: the fenced green is promoted inside its running Spark application (same job
id, same application id, no ``go_live`` submit). The published output must have no duplicate
and no gap; the output gap (blue's last commit to green's first, from the part files) and the
DAG's duration are printed (``pytest -s``). Bounded: about 5-8 minutes on this machine.
"""

from __future__ import annotations

import os
import time

import pytest
from deploy_support import EXAMPLE, cancel_active_jobs, wait_first_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]


def _commit_times(out: str, job_id: str) -> list[float]:
    return sorted(os.stat(os.path.join(out, n)).st_mtime for n in os.listdir(out)
                  if n.startswith("part-") and f"~{job_id}~" in n)


@pytest.mark.timeout(1200)
def test_blue_green_promotes_green_in_place_exactly_once_on_a_cluster(deployment, spark_cluster):
    dep = deployment
    airflow, store, jobs_dir = dep.airflow, dep.store, os.path.join(dep.jobs_dir, "downtime")
    cancel_active_jobs(store)  # the cluster's cores are for blue and green
    dep.start_job(spark_cluster.url, "vs-blue", {"CKPT_EXAMPLE_DIR": jobs_dir})
    blue = store.resolve_job("vs-blue")
    assert blue.status == "RUNNING"
    wait_first_checkpoint(store, blue.job_id)  # a blue-green starts from a job running steadily

    conf = {"blue_job": "vs-blue", "green_job": "vs-green",
            "green_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": os.path.join(jobs_dir, "savepoints"), "runner": "spark",
            "job_env": {"CKPT_EXAMPLE_DIR": jobs_dir}, "min_checkpoints": 2,
            "gate_window_s": 10, "max_restarts": 0, "max_checkpoint_duration_ms": 60000,
            "min_throughput_ratio": 0.5, "max_watermark_lag_growth_ms": None,
            "max_backlog_growth_ms": None, "require_approval": False, "in_place": True}
    started = time.monotonic()
    run = airflow.trigger("blue_green_upgrade", conf)
    state = airflow.wait_for_run("blue_green_upgrade", run, 900)
    duration = time.monotonic() - started
    tis = airflow.task_states("blue_green_upgrade", run)
    why = f"{tis}\n{airflow.failed_task_logs('blue_green_upgrade', run)}"
    assert state == "success", why
    assert tis["promote_green"] == "success" and tis["needs_resubmit"] == "success", why
    assert tis["end_validation"] == "skipped" and tis["go_live"] == "skipped", why
    assert tis["preflight_final"] == "skipped", why  # only before a resubmit
    assert airflow.xcom("blue_green_upgrade", run, "promote_green", "promoted") is True

    green_id = airflow.xcom("blue_green_upgrade", run, "start_green", "job_id")
    green = store.get_job(green_id)
    final = airflow.xcom("blue_green_upgrade", run, "stop_blue")
    assert store.resolve_job("vs-green").job_id == green_id, "no second green job"
    assert green.status == "RUNNING" and green.restored_from == final
    assert green.spark_app_id and green.spark_app_id.startswith("app-"), green
    attempts = store.list_attempts(green_id)
    assert attempts[-1].restored_from == final, attempts
    assert attempts[0].restored_from == airflow.xcom("blue_green_upgrade", run, "savepoint_blue")
    assert store.get_job(blue.job_id).status == "STOPPED"

    deadline = time.monotonic() + 180
    promoted_at = attempts[-1].started_at
    while len([c for c in store.list_checkpoints(green_id)
               if c.status in ("COMPLETED", "SUBSUMED") and c.trigger_time > promoted_at]) < 2:
        assert time.monotonic() < deadline, "green live did not checkpoint twice"
        time.sleep(1)
    from airflow_checkpoint_provider.engine import read_committed

    output = os.path.join(jobs_dir, "output")
    counts: dict[str, list[int]] = {}
    for r in read_committed(output):
        counts.setdefault(r["key"], []).append(r["count"])
    duplicates = sum(len(c) - len(set(c)) for c in counts.values())
    missing = sum(max(c) - len(set(c)) for c in counts.values())
    gap = _commit_times(output, green_id)[0] - _commit_times(output, blue.job_id)[-1]
    print(f"\nin-place blue-green on a cluster: DAG {duration:.0f} s, output gap {gap:.1f} s, "
          f"{sum(map(len, counts.values()))} rows, {duplicates} duplicates, {missing} missing")
    assert (duplicates, missing) == (0, 0)
    assert gap > 0
