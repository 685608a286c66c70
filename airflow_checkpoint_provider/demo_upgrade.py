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

While a step runs the demo prints what changes (the DAG run's task states as Airflow
records them) and, when nothing changed for :data:`HEARTBEAT_S` seconds, a line saying what
it still waits for: a loaded machine takes minutes, and silence looks like a hang.

Everything lives under ``$CKPT_DEMO_DIR`` (default ``./demo-output``).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable

from airflow_checkpoint_provider.engine.client import (
    CheckpointStatus,
    JobStatus,
    MetadataStore,
    upgrade_database,
)
from airflow_checkpoint_provider.settings import DEMO_DIR

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
BIN = os.path.dirname(sys.executable)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAG_ID = "savepoint_upgrade_restore"
#: at most this many seconds without a line while a step runs
HEARTBEAT_S = 10.0


def _step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


class TaskStates:
    """The task states of the DAG runs of ``dag_id`` in Airflow's SQLite DB ``path``, read
    (read-only) while ``airflow dags test`` runs: :meth:`changes` says what changed since
    the last call, :meth:`summary` what runs now."""

    def __init__(self, path: str, dag_id: str) -> None:
        self.path, self.dag_id = path, dag_id
        self.states: dict[str, str] = {}

    def _read(self) -> dict[str, str]:
        try:
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=0.5) as db:
                rows = db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ? "
                                  "ORDER BY start_date", (self.dag_id,)).fetchall()
        except sqlite3.Error:  # not created yet, or locked by a writer: next time
            return self.states
        return {task: state or "scheduled" for task, state in rows}

    def changes(self) -> list[str]:
        now = self._read()
        out = [f"task {task}: {state}" for task, state in now.items()
               if self.states.get(task) != state]
        self.states = now
        return out

    def summary(self) -> str:
        active = [t for t, s in self.states.items() if s in ("running", "deferred", "queued",
                                                              "up_for_retry", "scheduled")]
        return f" ({', '.join(f'{t} {self.states[t]}' for t in active)})" if active else ""


def _run(cmd: list[str], env: dict[str, str], timeout: float, log_path: str, *,
         what: str, watch: TaskStates | None = None,
         heartbeat_s: float = HEARTBEAT_S, out: Callable[[str], None] | None = None) -> int:
    """Run ``cmd`` (its output goes to the log); meanwhile print what ``watch`` sees change
    and, after ``heartbeat_s`` seconds without a line, that it still waits for ``what``."""
    say = out or (lambda line: print(line, flush=True))
    t0 = last = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        while True:
            try:
                return proc.wait(timeout=min(1.0, heartbeat_s))
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if now - t0 > timeout:
                proc.kill()
                proc.wait()
                raise SystemExit(f"demo: {what} took longer than {timeout:.0f} s; see {log_path}")
            for line in watch.changes() if watch is not None else ():
                say(f"    [{now - t0:4.0f} s] {line}")
                last = now
            if now - last >= heartbeat_s:
                say(f"    [{now - t0:4.0f} s] still {what}"
                    + (watch.summary() if watch is not None else ""))
                last = now


def _wait(predicate, timeout: float, for_what: str, *, what: str = ""):
    t0 = last = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
        if what and time.monotonic() - last >= HEARTBEAT_S:
            last = time.monotonic()
            print(f"    [{last - t0:4.0f} s] still {what}", flush=True)
    raise SystemExit(f"demo: timed out after {timeout:.0f} s waiting for {for_what}")


def main() -> int:
    t0 = time.monotonic()
    root = os.path.abspath(DEMO_DIR.get())
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
    if _run([os.path.join(BIN, "airflow"), "db", "migrate"], env, 300, log_path,
            what="creating Airflow's DB (airflow db migrate)"):
        raise SystemExit(f"demo: `airflow db migrate` failed; see {log_path}")

    _step("Starting v1 of the versioned-sum job on Spark (local mode), detached")
    if _run([os.path.join(BIN, "ckpt"), "run", f"{EXAMPLE}:build_v1", "--runner", "spark",
             "--master", "local[2]", "--detach", "--log-file",
             os.path.join(root, "logs", "v1.log")], env, 300, log_path,
            what="starting v1 on Spark (the JVM and the job's slots)"):
        raise SystemExit(f"demo: v1 did not start; see {log_path}")
    store = MetadataStore(db_url, migrate=False)
    v1 = store.resolve_job("versioned-sum")
    _wait(lambda: len(store.list_checkpoints(v1.job_id, status=CheckpointStatus.COMPLETED)) >= 2
          or store.get_job(v1.job_id).is_terminal, 120, "v1's first checkpoints",
          what="waiting for v1's first checkpoints")
    print(f"    v1 {v1.job_id} RUNNING on Spark app {store.get_job(v1.job_id).spark_app_id}")

    _step(f"airflow dags test {DAG_ID}: stop v1 with a savepoint, start v2 from it at "
          "parallelism 2, wait for v2's first checkpoint")
    conf = {"job_name": "versioned-sum", "v1_pipeline": f"{EXAMPLE}:build_v1",
            "v2_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": os.path.join(jobs_dir, "savepoints"), "runner": "spark",
            # a run's conf names no directory: the jobs' root is the worker's CKPT_EXAMPLE_DIR
            "job_env": {"CKPT_EXAMPLE_PARALLELISM": 2}}
    rc = _run([os.path.join(BIN, "airflow"), "dags", "test", DAG_ID, "-c", json.dumps(conf)],
              env, 600, log_path, what=f"running the {DAG_ID} DAG",
              watch=TaskStates(os.path.join(home, "airflow.db"), DAG_ID))

    v1 = store.get_job(v1.job_id)
    v2 = store.resolve_job("versioned-sum")
    savepoints = [c for c in store.list_checkpoints(v1.job_id, kind="SAVEPOINT")
                  if c.status == CheckpointStatus.COMPLETED]
    ok = (rc == 0 and v1.status == JobStatus.STOPPED and savepoints and v2.job_id != v1.job_id
          and v2.status == JobStatus.RUNNING and v2.restored_from == savepoints[-1].location)
    first = None
    if ok:
        started = store.list_attempts(v2.job_id)[-1].started_at
        first = next((c for c in store.list_checkpoints(v2.job_id, status=CheckpointStatus.COMPLETED)
                      if c.trigger_time >= started), None)
    report = os.path.join(root, f"report-{v2.job_id}.html")
    _run([os.path.join(BIN, "ckpt"), "report", v2.job_id, "--out", report], env, 120, log_path,
         what="writing v2's checkpoint report")

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
    if v2.status == JobStatus.RUNNING:
        store.submit_control_request(v2.job_id, "CANCEL", {})
        _wait(lambda: store.get_job(v2.job_id).is_terminal, 60, "v2 to be cancelled")
        print(f"    v2 cancelled at the end of the demo ({store.get_job(v2.job_id).status})")
    store.close()
    print(f"\nDemo {'OK' if ok else 'FAILED (see ' + log_path + ')'} in "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
