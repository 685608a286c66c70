"""What the real-deployment tests share (tests/deployment/cluster/conftest.py builds it once per run):
Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor; its DB on
PostgreSQL) submitting to the session's Spark standalone cluster, the jobs' metadata DB on
the same PostgreSQL server, and helpers to start jobs and run DAGs through the REST API.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from budget import TEST_JVM_OPTIONS

from airflow_checkpoint_provider.engine.catalog import MetadataStore

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
BIN = os.path.dirname(sys.executable)
ACTIVE = ("CREATED", "RUNNING", "RESTARTING")
RUN_TIMEOUT_S = 600  # a blue-green DAG run took ~6 min at load 32 on 2 cores
#: JVM options of the jobs' drivers and executors (tests/support/budget.py), also in the Spark
#: defaults: each application start here is a driver and one or two executor JVMs (14 of
#: them per run of tests/deployment/cluster)
JOB_JVM_OPTIONS = TEST_JVM_OPTIONS
#: cluster-wide Spark defaults of every spark-submit: one core per application, so blue and
#: green of the parallelism-1 example fit on the 2 x 2 cores together
SPARK_DEFAULTS = {"spark.cores.max": "1", "spark.executor.memory": "512m",
                  "spark.driver.extraJavaOptions": JOB_JVM_OPTIONS,
                  "spark.executor.extraJavaOptions": JOB_JVM_OPTIONS}


class Deployment:
    def __init__(self, airflow, metadata_url: str, jobs_dir: str, env: dict[str, str],
                 conf_dir: str, cluster) -> None:
        self.airflow, self.metadata_url, self.jobs_dir, self.env = airflow, metadata_url, jobs_dir, env
        self.conf_dir = conf_dir
        #: the database behind the deployment's ``example_pg`` connection
        self.example_pg_url = ""
        #: the session's Spark standalone cluster (tests take it from here: a test that
        #: requested the session fixture itself would start the cluster before the
        #: deployment fixture, which overlaps Airflow's migration with the cluster's start)
        self.cluster = cluster
        self.store = MetadataStore(metadata_url, migrate=False)
        self.durations: dict[str, float] = {}

    def run_dag(self, name: str, dag_id: str, conf: dict,
                answer: tuple[str, str] | None = None) -> tuple[str, str, dict]:
        started = time.monotonic()
        run_id = self.airflow.trigger(dag_id, conf)
        if answer is not None:  # (task_id, option) of a human-in-the-loop task
            self.airflow.respond(dag_id, run_id, *answer, timeout=RUN_TIMEOUT_S)
        state = self.airflow.wait_for_run(dag_id, run_id, RUN_TIMEOUT_S)
        self.durations[name] = round(time.monotonic() - started, 1)
        phase(f"DAG run {name} ({dag_id}) {state}")
        print(self.airflow.timeline(dag_id, run_id, name))
        return state, run_id, self.airflow.task_states(dag_id, run_id)

    def conf(self, **overrides) -> dict:
        conf = {"job_name": "versioned-sum", "v1_pipeline": f"{EXAMPLE}:build_v1",
                "v2_pipeline": f"{EXAMPLE}:build_v2",
                "savepoint_dir": os.path.join(self.jobs_dir, "savepoints"), "runner": "spark",
                "job_env": {}, "upgrade_mode": "savepoint",
                "max_checkpoint_age_s": None}
        conf.update(overrides)
        return conf

    def assert_on_cluster(self, job_id: str) -> None:
        job = self.store.get_job(job_id)
        assert job.spark_app_id and job.spark_app_id.startswith("app-"), job
        placement = self.store.list_attempts(job_id)[-1].placement
        assert placement and all(str(s["executor_id"]).isdigit() for s in placement), placement

    def write_spark_defaults(self, settings: dict[str, str]) -> None:
        """The deployment's ``spark-defaults.conf`` (read by each spark-submit when it starts,
        the Airflow workers' and ``ckpt run``'s alike)."""
        with open(os.path.join(self.conf_dir, "spark-defaults.conf"), "w") as f:
            f.writelines(f"{k} {v}\n" for k, v in settings.items())

    @contextlib.contextmanager
    def spark_defaults(self, **settings: str) -> Iterator[None]:
        """Other cluster-wide Spark defaults for the applications started inside the block."""
        self.write_spark_defaults({**SPARK_DEFAULTS, **settings})
        try:
            yield
        finally:
            self.write_spark_defaults(SPARK_DEFAULTS)

    def start_job(self, spark_url: str | None, job_name: str, env: dict[str, str],
                  pipeline: str = f"{EXAMPLE}:build_v1") -> str:
        """``ckpt run --detach`` of ``pipeline`` under ``job_name`` on the cluster (on the
        local runner, slot processes on this machine, if ``spark_url`` is None)."""
        runner = ["--runner", "local"] if spark_url is None else [
            "--runner", "spark", "--master", spark_url]
        out = subprocess.run(
            # the console script's interpreter line names the venv it was installed from
            # (a venv copied elsewhere had a dead one); the module is the same command
            [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "run", pipeline,
             "--job-name", job_name, *runner,
             "--db", self.metadata_url, "--detach",
             "--json", "--log-file", os.path.join(
                 env.get("CKPT_EXAMPLE_DIR", self.jobs_dir), env.get("CKPT_EXAMPLE_WORKSPACE", ""),
                 f"{job_name}.log")],
            env={**os.environ, **self.env, **env}, text=True, capture_output=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        job = self.store.resolve_job(job_name)
        assert job.status == "RUNNING"
        phase(f"ckpt run --detach {job_name}")
        return job.job_id


_PHASE = {"last": time.monotonic()}


def phase(label: str) -> None:
    """Print ``label`` with the seconds since the previous phase (``pytest -s``): where a
    deployment test's wall time goes."""
    now = time.monotonic()
    print(f"\nphase {now - _PHASE['last']:7.1f} s  {label}", flush=True)
    _PHASE["last"] = now


def cancel_active_jobs(store: MetadataStore, timeout: float = 60.0) -> None:
    jobs = [j for j in store.list_jobs() if j.status in ACTIVE and j.heartbeat_at]
    for job in jobs:
        try:
            store.submit_control_request(job.job_id, "CANCEL", {})
        except ValueError:
            pass
    deadline = time.monotonic() + timeout
    while jobs and time.monotonic() < deadline:
        jobs = [j for j in jobs if store.get_job(j.job_id).status in ACTIVE]
        time.sleep(0.5)
    phase("cancel_active_jobs")


#: task instance states a DAG run's task never leaves by itself (a retry is ``up_for_retry``)
TERMINAL_TASK_STATES = ("success", "failed", "upstream_failed", "skipped", "removed")


def wait_job(store: MetadataStore, job_id: str, status: str, timeout: float = 300) -> None:
    """Until the job is ``status``; fails at once when it ended in another status."""
    deadline = time.monotonic() + timeout
    while (job := store.get_job(job_id)).status != status:
        assert not job.is_terminal, (
            f"job {job.job_name} ({job_id}) ended {job.status} while waiting for {status}: "
            f"{job.failure_reason}")
        assert time.monotonic() < deadline, f"job {job_id} still {job.status} after {timeout} s"
        time.sleep(1)
    phase(f"job {job.job_name} {status}")


def wait_first_checkpoint(store: MetadataStore, job_id: str, timeout: float = 180) -> None:
    """Until the job completed a checkpoint: a DAG that upgrades, savepoints or hands over a
    job starts from one that runs steadily, not from one whose tasks are still starting (its
    first savepoint may then fail, and with nothing completed the pre-flight check has
    nothing to fall back on)."""
    deadline = time.monotonic() + timeout
    while store.latest_completed_checkpoint(job_id=job_id, kind=None) is None:
        job = store.get_job(job_id)
        assert not job.is_terminal, f"job {job.job_name} ({job_id}) ended {job.status}: " \
                                    f"{job.failure_reason}"
        assert time.monotonic() < deadline, (
            f"job {job.job_name} ({job_id}) completed no checkpoint in {timeout} s ({job.status})")
        time.sleep(1)
    phase(f"first checkpoint of {store.get_job(job_id).job_name}")


def wait_task(airflow, dag_id: str, run_id: str, task_id: str, states: tuple,
              timeout: float = 300) -> str:
    """Until ``task_id`` of the run is in one of ``states``; fails at once when it reached a
    terminal state not asked for (e.g. ``upstream_failed``: waiting cannot help), with every
    task's state and the failed tasks' logs in the message."""
    deadline = time.monotonic() + timeout
    while True:
        tis = airflow.task_states(dag_id, run_id)
        state = tis.get(task_id)
        if state in states:
            phase(f"{dag_id}/{task_id} {state}")
            return state
        if state in TERMINAL_TASK_STATES:
            raise AssertionError(
                f"{dag_id}/{run_id}: {task_id} is {state}, waited for {'/'.join(states)}; "
                f"task states {tis}\n{airflow.failed_task_logs(dag_id, run_id)}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{dag_id}/{run_id}: {task_id} still {state} after {timeout} s "
                                 f"(waited for {'/'.join(states)}); task states {tis}")
        time.sleep(1)


@contextlib.contextmanager
def extra_spark_worker(cluster, cores: int = 2, memory: str = "1g") -> Iterator[None]:
    """One more worker on the session's Spark cluster for the block (registered before it
    starts), stopped by its PID at the end."""
    def registered() -> int:
        with open(os.path.join(cluster.workdir, "master.log"), errors="replace") as f:
            return f.read().count("Registering worker")

    before = registered()
    wdir = os.path.join(cluster.workdir, f"worker-extra-{before}")
    os.makedirs(wdir, exist_ok=True)
    proc = cluster._start(f"worker-extra-{before}", [
        "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores),
        "--memory", memory, "--work-dir", wdir, "--webui-port", "0", cluster.url])
    try:
        deadline = time.monotonic() + 180
        while registered() <= before:
            assert proc.poll() is None, f"the extra Spark worker exited ({wdir})"
            assert time.monotonic() < deadline, "the extra Spark worker did not register"
            time.sleep(0.3)
        phase("extra Spark worker registered")
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        cluster.procs.remove(proc)


#: the tasks of a blue-green run whose start and end the cut-over's breakdown shows
BLUE_GREEN_TASKS = ("approve", "stop_blue", "fenced_cutover", "promote_green", "cutover",
                    "needs_resubmit")
#: the same for a savepoint upgrade (with a standby, start_v2 ends before stop_v1 starts)
UPGRADE_TASKS = ("start_v2", "stop_v1", "wait_v2_checkpoint", "upgraded")


def cutover_breakdown(airflow, store: MetadataStore, dag_id: str, run_id: str, *,
                      blue: str, green: str, blue_last: float, green_first: float,
                      tasks: tuple[str, ...] = BLUE_GREEN_TASKS,
                      names: tuple[str, str] = ("blue", "green")) -> str:
    """Where the output gap of a cut-over went (issue 54 item 2): every event between the
    old job's last committed row (``blue_last``, wall-clock seconds, as a reader of the sink
    saw it) and the new job's first (``green_first``), from Airflow's task instances
    (``tasks``) and the metadata DB (control requests, checkpoints, attempts with their
    start-up phases, a standby's READY and hand-over), in seconds after ``blue_last``; the
    jobs are called ``names`` (old, new)."""
    from datetime import datetime

    def at(value: str | None) -> float | None:
        return datetime.fromisoformat(value).timestamp() if value else None

    events: list[tuple[float | None, str]] = []
    for ti in airflow.task_instances(dag_id, run_id):
        if ti["task_id"] in tasks:
            events.append((at(ti.get("start_date")), f"task {ti['task_id']} starts "
                           f"(try {ti.get('try_number')})"))
            events.append((at(ti.get("end_date")), f"task {ti['task_id']} ends ({ti['state']})"))
    for job, who in zip((blue, green), names, strict=True):
        standby = store.get_standby(job)
        if standby is not None:  # started before the old job stopped (restore="standby:...")
            events.append((standby.ready_at.timestamp(), f"{who} standby READY"))
            if standby.ended_at is not None:
                events.append((standby.ended_at.timestamp(), f"{who} standby {standby.status}"))
        for r in store.list_control_requests(job):
            events.append((r.created_at.timestamp(), f"{who} {r.action} request submitted"))
            events.append((r.updated_at.timestamp(), f"{who} {r.action} request {r.status}"))
        for c in store.list_checkpoints(job):
            if c.complete_time is not None:
                events.append((c.complete_time.timestamp(),
                               f"{who} {c.kind.lower()} {c.checkpoint_id} completes"))
        for a in store.list_attempts(job):
            events.append((a.started_at.timestamp(), f"{who} attempt {a.attempt} starts"))
            phases = {p.get("slot"): p.get("phases") for p in a.placement or ()}
            if any(phases.values()):  # seconds per start-up step, per slot
                events.append((a.started_at.timestamp(),
                               f"{who} attempt {a.attempt} start-up phases {phases}"))
            if a.ended_at:
                events.append((a.ended_at.timestamp(), f"{who} attempt {a.attempt} ends"))
    events += [(blue_last, f"{names[0]}'s last row seen in the sink"),
               (green_first, f"{names[1]}'s first row seen in the sink")]
    lo, hi = blue_last - 15, green_first + 5
    rows = sorted((t - blue_last, what) for t, what in events
                  if t is not None and lo <= t <= hi)
    return "\n".join(f"  {dt:+7.2f} s  {what}" for dt, what in rows)


def cutover_figures(store: MetadataStore, *, blue: str, green: str, blue_last: float,
                    green_first: float) -> dict:
    """One run of the blue-green cut-over through Airflow as ``bench/downtime.py`` records
    it (``--from-logs LOG --record --runner airflow``; see bench/downtime_report.py): the
    output gap and its parts, in seconds, and the 1-minute load average."""
    def last(job: str, action: str):
        found = [r for r in store.list_control_requests(job) if r.action == action]
        return max(found, key=lambda r: r.created_at) if found else None

    stop, promote = last(blue, "STOP_WITH_SAVEPOINT"), last(green, "PROMOTE")
    figures: dict = {"output_gap": round(green_first - blue_last, 3),
                     "load": round(os.getloadavg()[0], 1)}
    if stop is not None:
        figures["stop"] = round((stop.updated_at - stop.created_at).total_seconds(), 3)
    if promote is not None:
        figures["slots"] = round((promote.updated_at - promote.created_at).total_seconds(), 3)
        figures["first_commit_after_running"] = round(
            green_first - promote.updated_at.timestamp(), 3)
        if stop is not None:
            figures["processing_gap"] = round(
                (promote.updated_at - stop.created_at).total_seconds(), 3)
    return figures


def running_at(store: MetadataStore, job_id: str, attempt: int = 0) -> float | None:
    """Wall-clock time the attempt's last slot ran (its start plus the slowest slot's
    ``running`` phase in ``job_attempts.placement``): when the job went RUNNING."""
    found = [a for a in store.list_attempts(job_id) if a.attempt == attempt]
    if not found:
        return None
    ran = [p["phases"]["running"] for p in found[0].placement or ()
           if (p.get("phases") or {}).get("running") is not None]
    return found[0].started_at.timestamp() + max(ran) if ran else None


def standby_figures(store: MetadataStore, *, old: str, new: str, old_last: float,
                    new_first: float) -> dict:
    """One savepoint upgrade with a standby through Airflow as ``bench/downtime.py --runner
    airflow --from-logs LOG --record`` records it (scenario ``savepoint-standby``), seconds:
    ``output_gap`` (the new job's first row seen minus the old job's last), ``stop`` (the old
    job's stop request to SUCCEEDED), ``handover`` (SUCCEEDED to the standby's ``TAKEN_OVER``:
    it saw the old job end), ``slots`` (the new job's row to RUNNING: slot start-up and the
    restore), ``first_checkpoint`` and ``first_commit_after_running`` (RUNNING to its first
    completed checkpoint, to its first row seen), ``processing_gap`` (the stop request to
    RUNNING) and the 1-minute load average. ``app_start`` is 0: the standby's application
    started before the stop."""
    stops = [r for r in store.list_control_requests(old) if r.action == "STOP_WITH_SAVEPOINT"]
    stop = max(stops, key=lambda r: r.created_at) if stops else None
    standby, running = store.get_standby(new), running_at(store, new)
    figures: dict = {"output_gap": round(new_first - old_last, 3),
                     "load": round(os.getloadavg()[0], 1), "app_start": 0.0}
    if stop is not None:
        figures["stop"] = round((stop.updated_at - stop.created_at).total_seconds(), 3)
        if standby is not None and standby.ended_at is not None:
            figures["handover"] = round((standby.ended_at - stop.updated_at).total_seconds(), 3)
    if running is not None:
        figures["slots"] = round(running - store.get_job(new).created_at.timestamp(), 3)
        figures["first_commit_after_running"] = round(new_first - running, 3)
        done = [c.complete_time.timestamp() for c in store.list_checkpoints(new)
                if c.complete_time is not None and c.complete_time.timestamp() >= running]
        if done:
            figures["first_checkpoint"] = round(min(done) - running, 3)
        if stop is not None:
            figures["processing_gap"] = round(running - stop.created_at.timestamp(), 3)
    return figures


def lost_and_duplicated(rows: list[tuple[str, int]], records: int, keys: int) -> dict:
    """Running-count rows ``(key, count)`` of the ``versioned_sum`` example against its
    bounded generator (``records`` records over ``keys`` keys, the example's seed and
    splits): per key every count 1..n exactly once. ``lost``: counts missing (input lost
    at a hand-over leaves no hole in the counts, but the last count falls short of n);
    ``duplicated``: counts seen more than once; ``unexpected``: counts above n."""
    from collections import Counter

    from airflow_checkpoint_provider.engine import GeneratorSource

    src = GeneratorSource(records, num_keys=keys, seed=42, splits=2)
    expected = Counter(src.record(i)["key"] for i in range(records))
    seen = Counter(rows)
    have = {(k, c) for k, c in seen}
    return {"lost": sum(1 for k, n in expected.items() for i in range(1, n + 1)
                        if (k, i) not in have),
            "duplicated": sum(n - 1 for n in seen.values()),
            "unexpected": sum(1 for k, c in have if c > expected.get(k, 0))}

def pg_connect(url: str):
    """An autocommit connection to the PostgreSQL database at ``url`` (a SQLAlchemy or libpq
    URL)."""
    import psycopg

    from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

    return psycopg.connect(libpq_dsn(url), autocommit=True)


class PreparedSampler:
    """Samples ``pg_prepared_xacts`` of one database every ``period`` seconds in a thread:
    ``samples`` holds ``(monotonic time, [gid, ...])``; and the rows per version of
    ``table``: ``rows`` holds ``(monotonic time, {version: rows})``."""

    def __init__(self, url: str, table: str, period: float = 0.5) -> None:
        self.url, self.table, self.period = url, table, period
        self.samples: list[tuple[float, list[str]]] = []
        self.rows: list[tuple[float, dict[str, int]]] = []
        #: monotonic -> wall-clock time of each sample (for the cut-over's breakdown)
        self.wall: dict[float, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with pg_connect(self.url) as conn:
            while not self._stop.is_set():
                gids = [g for (g,) in conn.execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")]
                now = time.monotonic()
                self.wall[now] = time.time()
                self.samples.append((now, gids))
                self.rows.append((now, dict(conn.execute(
                    f"SELECT version, count(*) FROM {self.table} GROUP BY version").fetchall())))
                self._stop.wait(self.period)

    def __enter__(self) -> PreparedSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def output_gap(self) -> float | None:
        """Seconds from the sample that first saw blue's (v1) last row to the sample that
        first saw a row of green (v2): the output's downtime as a reader of the table sees
        it (0.5 s resolution); ``None`` if no sample saw a row of green."""
        ends = self.gap_ends()
        return None if ends is None else ends[1] - ends[0]

    def gap_ends(self) -> tuple[float, float] | None:
        """Wall-clock times of the samples that first saw blue's last row and green's
        first."""
        last_v1 = max((n.get("v1", 0) for _, n in self.rows), default=0)
        blue_done = min(t for t, n in self.rows if n.get("v1", 0) == last_v1)
        green = [t for t, n in self.rows if n.get("v2", 0) > 0]
        return (self.wall[blue_done], self.wall[min(green)]) if green else None

    def max(self, job_id: str | None = None, until: float | None = None) -> int:
        return max((len([g for g in gids if job_id is None or job_id in g])
                    for t, gids in self.samples if until is None or t <= until), default=0)


def sink_rows(url: str, table: str, version: str | None = None) -> list[tuple[str, int]]:
    """The ``(key, count)`` rows of the example's sink ``table`` (of one ``version``)."""
    with pg_connect(url) as conn:
        if version is None:
            return conn.execute(f"SELECT key, count FROM {table}").fetchall()
        return conn.execute(f"SELECT key, count FROM {table} WHERE version = %s",
                            (version,)).fetchall()
