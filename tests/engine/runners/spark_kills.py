"""SIGKILLs of Spark's Python processes while a running-sum job checkpoints (issue 35 #3).

The processes are the ones a user's ``kill`` would hit: the ``pyspark.daemon`` of this
driver's Spark and the Python workers it forked (each slot of a job runs in one). Used by
the bounded test in ``test_spark_failover.py`` and, outside the suite, by the loop::

    PYTHONPATH=$PWD .venv/bin/python tests/engine/runners/spark_kills.py --runs 20

(local[4], keyed running sum at parallelism 2 -> 3, 100k records, 200 ms checkpoints,
3 SIGKILLs 1.5-4 s apart; prints one line per run and the tally).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from pipelines import (  # noqa: E402
    Background,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import RestartStrategy  # noqa: E402

KEYS = 50


def _stat(pid: int) -> tuple[int, bytes] | None:
    """(parent pid, command line) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), cmdline


def spark_python_processes(root: int | None = None) -> list[tuple[int, str]]:
    """``(pid, "daemon" | "worker")`` of the pyspark daemons and workers below ``root``
    (default: this process): the processes a failover must survive losing."""
    root = os.getpid() if root is None else root
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                procs[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        ppid, cmdline = procs[pid]
        if b"pyspark.daemon" in cmdline or b"pyspark/daemon" in cmdline:
            parent_is_daemon = b"daemon" in procs.get(ppid, (0, b""))[1]
            found.append((pid, "worker" if parent_is_daemon else "daemon"))
    return sorted(found)


class Tracker:
    """Every pyspark process seen below this process, kept while it lives: a worker whose
    daemon was killed is reparented away from this tree but still runs a slot."""

    def __init__(self) -> None:
        import threading

        self.seen: dict[int, tuple[int | None, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scan, daemon=True)
        self._thread.start()

    def _scan(self) -> None:
        while not self._stop.wait(0.25):
            for pid, kind in spark_python_processes():
                self.seen.setdefault(pid, (_start_time(pid), kind))

    def alive(self) -> list[tuple[int, str]]:
        for pid, kind in spark_python_processes():
            self.seen.setdefault(pid, (_start_time(pid), kind))
        return sorted(
            (pid, kind)
            for pid, (start, kind) in list(self.seen.items())
            if start is not None and _start_time(pid) == start
        )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


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
    tracker = Tracker()
    try:
        bg = Background(p, runner="spark", spark=spark)
        bg.wait_running(min_checkpoints=1, timeout=180)
        killed = []
        for _ in range(kills):
            time.sleep(rng.uniform(*gap))
            victims = tracker.alive()
            if not bg.thread.is_alive():
                break
            if not victims:
                continue
            pid, kind = rng.choice(victims)
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(kind)
            except ProcessLookupError:
                pass
    finally:
        tracker.stop()
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

    from airflow_checkpoint_provider.engine.runners.spark import session_for

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = session_for("local[4]", "spark-kill-check")
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
