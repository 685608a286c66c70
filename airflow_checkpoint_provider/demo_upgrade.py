"""``make demo``: the provider's main workflow on the embedded defaults.

1. a fresh demo directory: a SQLite metadata DB (schema created as ``ckpt db upgrade`` does)
   and an AIRFLOW_HOME with Airflow's own SQLite DB (``airflow db migrate``);
2. v1 of the example job (a keyed running sum) started detached on Spark in local mode,
   until it has completed a few checkpoints;
3. the ``savepoint_upgrade_restore`` DAG run with ``airflow dags test``: v1 stops with a
   savepoint, v2 starts from it at parallelism 2 (a rescale), the sensor waits for v2's
   first checkpoint after the restore;
4. a summary read from the metadata DB, the checkpoint report of v2 (``ckpt report``), then
   v2 is cancelled so nothing keeps running.

Everything lives under ``$CKPT_DEMO_DIR`` (default ``./demo-output``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from airflow_checkpoint_provider.engine.catalog import MetadataStore, upgrade_database

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
BIN = os.path.dirname(sys.executable)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAG_ID = "savepoint_upgrade_restore"


def _step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def _run(cmd: list[str], env: dict[str, str], timeout: float, log_path: str) -> int:
    with open(log_path, "ab") as log:
        return subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout).returncode


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"demo: timed out after {timeout:.0f} s waiting for {what}")


def main() -> int:
    t0 = time.monotonic()
    root = os.path.abspath(os.environ.get("CKPT_DEMO_DIR", "demo-output"))
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    jobs_dir, home = os.path.join(root, "jobs"), os.path.join(root, "airflow")
    db_url = f"sqlite:///{root}/metadata.db"
    log_path = os.path.join(root, "demo.log")
    env = dict(os.environ)
    env.update({
        "PATH": os.pathsep.join([BIN, env.get("PATH", "")]),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "CKPT_METADATA_URL": db_url, "CKPT_EXAMPLE_DIR": jobs_dir, "CKPT_EXAMPLE_RATE": "100",
        "AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT": json.dumps(
            {"conn_type": "checkpoint_metadata", "extra": {"url": db_url}}),
    })

    _step(f"Metadata DB {db_url} and Airflow's DB under {home} (logs: {log_path})")
    upgrade_database(db_url)
    os.makedirs(home)
    if _run([os.path.join(BIN, "airflow"), "db", "migrate"], env, 300, log_path):
        raise SystemExit(f"demo: `airflow db migrate` failed; see {log_path}")

    _step("Starting v1 of the versioned-sum job on Spark (local mode), detached")
    if _run([os.path.join(BIN, "ckpt"), "run", f"{EXAMPLE}:build_v1", "--runner", "spark",
             "--master", "local[2]", "--detach", "--log-file",
             os.path.join(root, "logs", "v1.log")], env, 300, log_path):
        raise SystemExit(f"demo: v1 did not start; see {log_path}")
    store = MetadataStore(db_url, migrate=False)
    v1 = store.resolve_job("versioned-sum")
    _wait(lambda: len(store.list_checkpoints(v1.job_id, status="COMPLETED")) >= 2
          or store.get_job(v1.job_id).is_terminal, 120, "v1's first checkpoints")
    print(f"    v1 {v1.job_id} RUNNING on Spark app {store.get_job(v1.job_id).spark_app_id}")

    _step(f"airflow dags test {DAG_ID}: stop v1 with a savepoint, start v2 from it at "
          "parallelism 2, wait for v2's first checkpoint")
    conf = {"job_name": "versioned-sum", "v1_pipeline": f"{EXAMPLE}:build_v1",
            "v2_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": os.path.join(jobs_dir, "savepoints"), "runner": "spark",
            # a run's conf names no directory: the jobs' root is the worker's CKPT_EXAMPLE_DIR
            "job_env": {"CKPT_EXAMPLE_PARALLELISM": 2}}
    rc = _run([os.path.join(BIN, "airflow"), "dags", "test", DAG_ID, "-c", json.dumps(conf)],
              env, 600, log_path)

    v1 = store.get_job(v1.job_id)
    v2 = store.resolve_job("versioned-sum")
    savepoints = [c for c in store.list_checkpoints(v1.job_id, kind="SAVEPOINT")
                  if c.status == "COMPLETED"]
    ok = (rc == 0 and v1.status == "STOPPED" and savepoints and v2.job_id != v1.job_id
          and v2.status == "RUNNING" and v2.restored_from == savepoints[-1].location)
    first = None
    if ok:
        started = store.list_attempts(v2.job_id)[-1].started_at
        first = next((c for c in store.list_checkpoints(v2.job_id, status="COMPLETED")
                      if c.trigger_time >= started), None)
    report = os.path.join(root, f"report-{v2.job_id}.html")
    _run([os.path.join(BIN, "ckpt"), "report", v2.job_id, "--out", report], env, 120, log_path)

    _step("Summary")
    print(f"    v1 {v1.job_id} {v1.status}"
          + (f" with savepoint {savepoints[-1].location}" if savepoints else ""))
    print(f"    v2 {v2.job_id} {v2.status} (version {v2.version}), restored from "
          f"{v2.restored_from} at parallelism {v2.parallelism} (v1: {v1.parallelism})")
    if first is not None:
        print(f"    v2's first checkpoint after the restore: chk-{first.checkpoint_id} "
              f"({first.duration_ms} ms, {first.state_size} B)")
    print(f"    checkpoint report: {report}")
    print(f"    metadata DB:       {db_url}  (ckpt jobs --db {db_url})")
    print(f"    Airflow logs:      {os.path.join(home, 'logs')}")
    if v2.status == "RUNNING":
        store.submit_control_request(v2.job_id, "CANCEL", {})
        _wait(lambda: store.get_job(v2.job_id).is_terminal, 60, "v2 to be cancelled")
        print(f"    v2 cancelled at the end of the demo ({store.get_job(v2.job_id).status})")
    store.close()
    print(f"\nDemo {'OK' if ok else 'FAILED (see ' + log_path + ')'} in "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
