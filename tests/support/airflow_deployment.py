"""A real Airflow 3 deployment for tests: api-server, scheduler, dag-processor and triggerer
as separate processes (LocalExecutor), Airflow's own DB on a given SQLAlchemy URL, the
repository's ``dags/`` folder, and a REST client with a real token (simple auth manager).

Every process binds 127.0.0.1 and is stopped by its PID (the whole process group, since the
LocalExecutor's workers and the jobs' spark-submit processes are its children).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from ports import free_port

BIN = os.path.dirname(sys.executable)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS = os.path.join(REPO, "dags")
PRELOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "airflow_local_settings_preload.py")
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def executor_event_seen(scheduler_log: str, dag_id: str, run_id: str, task_id: str,
                        try_number: int) -> bool:
    """Whether ``scheduler_log`` has the line of the scheduler reading an executor event (any
    state) of that task instance try."""
    key = (f"TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', run_id='{run_id}', "
           f"try_number={try_number}, map_index=-1)")
    return re.search(r"Received executor event with state \w+ for task instance "
                     + re.escape(key), scheduler_log) is not None


#: task-instance states that never turn into "awaiting_input"
_ENDED = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})

class AirflowDeployment:
    """Airflow's four processes on ``db_url`` (``postgresql+psycopg://...`` or SQLite)."""

    def __init__(self, home: str, db_url: str, *, env: dict[str, str] | None = None,
                 preload_dag_imports: bool = False) -> None:
        """``preload_dag_imports``: the scheduler and the dag-processor import what the DAG
        files import when they start, so each task process (forked by the LocalExecutor's
        workers) and each DAG parser starts with it imported
        (tests/support/airflow_local_settings_preload.py)."""
        self.home = home
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self._migration: subprocess.Popen | None = None
        self._token: str | None = None
        os.makedirs(home, exist_ok=True)
        if preload_dag_imports:
            os.makedirs(os.path.join(home, "config"), exist_ok=True)
            shutil.copyfile(PRELOAD, os.path.join(home, "config", "airflow_local_settings.py"))
        self.env = dict(os.environ)
        self.env.update({
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(16).hex(),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # the DAG files do not change while a test runs: parsed once, not every 30 s
            # (each parse a forked child: ~0.2 of a core per deployment, on 2 shared cores)
            # (600 s re-parsed each file 3-4 times in a 40-min run at load 40: ~10 s each)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "7200",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PATH": os.pathsep.join([BIN, os.environ.get("PATH", "")]),
            # this checkout's package, not whichever one the venv's editable install names
            "PYTHONPATH": os.pathsep.join(p for p in [REPO, os.environ.get("PYTHONPATH")] if p),
        })
        if db_url.startswith("postgresql+psycopg://"):
            self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = db_url.replace(
                "postgresql+psycopg://", "postgresql+psycopg_async://", 1)
        self.env.update(env or {})

    # -- processes ---------------------------------------------------------------------------

    def log_path(self, component: str) -> str:
        return os.path.join(self.home, f"{component}.log")

    def log(self, component: str) -> str:
        try:
            with open(self.log_path(component), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def begin_migrate(self) -> None:
        """Start ``airflow db migrate`` in the background (e.g. while a Spark cluster starts);
        :meth:`start` waits for it. Its output goes to ``db-migrate.log``."""
        out = open(self.log_path("db-migrate"), "ab")
        self._migration = subprocess.Popen(
            [os.path.join(BIN, "airflow"), "db", "migrate"], env=self.env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def _finish_migrate(self, timeout: float = 300.0) -> None:
        proc, self._migration = self._migration, None
        if proc is None:
            subprocess.run([os.path.join(BIN, "airflow"), "db", "migrate"], env=self.env,
                           check=True, capture_output=True, timeout=timeout)
            return
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise
        if code != 0:
            raise RuntimeError(f"airflow db migrate exited with {code}:\n"
                               f"{self.log('db-migrate')[-3000:]}")

    def start(self, timeout: float = 240.0,
              components: tuple[str, ...] = COMPONENTS) -> AirflowDeployment:
        self._finish_migrate()
        for component in components:
            self.start_component(component)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=2):
                    return self
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"api-server not healthy after {timeout} s:\n{self.log('api-server')[-3000:]}")

    def start_component(self, component: str) -> None:
        args = [os.path.join(BIN, "airflow"), component]
        if component == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port)]
        elif component in ("scheduler", "triggerer"):
            # no log server: it would listen on every interface at a fixed port (8793/8794),
            # and two deployments at once would collide there; the tests read task logs from
            # the files (failed_task_logs), as the api-server of one host does
            args.append("--skip-serve-logs")
        out = open(self.log_path(component), "ab")
        self.procs[component] = subprocess.Popen(
            args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)

    def stop_component(self, component: str) -> None:
        """Stop one process (e.g. the triggerer: deferred tasks then wait, as when Airflow
        loses a deferral); :meth:`start_component` starts it again."""
        proc = self.procs.pop(component)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def preloaded_modules(self) -> int | None:
        """How many modules the scheduler preloaded (``preload_dag_imports``), from its log;
        ``None`` if it did not."""
        m = re.search(r"airflow_local_settings: preloaded (\d+) modules", self.log("scheduler"))
        return int(m.group(1)) if m else None

    def task_parse_ms(self) -> list[int]:
        """Per task process start so far, the milliseconds its DAG file parse took (the
        LocalExecutor's workers log into the scheduler's log)."""
        return [int(v) for v in re.findall(r"Worker startup parse complete .*?"
                                           r"dag_file_parse_ms=(\d+)", self.log("scheduler"))]

    def mark_failed(self, dag_id: str, run_id: str, task_id: str) -> None:
        """Set a task instance FAILED through the REST API, whatever it is doing (what the
        scheduler does on ``task-state-changed-externally``)."""
        self._request("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                               f"{task_id}", {"new_state": "failed"})

    def check_alive(self) -> None:
        for component, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {component} exited with {proc.returncode}:\n"
                                   f"{self.log(component)[-3000:]}")

    def stop(self) -> None:
        if self._migration is not None and self._migration.poll() is None:
            os.killpg(self._migration.pid, signal.SIGKILL)
            self._migration.wait(timeout=10)
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        self.procs = {}

    # -- REST API ----------------------------------------------------------------------------

    def token(self) -> str:
        if self._token is None:
            with open(os.path.join(self.home, "simple_auth_manager_passwords.json.generated")) as f:
                password = json.load(f)["admin"]
            body = self._request("POST", "/auth/token",
                                 {"username": "admin", "password": password}, auth=False)
            self._token = body["access_token"]
        return self._token

    def _request(self, method: str, path: str, body: Any = None, *, auth: bool = True,
                 attempts: int | None = None) -> Any:
        """One REST call. On a loaded machine (load 28 on 2 cores) the api-server answered a
        GET after more than 30 s: a timeout or a refused connection is retried (``attempts``
        tries in all, default 4 for a GET, else 1: a repeated POST could start a second DAG
        run); an HTTP error is not."""
        attempts = attempts or (4 if method == "GET" else 1)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(1, attempts + 1):
            req = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:2000]!r}") from exc
            except (TimeoutError, ConnectionError, urllib.error.URLError):
                self.check_alive()
                if attempt == attempts:
                    raise
                time.sleep(2)
        return json.loads(raw) if raw else None

    def get(self, path: str) -> Any:
        return self._request("GET", path)

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0, *, unpause: bool = True) -> None:
        """Until the dag-processor has serialized ``dag_id``; then unpause it (unless
        ``unpause=False``: a scheduled DAG would start a run of its own at once)."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                self.get(f"/api/v2/dags/{dag_id}/details")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        if unpause:
            self.set_paused(dag_id, False)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self._request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict) -> str:
        run = self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                            {"logical_date": None, "conf": conf})
        return run["dag_run_id"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            state = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"DAG run {dag_id}/{run_id} still {state} after {timeout} s: "
                                     f"{self.task_states(dag_id, run_id)}")
            time.sleep(2)

    def respond(self, dag_id: str, run_id: str, task_id: str, option: str,
                timeout: float = 300.0) -> None:
        """Once ``task_id`` waits for human input, answer ``option`` through the HITL REST
        API (what a user does in the Required Actions view).

        Not before the scheduler has processed the executor event of the worker that parked
        the task (:meth:`park_settled`): an answer inside that window (the helper answered
        0.3 s after the park) loses an Airflow 3.3 scheduler race. The answer resumes the
        task (SCHEDULED, then QUEUED); the scheduler then reads the parking worker's
        "success" event of the same try, sees a QUEUED task instance (its resume-after-defer
        exception covers SCHEDULED only) and marks it FAILED ("finished with state success,
        but the task instance's state attribute is queued"): the ``approve`` task of the
        blue-green DAG failed after an Approve (and, unseen, after a Reject)."""
        deadline = time.monotonic() + timeout
        while (ti := self.task_instance(dag_id, run_id, task_id))["state"] != "awaiting_input":
            self.check_alive()
            # ended (an upstream task failed): it never will, fail now instead of at the deadline
            if time.monotonic() > deadline or ti["state"] in _ENDED:
                raise AssertionError(f"{dag_id}/{run_id}/{task_id} never waited for input: "
                                     f"{self.task_states(dag_id, run_id)}")
            time.sleep(2)
        while not self.park_settled(dag_id, run_id, task_id, ti["try_number"]):
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{dag_id}/{run_id}/{task_id}: the scheduler never processed the executor "
                    f"event of the worker that parked it (try {ti['try_number']}); see "
                    f"{self.log_path('scheduler')}")
            time.sleep(0.5)
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
        try:
            print(f"\n{dag_id}/{task_id}: answered {option!r}", flush=True)
            self._request("PATCH", path, {"chosen_options": [option]}, attempts=3)
        except RuntimeError as exc:
            # a retry after a timed-out PATCH the server had applied: 409, already answered
            if "HTTP 409" not in str(exc) or self.get(path)["chosen_options"] != [option]:
                raise

    def park_settled(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> bool:
        """Whether the scheduler logged the executor event of try ``try_number`` of the task
        (the worker that ran it up to AWAITING_INPUT or DEFERRED exited and the scheduler
        read that): from then on, resuming the task cannot lose the race described in
        :meth:`respond`. The LocalExecutor's workers log into the scheduler's log."""
        return executor_event_seen(self.log("scheduler"), dag_id, run_id, task_id, try_number)

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {ti["task_id"]: ti["state"] for ti in self.task_instances(dag_id, run_id)}

    def timeline(self, dag_id: str, run_id: str, title: str = "") -> str:
        """Where a DAG run's time went: per task instance, seconds from the run's start to
        its queued/start/end times and its duration (``pytest -s`` prints it)."""
        from datetime import datetime

        def at(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        t0 = at(run.get("start_date")) or at(run["queued_at"])
        end = at(run.get("end_date"))
        lines = [f"timeline {title or dag_id} ({run_id}): "
                 f"{(end - t0).total_seconds() if end and t0 else float('nan'):.1f} s"]
        rows = []
        for ti in self.task_instances(dag_id, run_id):
            q, s, e = (at(ti.get(k)) for k in ("queued_when", "start_date", "end_date"))
            if s is None:
                continue
            rows.append((s, ti["task_id"], ti["state"], ti.get("try_number"), q, e))
        for s, task, state, tries, q, e in sorted(rows, key=lambda r: r[0]):
            def rel(v):
                return f"{(v - t0).total_seconds():7.1f}" if v and t0 else "      -"
            took = f"{(e - s).total_seconds():6.1f}" if e else "     -"
            lines.append(f"  {task:22} {state or '-':16} try {tries}  queued {rel(q)}  "
                         f"start {rel(s)}  end {rel(e)}  took {took}")
        return "\n".join(lines)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        entry = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
                         f"/xcomEntries/{key}?deserialize=true&stringify=false")
        return entry["value"]

    def asset_events(self, **filters: Any) -> list[dict]:
        """Asset events (``/api/v2/assets/events``), oldest first, filtered by any of
        ``source_dag_id``, ``source_run_id``, ``source_task_id``, ``asset_id``; each with
        ``uri``, ``name``, ``extra``, ``source_*`` and ``timestamp``."""
        from urllib.parse import urlencode

        query = urlencode({**filters, "order_by": "timestamp", "limit": 100})
        return self.get(f"/api/v2/assets/events?{query}")["asset_events"]

    def deferrals(self) -> list[str]:
        """``dag_id/task_id`` of every trigger the triggerer ran to its event: each deferral
        leaves a ``<task log>.trigger.<id>.log`` with a "Trigger fired event" line."""
        import glob

        fired = []
        pattern = os.path.join(self.home, "logs", "dag_id=*", "run_id=*", "task_id=*",
                               "*.log.trigger.*.log")
        for path in sorted(glob.glob(pattern)):
            with open(path, errors="replace") as f:
                if "Trigger fired event" in f.read():
                    parts = path.split(os.sep)
                    fired.append(f"{parts[-4][len('dag_id='):]}/{parts[-2][len('task_id='):]}")
        return fired

    def failed_task_logs(self, dag_id: str, run_id: str, limit: int = 1500) -> str:
        """Why each failed task of one run failed, for an assertion's message: the tasks in
        the order they started (the first failure is usually the cause of the others), each
        try's warning and error lines only (JSON log lines reduced to level, event and
        error detail), at most ``limit`` characters per try. CI keeps only the tail of its
        output, so this must stay short."""
        import glob

        tis = {ti["task_id"]: ti for ti in self.task_instances(dag_id, run_id)}
        failed = sorted((t for t, ti in tis.items() if ti.get("state") == "failed"),
                        key=lambda t: tis[t].get("start_date") or "")
        out = []
        for task_id in failed:
            pattern = os.path.join(self.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}",
                                   f"task_id={task_id}", "*.log")
            for path in sorted(glob.glob(pattern)):
                with open(path, errors="replace") as f:
                    text = _important_log_lines(f.read())
                out.append(f"--- {task_id}: {os.path.basename(path)}\n{text[-limit:]}")
        return "\n".join(out) or "(no failed task logs)"


def _important_log_lines(text: str) -> str:
    """A task log's warning, error and exception lines, each as ``level event detail``."""
    kept = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            if "Error" in line or "Traceback" in line:
                kept.append(line.strip())
            continue
        if not isinstance(entry, dict):
            continue
        level = str(entry.get("level", "")).lower()
        if level not in ("warning", "error", "critical") and "error_detail" not in entry:
            continue
        detail = entry.get("error_detail")
        if isinstance(detail, list):  # structlog's exception frames: keep type and message
            detail = "; ".join(f"{d.get('exc_type')}: {d.get('exc_value')}" for d in detail
                               if isinstance(d, dict))
        kept.append(f"{level} {entry.get('event')}" + (f" | {detail}" if detail else ""))
    return "\n".join(kept) or "(no warning or error lines)"
