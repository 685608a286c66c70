"""One chaos run: a cell (pipeline, runner, state backend, checkpoint mode) under the faults
its seed draws, compared with the cell's reference.

The job runs in a driver process (:mod:`.driver`); this process watches the run's metadata
DB, fires the seeded kills, starts a new driver with ``restore="latest"`` after a driver
kill, and at the end compares the committed output with the reference and records where
every fault landed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from .catalogue import NEXMARK_KNOWN, ROOT, BuildContext, Entry, entry, nexmark_config
from .cpu import CpuMeter
from .faults import Fault, fired_raises, landing, plan, restart_delay

#: what the runs' engine settings are: ``default`` (no ``CKPT_*`` variable reaches a driver
#: or its slots, every engine setting at its default: the heartbeat timeout, buffer
#: debloating ...); each record carries it, and the report counts the runs on these settings
#: apart from older runs (which set ``CKPT_HEARTBEAT_TIMEOUT_S=2`` and slept it out after a
#: driver kill)
SETTINGS = "default"
#: the status of a run that did not end within its cell's bound (:func:`bound_s`)
UNFINISHED = "UNFINISHED"


def bound_s(cell: Cell, e: Entry) -> float:
    """How long a run of ``cell`` may take before it counts as unfinished (a failure)."""
    return (240 if cell.runner == "local" else 600) + 10 * e.seconds


def code_revision() -> str | None:
    """The commit the run's code is at (``+dirty`` when the engine has uncommitted changes):
    a run proves something only about the code it ran."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        rev = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", "airflow_checkpoint_provider")
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")


#: what a cell's kills are: ``any`` (drawn among the runner's kinds, faults.KILL_KINDS) or
#: ``driver`` (every kill SIGKILLs the driver, then ``restore="latest"``)
KILLS = ("any", "driver")


@dataclass(frozen=True)
class Cell:
    pipeline: str
    runner: str = "local"
    backend: str = "heap"
    mode: str = "aligned"
    kills: str = "any"

    @property
    def id(self) -> str:
        base = f"{self.pipeline}/{self.runner}/{self.backend}/{self.mode}"
        return base if self.kills == "any" else f"{base}/{self.kills}-kills"

    @classmethod
    def parse(cls, text: str) -> Cell:
        parts = text.split("/")
        if not 1 <= len(parts) <= 5:
            raise SystemExit(
                f"a cell is pipeline[/runner[/backend[/mode[/driver-kills]]]], not {text!r}"
            )
        if len(parts) == 5:
            parts[4] = parts[4].removesuffix("-kills")
        cell = cls(*parts)
        if (
            cell.runner not in ("local", "spark")
            or cell.backend not in ("heap", "rocksdb")
            or cell.mode not in ("aligned", "unaligned")
            or cell.kills not in KILLS
        ):
            raise SystemExit(
                f"bad cell {text!r}: runner local|spark, backend heap|rocksdb, "
                "mode aligned|unaligned, kills any|driver-kills"
            )
        entry(cell.pipeline)
        return cell


def replay_command(cell: Cell, seed: int) -> str:
    return f"PYTHONPATH=. python -m bench.chaos --cell {cell.id} --seed {seed}"


# -- references -------------------------------------------------------------------------------
#: the files a reference is a function of, besides the catalogue: a cached reference is
#: used again only while none of them changed (a failure-free run is made by the engine and
#: the tests' pipeline modules; DuckDB's from the query texts and bench/nexmark's generator)
REFERENCE_INPUTS = {
    "duckdb": ("bench/chaos/reference_duckdb.py", "bench/nexmark/generator.py"),
    "failure-free": (
        "tests/support/pipelines.py",
        "tests/support/join_pipelines.py",
        "tests/support/vector_join_pipelines.py",
        "tests/support/broadcast_pipelines.py",
        "tests/support/regular_join_model.py",
        "tests/support/perf_pipelines.py",
        "tests/support/event_time_pipelines.py",
    ),
}


def reference_fingerprint(e: Entry) -> str:
    """A hash of what the reference of ``e`` is computed from (its inputs' sizes, rates and
    the source of the code computing it), naming its cache file: a reference is computed
    once per pipeline and input and reused by every seed and cell of that pipeline."""
    h = hashlib.sha256(repr((e.name, e.records, e.seconds, e.outputs)).encode())
    for rel in ("bench/chaos/catalogue.py", *REFERENCE_INPUTS.get(e.reference, ())):
        path = os.path.join(ROOT, rel)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def reference(e: Entry, workdir: str) -> dict:
    """``{output path: Counter}`` of the cell's reference (cached in ``workdir`` under its
    :func:`reference_fingerprint`)."""
    from .compare import as_multiset

    cache = os.path.join(workdir, "reference", f"{e.name}-{reference_fingerprint(e)}.pickle")
    if os.path.exists(cache):
        with open(cache, "rb") as f:
            return pickle.load(f)
    if e.reference == "duckdb":
        from .catalogue import NEXMARK_EVENTS
        from .reference_duckdb import reference_rows

        ref = {}
        for query, output in zip(e.queries or (e.name,), e.outputs, strict=True):
            rows = reference_rows(query, NEXMARK_EVENTS, nexmark_config())
            columns = tuple(rows[0]) if rows else output.columns
            ref[output.path] = as_multiset(rows, output, columns)
    else:
        root = tempfile.mkdtemp(prefix=f"ref-{e.name}-", dir=workdir)
        res = _drive(Cell(e.name), root, [], timeout=300)
        if res["result"].get("status") != "FINISHED":
            raise RuntimeError(
                f"the failure-free run of {e.name} ended "
                f"{res['result'].get('status')}: "
                f"{res['result'].get('failure_reason')} (logs in {root})"
            )
        ref = _committed(e, root)
        shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache + ".tmp", "wb") as f:
        pickle.dump(ref, f)
    os.replace(cache + ".tmp", cache)
    return ref


def _job_rank(root: str) -> dict[str, int]:
    from airflow_checkpoint_provider.engine.client import MetadataStore

    with MetadataStore("sqlite:///" + os.path.join(root, "meta.db"), migrate=False) as store:
        jobs = sorted(store.list_jobs(), key=lambda j: j.created_at)
    return {j.job_id: i for i, j in enumerate(jobs)}


def _committed(e: Entry, root: str, columns_of: dict | None = None) -> dict:
    from .compare import as_multiset, committed_rows

    rank = _job_rank(root)
    out = {}
    for o in e.outputs:
        cols = (columns_of or {}).get(o.path)
        out[o.path] = as_multiset(committed_rows(os.path.join(root, o.path), rank), o, cols)
    return out


# -- the driver process -------------------------------------------------------------------------
#: what the harness sets in a driver's environment besides the inherited one (no engine
#: setting: Spark's bind address and the import path of the repository)
DRIVER_ENV = {"PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1"}


#: ``--slot-log-level`` (a reproduction): the slots' ``CKPT_LOG_LEVEL`` (e.g. ``INFO``: the
#: Kafka sink's "published epoch ..." lines in the driver's log); such runs are recorded as
#: diagnostic, not counted in their cells
SLOT_LOG_LEVEL: str | None = None


def driver_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """A driver's environment: ``base`` (``os.environ``) without any engine setting
    (``CKPT_*``: a run is on the default settings whatever the caller's shell exported),
    plus :data:`DRIVER_ENV` (and :data:`SLOT_LOG_LEVEL` if set)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith("CKPT_")}
    env.update(DRIVER_ENV)
    if SLOT_LOG_LEVEL:
        env["CKPT_LOG_LEVEL"] = SLOT_LOG_LEVEL
    return env


class _Drivers:
    """The run's driver processes (each in its own process group, ended by group id)."""

    def __init__(
        self, cell: Cell, root: str, raise_points: list[int], extra: dict | None = None
    ) -> None:
        self.root = root
        self.spec = os.path.join(root, "spec.json")
        with open(self.spec, "w") as f:
            json.dump(
                {
                    "pipeline": cell.pipeline,
                    "root": root,
                    "backend": cell.backend,
                    "mode": cell.mode,
                    "runner": cell.runner,
                    "raise_points": raise_points,
                    "extra": extra or {},
                },
                f,
            )
        self.procs: list[subprocess.Popen] = []
        self.cpu = CpuMeter()
        self.env = driver_env()

    @property
    def current(self) -> subprocess.Popen:
        return self.procs[-1]

    def result_path(self, n: int) -> str:
        return os.path.join(self.root, f"result-{n}.json")

    def start(self, restore: str | None = None) -> None:
        n = len(self.procs)
        cmd = [
            sys.executable,
            "-m",
            "bench.chaos.driver",
            "--spec",
            self.spec,
            "--result",
            self.result_path(n),
        ]
        if restore:
            cmd += ["--restore", restore]
        log = open(os.path.join(self.root, f"driver-{n}.log"), "w")  # noqa: SIM115
        self.procs.append(
            subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        self.cpu.add_session(self.procs[-1].pid)
        log.close()

    def result(self) -> dict | None:
        path = self.result_path(len(self.procs) - 1)
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return None

    def kill_current(self) -> None:
        self.current.send_signal(signal.SIGKILL)
        self.current.wait(30)

    def end_all(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def _store(root: str):
    from airflow_checkpoint_provider.engine.client import MetadataSchemaError, MetadataStore

    if not os.path.exists(os.path.join(root, "meta.db")):
        return None
    try:
        return MetadataStore("sqlite:///" + os.path.join(root, "meta.db"), migrate=False)
    except MetadataSchemaError:
        return None


def _live_slot_pids(store) -> list[int]:
    """PIDs of the slots of the newest running attempt (its placement), else []."""
    jobs = [j for j in store.list_jobs() if j.status == "RUNNING"]
    if not jobs:
        return []
    job = max(jobs, key=lambda j: j.created_at)
    attempts = store.list_attempts(job.job_id)
    if not attempts:
        return []
    a = max(attempts, key=lambda a: a.attempt)
    if a.ended_at is not None or not a.placement:
        return []
    return [int(p["pid"]) for p in a.placement if p.get("pid")]


def _cancel(store) -> bool:
    """Ask the running job to cancel (an unbounded job's end); True once asked."""
    jobs = [j for j in store.list_jobs() if j.status in ("RUNNING", "RESTARTING")]
    if not jobs:
        return False
    store.submit_control_request(max(jobs, key=lambda j: j.created_at).job_id, "CANCEL", {})
    return True


def _jvm_of(driver_pid: int) -> int | None:
    """The Spark JVM the driver started (local mode: driver and executor in one JVM)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == "java" and int(fields[1]) == driver_pid:
            return int(name)
    return None


def _after_jvm_kill(drivers: _Drivers, wait_s: float = 60.0) -> str:
    """After the Spark JVM of the driver died: the driver should end by itself (its Spark
    session is gone); if it does not within ``wait_s`` it is killed (noted). Then the dead
    Spark application has ended: a new driver restores at once (issue 51 item 3: the
    name is taken at once from a provably gone driver)."""
    try:
        drivers.current.wait(wait_s)
        note = f"; driver ended by itself ({(drivers.result() or {}).get('status', 'no result')})"
    except subprocess.TimeoutExpired:
        drivers.kill_current()
        note = f"; driver still running {wait_s:.0f} s after the JVM died: killed"
    return note


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pause(first_running: float | None, next_due: float | None) -> float:
    """How long the harness sleeps between looks: 0.1 s until the job first ran, then up to
    the next kill (at least 50 ms, at most 0.25 s)."""
    if first_running is None:
        return 0.1
    if next_due is None:
        return 0.25
    return min(max(next_due - time.monotonic(), 0.05), 0.25)


def _sigkill(pid: int) -> bool:
    """SIGKILL ``pid``; False when it had already exited (it may end between the choice and
    the kill: the fault then did not fire)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _drive(
    cell: Cell,
    root: str,
    faults: list[Fault],
    timeout: float,
    rng: random.Random | None = None,
    hooks=None,
) -> dict:
    """Run the job with its kills; returns the last driver's result and the drivers' count.

    ``hooks`` (an unbounded job, e.g. CDC): ``extra`` (spec fields for the build),
    ``on_running()`` once the job first runs, ``ready_to_stop()`` polled once every kill
    fired: then the job is cancelled."""
    raise_points = [f.point for f in faults if f.kind == "raise"]
    kills = [f for f in faults if f.kind != "raise"]
    rng = rng or random.Random(0)
    drivers = _Drivers(cell, root, raise_points, getattr(hooks, "extra", None))
    cancelled = False
    launched_at = time.time()
    drivers.start()
    store = None
    first_running = None
    deadline = time.monotonic() + timeout
    outcome: dict = {}
    try:
        while True:
            if drivers.current.poll() is not None:
                outcome = drivers.result() or {
                    "status": "DRIVER-DIED",
                    "failure_reason": f"driver exited {drivers.current.returncode} without a "
                    f"result (see {root}/driver-{len(drivers.procs) - 1}.log)",
                }
                break
            if time.monotonic() > deadline:
                # a failure of the run (the job made no progress to its end), never a skip
                outcome = {
                    "status": UNFINISHED,
                    "failure_reason": f"no end within the cell's bound of {timeout:.0f} s",
                }
                break
            drivers.cpu.sample()
            if store is None:
                store = _store(root)
            if (
                store is not None
                and hooks is not None
                and not kills
                and not cancelled
                and first_running is not None
                and hooks.ready_to_stop()
            ):
                cancelled = _cancel(store)
            # the metadata DB is read until the job first ran and when a kill is due, not
            # in between (the harness polled it 20 times a second: ~5% of a core)
            next_due = first_running + kills[0].at if kills and first_running else None
            if store is not None and (
                first_running is None or (next_due is not None and time.monotonic() >= next_due)
            ):
                pids = _live_slot_pids(store)
                if first_running is None and pids:
                    first_running = time.monotonic()
                    if hooks is not None:
                        hooks.on_running()
                due = (
                    kills
                    and first_running is not None
                    and time.monotonic() >= first_running + kills[0].at
                )
                if due and kills[0].kind == "driver":
                    f = kills.pop(0)
                    f.fired_at, f.target = time.time(), f"driver pid {drivers.current.pid}"
                    drivers.kill_current()
                    # no wait for a heartbeat: the dead driver is provably gone (same host,
                    # process dead), a restart takes the job name at once (issue 51 item 3)
                    f.restarted_at = time.time()
                    drivers.start(restore="latest")
                elif due and kills[0].kind == "jvm":
                    f = kills.pop(0)
                    jvm = _jvm_of(drivers.current.pid)
                    if jvm is not None and _sigkill(jvm):
                        f.fired_at, f.target = time.time(), f"Spark JVM pid {jvm}"
                        f.target += _after_jvm_kill(drivers)
                        f.restarted_at = time.time()
                        drivers.start(restore="latest")
                elif due and pids:
                    f = kills.pop(0)
                    pid = rng.choice(sorted(pids))
                    if _alive(pid) and _sigkill(pid):  # not a zombie, not gone
                        f.fired_at, f.target = time.time(), f"{f.kind} pid {pid}"
            time.sleep(_pause(first_running, next_due))
    finally:
        if store is not None:
            store.close()
        drivers.cpu.sample(force=True)
        drivers.end_all()
    return {
        "result": outcome,
        "drivers": len(drivers.procs),
        "cpu": drivers.cpu.seconds(),
        "launched_at": launched_at,
    }


def _hooks_for(e: Entry, root: str, seed: int):
    """The run's hooks: CDC and Kafka cells prepare their source and compute what they
    compare (cdc.py, kafka_cells.py); other cells have none."""
    if e.group == "cdc":
        from .cdc import for_entry

        return for_entry(e.name, root, seed, e.seconds)
    if e.group == "kafka":
        from .kafka_cells import for_entry as kafka_hooks

        return kafka_hooks(e.name, root, seed, e.seconds)
    return None


# -- one run ------------------------------------------------------------------------------------
def run_one(
    cell: Cell, seed: int, workdir: str, *, keep: bool = False, max_faults: int = 3
) -> dict:
    """Run ``cell`` once under the faults of ``seed``; the run's record (see report.py)."""
    from .compare import difference

    e = entry(cell.pipeline)
    os.makedirs(workdir, exist_ok=True)
    # CDC and Kafka cells compare with what their hooks compute, not with a reference run
    hooked = e.reference in ("source-table", "kafka-reference")
    ref = reference(e, workdir) if not hooked else {}
    root = tempfile.mkdtemp(prefix=f"{e.name}-{seed}-", dir=workdir)
    faults = plan(
        seed,
        cell.id,
        cell.runner,
        e.seconds,
        e.records,
        max_faults,
        driver_only=cell.kills == "driver",
    )
    hooks = _hooks_for(e, root, seed)
    t0 = time.monotonic()
    res = _drive(
        cell,
        root,
        faults,
        timeout=bound_s(cell, e),
        rng=random.Random(f"{cell.id}|{seed}|targets"),
        hooks=hooks,
    )
    result = res["result"]
    # an unbounded job (CDC) is cancelled by the harness once it caught up; a bounded one
    # with hooks (Kafka) finishes: the hooks say which
    finished = result.get("status") == (hooks.final_status if hooks is not None else "FINISHED")
    record = {
        "cell": cell.id,
        "pipeline": e.name,
        "group": e.group,
        "reference": e.reference,
        "runner": cell.runner,
        "backend": cell.backend,
        "mode": cell.mode,
        "seed": seed,
        "status": result.get("status"),
        "restarts": result.get("restarts"),
        "drivers": res["drivers"],
        "failure_reason": result.get("failure_reason"),
        "seconds": round(time.monotonic() - t0, 1),
        # CPU of every process of the run (cpu.py): its cost whatever the machine's load
        "cpu_seconds": round(res["cpu"], 1),
        "replay": replay_command(cell, seed),
        "known": NEXMARK_KNOWN.get(e.name),
        "root": root,
        "time": time.time(),
        "revision": code_revision(),
        "settings": SETTINGS,
    }
    fired = fired_raises(BuildContext(root).faults_dir)
    for f in faults:
        if f.kind == "raise" and f.point in fired:
            f.fired_at = fired[f.point]
    store = _store(root)
    try:
        if store is not None:  # every driver's restarts (a killed driver wrote no result)
            record["restarts"] = sum(
                max(len(store.list_attempts(j.job_id)) - 1, 0) for j in store.list_jobs()
            )
            # the first driver's start-up (launch to its first attempt): what a restart's
            # restarted_s compares with on the same machine at the same time
            record["start_s"] = restart_delay(res["launched_at"], store)
        for f in faults:
            if f.fired_at is not None and store is not None:
                f.landed = landing(
                    f.fired_at, store, [os.path.join(root, o.path) for o in e.outputs]
                )
                if f.kind in ("driver", "jvm"):
                    f.restarted_s = restart_delay(f.fired_at, store, f.restarted_at)
    finally:
        if store is not None:
            store.close()
    record["faults"] = [f.to_dict() for f in faults]
    diffs = {}
    if finished and hooks is not None:
        d = difference(*hooks.multisets())
        if d["missing"] or d["extra"]:
            diffs["target table"] = d
    elif finished:
        # DuckDB's rows name the compared columns; a failure-free run's rows compare whole
        columns_of = {p: _columns(c) for p, c in ref.items()} if e.reference == "duckdb" else None
        got = _committed(e, root, columns_of)
        for path, want in ref.items():
            d = difference(got[path], want)
            if d["missing"] or d["extra"]:
                diffs[path] = d
    _diagnostics(hooks, root, record, diffs)
    if hooks is not None:
        hooks.close()
    record["differences"] = diffs
    record["ok"] = finished and not diffs
    record["environment"] = None if record["ok"] else _environment_failure(root)
    if record["ok"] and not keep:
        shutil.rmtree(root, ignore_errors=True)
        record["root"] = None
    return record


def _diagnostics(hooks, root: str, record: dict, diffs: dict) -> None:
    """What a reproduction adds to a run's record: its non-default conditions (the slots'
    log level, a Kafka cell's old shape, the broker on more threads: recorded, not counted
    as a run of the cell, report.py); after a Kafka run that differed, what the broker holds
    (kafka_state.py, read before anything else touches it; also ``broker_state.json`` in
    the run root)."""
    conditions = dict((hooks.diagnostic() if hasattr(hooks, "diagnostic") else None) or {})
    if SLOT_LOG_LEVEL:
        conditions["slot_log_level"] = SLOT_LOG_LEVEL
    if conditions:
        record["diagnostic"] = conditions
    if getattr(hooks, "aborted_hidden", None):  # a Kafka cell: the broker's caveat (1)
        record["aborted_hidden"] = hooks.aborted_hidden
    if not diffs or not hasattr(hooks, "broker_state"):
        return
    try:
        record["broker_state"] = hooks.broker_state(list(_job_rank(root)))
    except Exception as exc:  # noqa: BLE001 - a diagnosis must not lose the record
        record["broker_state"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    with open(os.path.join(root, "broker_state.json"), "w") as f:
        json.dump(record["broker_state"], f, indent=1, default=str)


#: lines of a broken installation (the shared venv being reinstalled under a run): such a
#: run says nothing about the engine; the report lists it apart
ENVIRONMENT_MARKERS = (
    "ModuleNotFoundError",
    "No module named",
    "of the psycopg DBAPI; version",
    "java.lang.ExceptionInInitializerError",
    # a CDC run's replication slot that the harness failed to drop (its cluster-wide name
    # is the pipeline's): the next run of that pipeline could not start
    "exists for plugin 'pgoutput' in database",
)


def _environment_failure(root: str) -> str | None:
    """The first line of the run's driver logs showing a broken installation, if any."""
    for name in sorted(os.listdir(root)):
        if name.startswith("driver-") and name.endswith(".log"):
            with open(os.path.join(root, name), errors="replace") as f:
                for line in f:
                    if any(m in line for m in ENVIRONMENT_MARKERS):
                        return line.strip()[:300]
    return None


def _columns(counter) -> tuple[str, ...] | None:
    """The columns of a reference multiset (its rows are ((column, value), ...))."""
    for row in counter:
        return tuple(c for c, _ in row)
    return None
