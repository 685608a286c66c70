"""Issue 51, item 2: the event-time watermark keeps advancing after a restore.

A monitored directory (``FileSource(monitor_interval=0.5)``) with 5 s bounded
out-of-orderness feeds 10 s tumbling windows. Files land while the job runs, then while it
is stopped with a savepoint; the job is restored from the savepoint and catches up on the
files that landed meanwhile, with no file landing after that. Every window whose input is
complete must fire while the restored job runs, within one allowed-lateness period of the
restore (not only at the end of input, which a continuous source never reaches)."""

from __future__ import annotations

import json
import os
import time

import pytest
from pipelines import Background, read_committed

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    FileSource,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
)

T0 = 1_700_000_000_000                      # event time of the first record
PER_FILE, KEYS = 20, 4                      # one file holds one second of event time
WINDOW_MS, BOUND_MS = 10_000, 5_000
BEFORE_STOP, WHILE_STOPPED, AFTER = 30, 120, 6  # files landed: running, stopped, restored
#: wall-clock seconds a window may take to fire once its input is there
ALLOWED_LATENESS_S = 15.0


def pipeline(root) -> Pipeline:
    p = Pipeline("wm-restore", max_parallelism=32,
                 checkpoint=CheckpointConfig(interval_ms=200, directory=str(root / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url=f"sqlite:///{root}/meta.db")
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS, timestamp_field="ts")
    (p.source(FileSource(str(root / "in"), format="jsonl", monitor_interval=0.5),
              uid="files", parallelism=2, watermarks=strategy)
      .key_by("key").window(TumblingWindows(WINDOW_MS))
      .aggregate(uid="win", parallelism=2, n="count", total=("sum", "value"))
      .sink(FileSink(str(root / "out")), uid="out"))
    return p


def land(root, i: int) -> None:
    """File i: one second of event time, in order; written aside, then renamed in."""
    rows = [{"ts": T0 + i * 1000 + j * (1000 // PER_FILE), "key": f"k{j % KEYS}", "value": i}
            for j in range(PER_FILE)]
    tmp = root / "in" / f"_f{i:04d}.jsonl"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.rename(tmp, root / "in" / f"f{i:04d}.jsonl")


def expected(n_files: int) -> dict[tuple, tuple]:
    """(key, window start) -> (count, sum) of every window the watermark of the first
    ``n_files`` files passes (the last record's time - bound - 1 >= the window's end - 1)."""
    watermark = T0 + (n_files - 1) * 1000 + 1000 - 1000 // PER_FILE - BOUND_MS - 1
    out: dict[tuple, list] = {}
    for i in range(n_files):
        for j in range(PER_FILE):
            ts = T0 + i * 1000 + j * (1000 // PER_FILE)
            start = ts - ts % WINDOW_MS
            if start + WINDOW_MS - 1 <= watermark:
                acc = out.setdefault((f"k{j % KEYS}", start), [0, 0])
                acc[0] += 1
                acc[1] += i
    return {k: tuple(v) for k, v in out.items()}


def committed(root) -> dict[tuple, tuple]:
    out = root / "out"
    if not out.exists():
        return {}
    got: dict[tuple, tuple] = {}
    for r in read_committed(str(out)):
        k = (r["key"], r["window_start"])
        assert k not in got, f"window {k} emitted twice"
        got[k] = (r["n"], r["total"])
    return got


def wait_for_windows(root, bg: Background, want: dict, timeout: float) -> float:
    """Seconds until every window of ``want`` is committed, while the job runs."""
    start = time.monotonic()
    got: dict = {}
    while time.monotonic() - start < timeout:
        assert bg.thread.is_alive(), f"the job ended: {bg.outcome}"
        got = committed(root)
        if want.items() <= got.items():
            return time.monotonic() - start
        time.sleep(0.2)
    missing = sorted(set(want) - set(got))
    raise AssertionError(
        f"{len(missing)} of {len(want)} windows not fired {timeout:.0f} s into the run (first "
        f"missing: {missing[:3]}; wrong: {[k for k in want if k in got and got[k] != want[k]][:3]})")


def stop_restore_catch_up(root, **run) -> float:
    """The report's shape: files land while the job runs, then while it is stopped with a
    savepoint; the restored job catches up. Returns the seconds every window the landed
    files complete took to fire after the restored job ran (asserted within
    ``ALLOWED_LATENESS_S``, while it runs)."""
    (root / "in").mkdir()
    bg = Background(pipeline(root), **run)
    job = bg.wait_running(timeout=120)
    for i in range(BEFORE_STOP):
        land(root, i)
        time.sleep(0.05)
    wait_for_windows(root, bg, expected(BEFORE_STOP), ALLOWED_LATENESS_S)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"

    # files keep arriving while the job is stopped
    for i in range(BEFORE_STOP, BEFORE_STOP + WHILE_STOPPED):
        land(root, i)

    bg2 = Background(pipeline(root), restore=req.result["location"], **run)
    job2 = bg2.wait_running(timeout=120)
    try:
        # the catch-up: every window the landed files complete fires while the job runs
        took = wait_for_windows(root, bg2, expected(BEFORE_STOP + WHILE_STOPPED),
                                ALLOWED_LATENESS_S)
        # and files landing afterwards move it on by their own time
        for i in range(BEFORE_STOP + WHILE_STOPPED, BEFORE_STOP + WHILE_STOPPED + AFTER):
            land(root, i)
            time.sleep(0.1)
        wait_for_windows(root, bg2, expected(BEFORE_STOP + WHILE_STOPPED + AFTER),
                         ALLOWED_LATENESS_S)
    finally:
        bg2.request(job2.job_id, "CANCEL")
        bg2.result()
    # nothing fired early: every committed window is one the input completes
    assert set(committed(root)) <= set(expected(BEFORE_STOP + WHILE_STOPPED + AFTER + 10))
    return took


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_windows_fire_during_catch_up_after_restore_from_a_savepoint(tmp_path):
    took = stop_restore_catch_up(tmp_path)
    print(f"every window fired {took:.1f} s after the restored job ran")


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.usefixtures("spark_env")
def test_windows_fire_during_catch_up_after_restore_on_spark(tmp_path):
    from airflow_checkpoint_provider.engine.runners.spark import session_for

    spark = session_for("local[2]", "test-watermark-after-restore")
    try:
        took = stop_restore_catch_up(tmp_path, runner="spark", spark=spark)
    finally:
        spark.stop()
    print(f"every window fired {took:.1f} s after the restored job ran (Spark)")
