"""Launching one attempt's slots as a Spark barrier stage, and ending it so that its cores
are free again before the next attempt (issue 35 #3).

A failed attempt's stage must not keep its cores: a barrier stage starts only when every
one of its tasks gets a core at once, so two leftover tasks on ``local[4]`` block a
3-slot restart for good. Ending an attempt (:meth:`SparkBarrierLauncher.stop`) therefore

1. cancels the attempt's job group (also when the stage already failed: Spark then kills
   the tasks it still runs);
2. kills the slot processes itself where it can (each slot notes its pid, start time and
   host in a directory of the driver; on the driver's host those processes are killed with
   SIGKILL, checked against pid reuse), instead of waiting for Spark's Python worker kill,
   which never comes when the ``pyspark.daemon`` that should deliver it was killed;
3. before the next attempt's stage is submitted, waits until the status tracker shows no
   task of the ended attempt's stage still running.

Where the driver cannot kill (executors on other hosts) a slot ends its own process a few
seconds after its coordinator connection closed (``runtime/host/slot.py``, ``orphan_exit``).
If cores are still held when the next attempt should start, that attempt fails with
:class:`~...errors.SlotsNotReleasedError` naming the stage instead of waiting for slots that
cannot start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
import weakref

from ...errors import ConfigurationError, SlotsNotReleasedError, SparkProcessLostError
from ...settings import SLOT_ORPHAN_EXIT

log = logging.getLogger(__name__)

#: how long ending an attempt waits for its tasks to free their cores
RELEASE_SECONDS = 60.0


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot; /proc/<pid>/stat field
    22), or None when it is gone or a zombie. Tells a process from a later one that got
    its pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def note_slot_process(directory: str | None, attempt: int, slot: int) -> str | None:
    """Note this process (a slot's Python worker) in the driver's ``directory``, if that
    directory is reachable from here (local mode, executors on the driver's host)."""
    if not directory or not os.path.isdir(directory):
        return None
    path = os.path.join(directory, f"a{attempt}-s{slot}-{os.getpid()}.json")
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(
                {
                    "pid": os.getpid(),
                    "start": _start_time(os.getpid()),
                    "host": socket.gethostname(),
                    "attempt": attempt,
                    "slot": slot,
                },
                f,
            )
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def kill_noted_processes(directory: str) -> list[str]:
    """SIGKILL every slot process noted in ``directory`` that still runs on this host
    (the same pid *and* start time); returns what was killed (``attempt/slot pid``)."""
    killed: list[str] = []
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".json")]
    except OSError:
        return killed
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path) as f:
                note = json.load(f)
        except (OSError, ValueError):
            continue
        if note.get("host") != socket.gethostname():
            continue
        pid = int(note["pid"])
        if note.get("start") is None or _start_time(pid) != note["start"]:
            with contextlib.suppress(OSError):
                os.remove(path)  # gone (or its pid reused): nothing to kill
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(f"attempt {note['attempt']} slot {note['slot']} (pid {pid})")
    return killed


def make_slot_function(
    attempt: int,
    coordinator: tuple[str, int],
    local_master: bool = False,
    secret: bytes | None = None,
    notes: str | None = None,
):
    def run_partition(iterator):
        from pyspark import BarrierTaskContext

        from airflow_checkpoint_provider.engine.runners.spark.launcher import (
            note_slot_process,
        )
        from airflow_checkpoint_provider.engine.runtime.host.slot import run_slot

        ctx = BarrierTaskContext.get()
        slot = ctx.partitionId()
        note = note_slot_process(notes, attempt, slot)
        executor_address = ctx.getTaskInfos()[slot].address
        executor_host = executor_address.rsplit(":", 1)[0]
        # A standalone executor runs in <worker work dir>/<app id>/<executor id>; in local
        # mode the slot runs beside the driver.
        work_dir = os.getcwd()
        in_app_dir = os.path.basename(os.path.dirname(work_dir)).startswith("app-")
        executor_id = (
            "driver" if local_master else (os.path.basename(work_dir) if in_app_dir else None)
        )
        placement = {
            "executor_id": executor_id,
            "executor_address": executor_address,
            "work_dir": work_dir,
            "python": sys.executable,
        }
        # a local master: every slot is in this host's processes, so loopback only
        bind_host = os.environ.get("SPARK_LOCAL_IP") or (
            "127.0.0.1" if local_master else "0.0.0.0"
        )
        advertise = os.environ.get("SPARK_LOCAL_IP") or (
            "127.0.0.1" if local_master else executor_host
        )

        def exchange(address):
            infos = ctx.allGather(json.dumps([slot, address]))
            return {int(s): a for s, a in (json.loads(i) for i in infos)}

        try:
            # a Python worker hosts one task at a time: the slot may end it when orphaned
            run_slot(
                slot,
                attempt,
                coordinator,
                exchange_peers=exchange,
                bind_host=bind_host,
                advertise_host=advertise,
                placement=placement,
                secret=secret,
                orphan_exit=SLOT_ORPHAN_EXIT.get(),
            )
        finally:
            if note is not None:
                with contextlib.suppress(OSError):
                    os.remove(note)
        yield slot

    return run_partition


def root_cause(error: BaseException) -> str:
    """The most telling line of a Py4J/Spark error: a Python exception raised in a slot or
    Spark's stage failure reason, not the Py4J call that carried it."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    for ln in reversed(lines):  # the last Python exception line of a worker traceback
        head = ln.split(":", 1)[0]
        if (
            head.endswith(("Error", "Exception", "Failure", "Aborted"))
            and not ln.startswith(("at ", "org.apache", "py4j", "Caused by"))
            and " " not in head
        ):
            return ln[:500]
    for ln in lines:
        if "Most recent failure reason" in ln or "SparkException" in ln:
            return ln[:500]
    return (lines[0] if lines else type(error).__name__)[:500]


def driver_jvm_lost(error: BaseException) -> bool:
    """Whether ``error`` (from a Py4J call) says the driver's JVM is gone: the connection
    to its gateway was refused, reset or closed (not an exception the JVM raised)."""
    if isinstance(error, ConnectionError | EOFError):
        return True
    try:
        from py4j.protocol import Py4JError, Py4JNetworkError
    except ImportError:  # pragma: no cover - pyspark brings py4j
        return False
    if isinstance(error, Py4JNetworkError):
        return True
    text = str(error)
    return isinstance(error, Py4JError) and any(
        s in text for s in ("Answer from Java side is empty",
                            "Error while sending or receiving", "Connection refused"))


def executor_lost(error: BaseException) -> str | None:
    """The line of a failed stage's error that says an executor was lost, else ``None``."""
    return next((ln.strip()[:500] for ln in str(error).splitlines()
                 if "ExecutorLostFailure" in ln or "Executor lost" in ln), None)


class SparkBarrierLauncher:
    """Runs one attempt's slots as a barrier stage in a background thread.

    :param release_seconds: how long ending an attempt (and starting the next) waits for
        the previous attempt's tasks to free their cores.
    :param kill_slots: kill the slot processes of a failed attempt that run on the
        driver's host (off: only Spark's cancellation and the slots' own exit end them).
    """

    def __init__(
        self,
        spark,
        slot_wait_seconds: float = 0.0,
        *,
        release_seconds: float = RELEASE_SECONDS,
        kill_slots: bool = True,
    ) -> None:
        self.spark = spark
        self.slot_wait_seconds = slot_wait_seconds
        self.release_seconds = release_seconds
        self.kill_slots = kill_slots
        self.sc = spark.sparkContext
        # read now: once the driver JVM is gone, nothing can be asked of it
        self.app = f"Spark application {self.sc.applicationId} (master {self.sc.master})"
        self._run: _StageRun | None = None  # the current attempt's stage
        #: the attempt whose start adopts the running stage (its slots were recycled)
        self._adopt: int | None = None
        #: job groups of ended attempts whose tasks may still hold cores
        self._held: list[str] = []
        self.notes = tempfile.mkdtemp(prefix="ckpt-slots-")
        weakref.finalize(self, shutil.rmtree, self.notes, True)

    def check_slots(self, num_slots: int, wait_seconds: float = 0.0) -> None:
        """Fail fast when the cluster cannot gang-schedule ``num_slots`` tasks. On a cluster
        manager, executors register after the session starts: wait up to ``wait_seconds``."""
        deadline = time.monotonic() + wait_seconds
        available = self.sc.defaultParallelism
        while num_slots > available and time.monotonic() < deadline:
            time.sleep(0.5)
            available = self.sc.defaultParallelism
        if num_slots > available:
            raise ConfigurationError(
                f"the job needs {num_slots} slots (its highest operator parallelism) but the Spark "
                f"cluster offers {available} cores ({self.sc.master}); lower the parallelism or "
                "add executors/cores"
            )

    def busy_tasks(self) -> dict[int, int]:
        """Stage id -> tasks still running, over the stages of ended attempts."""
        try:
            return self._busy_tasks()
        except Exception as exc:  # noqa: BLE001 - e.g. the SparkContext was stopped
            log.warning("Cannot read Spark's status tracker: %s", exc)
            return {}

    def _busy_tasks(self) -> dict[int, int]:
        tracker = self.sc.statusTracker()
        busy: dict[int, int] = {}
        still_held = []
        for group in self._held:
            group_busy = {}
            for job_id in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job_id)
                for stage_id in info.stageIds if info is not None else ():
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None and stage.numActiveTasks > 0:
                        group_busy[stage_id] = stage.numActiveTasks
            if group_busy:
                still_held.append(group)
                busy.update(group_busy)
        self._held = still_held
        return busy

    def wait_released(self, timeout: float) -> dict[int, int]:
        """Wait until no task of an ended attempt runs (killing the noted slot processes
        again meanwhile: a slot may have noted itself after the first kill); returns what
        still runs after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        busy = self.busy_tasks()
        while busy and time.monotonic() < deadline:
            if self.kill_slots:
                kill_noted_processes(self.notes)
            time.sleep(0.2)
            busy = self.busy_tasks()
        return busy

    def driver_lost_error(self, error: BaseException, doing: str) -> SparkProcessLostError:
        return SparkProcessLostError(
            f"the driver JVM of {self.app} is gone ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0][:300] if str(error).strip() else 'no answer'}"
            f") while {doing}: the SparkContext died with it (in local mode the executors "
            "ran in that JVM too), so no restart on it can work; run the job again in a new "
            "Spark application (restore='latest' / `ckpt run --restore latest` resumes from "
            "its last completed checkpoint), and see the driver's log or hs_err_pid*.log for "
            "why the JVM ended (killed, out of memory)")

    def start(
        self,
        attempt: int,
        coordinator: tuple[str, int],
        num_slots: int,
        secret: bytes | None = None,
    ) -> None:
        try:
            self._start(attempt, coordinator, num_slots, secret)
        except Exception as exc:
            if driver_jvm_lost(exc):
                raise self.driver_lost_error(exc, f"starting attempt {attempt}") from exc
            raise

    def recycle(self, attempt: int) -> None:
        """The running stage's slots host ``attempt`` next (they registered as it): its
        :meth:`start` adopts the stage instead of submitting one."""
        self._adopt = attempt

    def _start(
        self,
        attempt: int,
        coordinator: tuple[str, int],
        num_slots: int,
        secret: bytes | None = None,
    ) -> None:
        from pyspark import InheritableThread

        adopt, self._adopt = self._adopt, None
        if adopt == attempt and self._run is not None and not self._run.done:
            log.info("Attempt %d runs in the recycled slots of job group %s", attempt,
                     self._run.group)
            return
        self.check_slots(num_slots, self.slot_wait_seconds)  # e.g. a lost executor's replacement
        t0 = time.monotonic()
        busy = self.wait_released(self.release_seconds)
        if busy:
            stages = ", ".join(f"stage {s}: {n} task(s)" for s, n in sorted(busy.items()))
            raise SlotsNotReleasedError(
                f"the previous attempt's barrier stage still runs on {self.sc.master} after "
                f"{time.monotonic() - t0:.0f} s ({stages}), so attempt {attempt} would not get "
                f"its {num_slots} slots at once; a slot stuck in user code ends its process "
                f"{SLOT_ORPHAN_EXIT.get():.0f} s after it lost the coordinator "
                f"({SLOT_ORPHAN_EXIT.name}), check the executors' logs"
            )
        run = _StageRun(group=f"ckpt-{uuid.uuid4().hex[:12]}-a{attempt}")
        # the job secret travels in the stage's closure (Spark's own RPC; enable
        # spark.authenticate / spark.network.crypto.enabled on untrusted networks)
        fn = make_slot_function(
            attempt, coordinator, self.sc.master.startswith("local"), secret, self.notes
        )

        def body() -> None:
            try:
                self.sc.setJobGroup(
                    run.group, f"checkpointed job attempt {attempt}", interruptOnCancel=True
                )
                self.sc.parallelize(range(num_slots), num_slots).barrier().mapPartitions(
                    fn
                ).collect()
            except BaseException as exc:  # noqa: BLE001 - reported through poll()
                run.error = exc
            finally:
                run.done = True

        run.thread = InheritableThread(target=body, name=f"barrier-stage-{attempt}", daemon=True)
        self._run = run
        run.thread.start()

    def poll(self) -> str | None:
        run = self._run
        if run is not None and run.done and run.error is not None:
            if driver_jvm_lost(run.error):
                return f"Spark barrier stage failed: the driver JVM of {self.app} is gone " \
                       f"({type(run.error).__name__}: {root_cause(run.error)})"
            lost = executor_lost(run.error)
            if lost:
                return f"Spark barrier stage failed: an executor of {self.app} was lost: {lost}"
            return f"Spark barrier stage failed: {root_cause(run.error)}"
        return None

    def stop(self) -> None:
        """End the attempt: cancel its job group and kill its slot processes. The next
        :meth:`start` waits until their tasks freed the cores (the job master closes the
        slots' control connections right after this, which ends the slots it could not
        kill)."""
        run, self._run = self._run, None
        self._adopt = None
        if run is None:
            return
        t0 = time.monotonic()
        # also when the job already ended: a failed barrier stage may still run tasks
        try:
            self.sc.cancelJobGroup(run.group)
        except Exception as exc:  # noqa: BLE001 - e.g. the SparkContext was stopped
            log.warning("Cannot cancel Spark job group %s: %s", run.group, exc)
        if run.thread is not None:
            run.thread.join(timeout=5.0)  # a cancelled or failed job returns at once
        if run.done and run.error is None:
            return  # every slot returned: nothing holds a core
        self._held.append(run.group)
        if self.kill_slots:
            killed = kill_noted_processes(self.notes)
            if killed:
                log.info("Killed the slot processes of the ended attempt: %s", ", ".join(killed))
        if run.thread is not None:
            run.thread.join(timeout=60)
        log.info("Ended Spark job group %s in %.1f s", run.group, time.monotonic() - t0)


@dataclasses.dataclass
class _StageRun:
    """One attempt's barrier stage: its job group and the thread that waits for it."""

    group: str
    thread: threading.Thread | None = None
    done: bool = False
    error: BaseException | None = None
