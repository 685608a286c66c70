"""The failover helpers of issue 35 #3 (importable by slot processes and Spark Python
workers: this directory is on their ``sys.path``): a running-sum job whose first attempt has
a subtask stuck in user code (:func:`stuck_pipeline`), and SIGKILLs of Spark's Python
processes while a running-sum job checkpoints (:func:`kill_check`).

The processes are the ones a user's ``kill`` would hit: the ``pyspark.daemon`` of this
driver's Spark and the Python workers it forked (each slot of a job runs in one). Used by
the bounded test in ``test_spark_failover.py`` and, outside the suite, by the loop::

    PYTHONPATH=$PWD .venv/bin/python tests/support/spark_kills.py --runs 20

(local[4], keyed running sum at parallelism 2 -> 3, 100k records, 200 ms checkpoints,
3 SIGKILLs 1.5-4 s apart; prints one line per run and the tally).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import uuid

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # tests/support/: the helper modules
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)

from pipelines import (  # noqa: E402
    Background,
    InjectedFailure,
    RunningSum,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import Pipeline, RestartStrategy  # noqa: E402

KEYS = 50


class StuckOnce(RunningSum):
    """The first attempt that reaches a record gets stuck: subtask ``stuck`` notes its pid
    and attempt in ``marker`` and then loops in user code forever (no cancellation reaches
    it); with ``fail_others`` every other subtask of that same attempt raises on its next
    record, which fails the attempt while the stuck one keeps its process (and its Spark
    core). Later attempts run normally. (Not "attempt 0": on a loaded machine attempt 0
    may end in a start-up timeout before any record.)"""

    def __init__(self, marker: str, stuck: int = 1, fail_others: bool = True) -> None:
        super().__init__()
        self.marker, self.stuck, self.fail_others = marker, stuck, fail_others

    def open(self, ctx):
        super().open(ctx)
        self.subtask = ctx.subtask_index
        self._watching = False

    def _stuck_attempt(self) -> int | None:
        try:
            with open(self.marker) as f:
                return int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def _watch(self, ctx) -> None:
        """A processing-time timer 100 ms ahead: the task fires it while idle, so a subtask
        that gets no more input (the source waits for the stuck subtask's credit) still
        sees the marker and fails its attempt."""
        timers = ctx.timer_service
        timers.register_processing_time_timer(timers.current_processing_time() + 100)

    def on_timer(self, timestamp, ctx):
        if self._stuck_attempt() == self.attempt:
            raise InjectedFailure(f"subtask {self.subtask}: subtask {self.stuck} is stuck")
        if not os.path.exists(self.marker):
            self._watch(ctx)

    def process_element(self, record, ctx):
        if self.fail_others and self.subtask != self.stuck and not self._watching:
            if not os.path.exists(self.marker):
                self._watch(ctx)
            self._watching = True
        if self.subtask == self.stuck and not os.path.exists(self.marker):
            with open(self.marker + ".tmp", "w") as f:
                f.write(f"{os.getpid()} {self.attempt}")
            os.replace(self.marker + ".tmp", self.marker)
            while True:
                time.sleep(0.05)
        if self.fail_others and self._stuck_attempt() == self.attempt:
            raise InjectedFailure(f"subtask {self.subtask}: subtask {self.stuck} is stuck")
        return super().process_element(record, ctx)


def stuck_pipeline(
    root: str, *, num_records: int = 5000, fail_others: bool = True, restarts: int = 2
) -> Pipeline:
    """The running sum (30 keys, seed 3, 2000 records/s, 200 ms checkpoints, keyed
    parallelism 3) with :class:`StuckOnce` noting the stuck pid in ``root/stuck.pid``."""
    return running_sum_pipeline(
        root,
        name="stuck",
        num_records=num_records,
        num_keys=30,
        seed=3,
        rate=2000,
        interval_ms=200,
        source_parallelism=1,
        keyed_parallelism=3,
        splits=2,
        restart=RestartStrategy.fixed_delay(attempts=restarts, delay_ms=0),
        function=StuckOnce(os.path.join(root, "stuck.pid"), fail_others=fail_others),
    )


#: set (to a fresh id) before the Spark session starts: the executors' environment
#: (``spark.executorEnv.CKPT_*``) carries it into the pyspark daemon and its workers, which
#: tells this driver's Python processes from anyone else's -- also a worker whose daemon
#: was killed (it is reparented away from this process tree and may be reused by Spark)
MARKER_ENV = "CKPT_KILL_CHECK"


def _read(pid: int) -> tuple[int, bytes, bytes] | None:
    """(parent pid, command line, environment) of ``pid``; None when gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), cmdline, environ


#: pyspark's daemon, and the Spark runner's (runners/spark/daemon.py) that runs it
DAEMON_MODULES = (b"pyspark.daemon", b"engine.runners.spark.daemon")


def spark_python_processes(marker: str | None = None) -> list[tuple[int, str]]:
    """``(pid, "daemon" | "worker")`` of the pyspark daemons and workers of the Spark
    session started with ``$CKPT_KILL_CHECK == marker`` (default: this process's value):
    the processes a failover must survive losing."""
    marker = marker or os.environ[MARKER_ENV]
    tag = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        info = _read(int(entry))
        if info is None:
            continue
        ppid, cmdline, environ = info
        if not any(m in cmdline for m in DAEMON_MODULES) or tag not in environ.split(b"\0"):
            continue
        parent = _read(ppid)
        # the daemon is started by the executor JVM; workers are forked by the daemon (or
        # were, before it was killed)
        is_daemon = parent is not None and b"java" in parent[1].split(b"\0")[0]
        found.append((int(entry), "daemon" if is_daemon else "worker"))
    return sorted(found)


def kill_check_session(name: str = "spark-kill-check"):
    """A local[4] session whose Python processes :func:`spark_python_processes` finds."""
    from airflow_checkpoint_provider.engine.runners.spark import session_for

    os.environ[MARKER_ENV] = uuid.uuid4().hex
    return session_for("local[4]", name)


def kill_check(
    root: str,
    spark,
    *,
    kills: int = 3,
    gap: tuple[float, float] = (1.5, 4.0),
    num_records: int = 100_000,
    rate: float = 6000,
    seed: int = 0,
    timeout: float = 600.0,
) -> dict:
    """Run the job, SIGKILL ``kills`` Spark Python processes ``gap`` seconds apart once
    the first checkpoint completed, check the output is exactly once. Returns what was
    killed and how the job ended; raises AssertionError when it did not end exactly once."""
    rng = random.Random(seed)
    p = running_sum_pipeline(
        root,
        num_records=num_records,
        num_keys=KEYS,
        seed=seed + 1,
        rate=rate,
        interval_ms=200,
        source_parallelism=2,
        keyed_parallelism=3,
        restart=RestartStrategy.fixed_delay(attempts=kills + 3, delay_ms=500),
    )
    t0 = time.monotonic()
    bg = Background(p, runner="spark", spark=spark)
    bg.wait_running(min_checkpoints=1, timeout=300)  # a loaded machine starts slowly
    killed = []
    for _ in range(kills):
        time.sleep(rng.uniform(*gap))
        if not bg.thread.is_alive():
            break
        victims = spark_python_processes()
        if not victims:
            continue
        pid, kind = rng.choice(victims)
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(kind)
        except ProcessLookupError:
            pass
    result = bg.result(timeout=timeout)
    seconds = time.monotonic() - t0
    assert result.status == "FINISHED", (result.status, result.failure, killed)
    check_exactly_once(
        os.path.join(root, "out"), expected_running_sums(num_records, KEYS, seed + 1)
    )
    return {"killed": killed, "restarts": result.restarts, "seconds": round(seconds, 1)}


def main() -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = kill_check_session()
    passed, t_all = 0, time.monotonic()
    try:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="spark-kills-") as root:
                try:
                    out = kill_check(
                        root,
                        spark,
                        kills=args.kills,
                        num_records=args.records,
                        seed=args.seed + run,
                    )
                    passed += 1
                    print(f"run {run}: ok {out}", flush=True)
                except BaseException as exc:  # noqa: BLE001 - tallied, the loop goes on
                    print(f"run {run}: FAILED {type(exc).__name__}: {exc}", flush=True)
                    if isinstance(exc, KeyboardInterrupt):
                        raise
    finally:
        spark.stop()
    print(f"{passed}/{args.runs} passed in {time.monotonic() - t_all:.0f} s", flush=True)
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
