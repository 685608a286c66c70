"""Event-time pipelines shared by tests (importable by slot processes): a windowed count/sum
and an inactivity alert on event-time timers, with their expected output computed from the
generator's records."""

from __future__ import annotations

import os
from collections import defaultdict

from pipelines import TEST_RESTARTS, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    ProcessWindowFunction,
    RestartStrategy,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WatermarkStrategy,
    read_committed,
)

N, KEYS, SEED = 20_000, 20, 3
STEP_MS, DISORDER_MS, BOUND_MS = 2, 300, 400
WINDOW_MS, GAP_MS = 1_000, 250


def source(num_records: int = N, *, num_keys: int = KEYS, rate: float | None = None,
           arrow: bool = True) -> GeneratorSource:
    return GeneratorSource(num_records, num_keys=num_keys, seed=SEED, splits=4,
                           records_per_second=rate, arrow=arrow, event_time_step_ms=STEP_MS,
                           max_disorder_ms=DISORDER_MS, start_ms=1_700_000_000_000)


def watermarks() -> WatermarkStrategy:
    return (WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS, timestamp_field="ts")
            .with_emit_interval(20))


def _pipeline(root: str, name: str, interval_ms: int, state_backend: str) -> Pipeline:
    return Pipeline(name, max_parallelism=128, state_backend=state_backend,
                    checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                                directory=os.path.join(root, "ckpt")),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                    metadata_url="sqlite:///" + os.path.join(root, "meta.db"))


class FaultyPassThrough(KeyedProcessFunction):
    """Passes records on; raises or SIGKILLs its slot at the seeded records."""

    def __init__(self, faults: FaultPlan) -> None:
        self.faults = faults

    def open(self, ctx):
        self.attempt = ctx.attempt

    def process_element(self, record, ctx):
        info = {"attempt": self.attempt}
        self.faults.maybe_fail("record", record["id"], info)
        self.faults.maybe_fail("kill", record["id"], info)
        return record


def windowed_pipeline(root: str, *, num_records: int = N, rate: float | None = None,
                      faults: FaultPlan | None = None, parallelism: int = 2,
                      window_parallelism: int = 2, sliding: bool = False,
                      interval_ms: int = 150, out: str | None = None,
                      state_backend: str = "heap") -> Pipeline:
    p = _pipeline(root, "windowed", interval_ms, state_backend)
    stream = p.source(source(num_records, rate=rate), uid="gen", parallelism=parallelism,
                      watermarks=watermarks())
    if faults is not None:
        stream = stream.key_by("key").process(FaultyPassThrough(faults), uid="faulty")
    assigner = SlidingWindows(WINDOW_MS, WINDOW_MS // 2) if sliding else TumblingWindows(WINDOW_MS)
    (stream.key_by("key").window(assigner)
           .aggregate(uid="win", parallelism=window_parallelism, n="count", total=("sum", "value"))
           .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def _as_partial(record: dict) -> dict:
    return {"key": record["key"], "ts": record["ts"], "n": 1, "total": record["value"]}


def _add(a: dict, b: dict) -> dict:
    return {"key": a["key"], "ts": max(a["ts"], b["ts"]), "n": a["n"] + b["n"],
            "total": a["total"] + b["total"]}


class CountAndSum(ProcessWindowFunction):
    """The window's records, counted and summed in Python."""

    def process(self, key, window, elements, ctx):
        yield {"key": key, "window_start": window.start, "window_end": window.end,
               "n": len(elements), "total": sum(e["value"] for e in elements)}


def window_function_pipeline(root: str, mode: str, *, num_records: int = N,
                             rate: float | None = None, faults: FaultPlan | None = None,
                             parallelism: int = 2, window_parallelism: int = 2,
                             out: str | None = None, state_backend: str = "heap") -> Pipeline:
    """The windowed count/sum with a Python function: ``reduce`` or ``process``."""
    p = _pipeline(root, f"window-{mode}", 150, state_backend)
    stream = p.source(source(num_records, rate=rate, arrow=False), uid="gen",
                      parallelism=parallelism, watermarks=watermarks())
    if faults is not None:
        stream = stream.key_by("key").process(FaultyPassThrough(faults), uid="faulty")
    if mode == "reduce":
        result = (stream.map(_as_partial).key_by("key").window(TumblingWindows(WINDOW_MS))
                  .reduce(_add, uid="win", parallelism=window_parallelism))
    else:
        result = (stream.key_by("key").window(TumblingWindows(WINDOW_MS))
                  .process(CountAndSum(), uid="win", parallelism=window_parallelism))
    result.sink(FileSink(out or os.path.join(root, "out")), uid="out")
    return p


def session_pipeline(root: str, mode: str, *, num_records: int = N, rate: float | None = None,
                     faults: FaultPlan | None = None, state_backend: str = "heap",
                     out: str | None = None) -> Pipeline:
    """Sessions per key (gap ``GAP_MS``) over the sparse 200-key input, counted and summed
    by ``reduce`` or ``process``."""
    p = _pipeline(root, f"sessions-{mode}", 150, state_backend)
    stream = p.source(source(num_records, num_keys=200, rate=rate, arrow=False), uid="gen",
                      parallelism=2, watermarks=watermarks())
    if faults is not None:
        stream = stream.key_by("key").process(FaultyPassThrough(faults), uid="faulty")
    if mode == "reduce":
        stream = stream.map(_as_partial)
    windows = stream.key_by("key").window(SessionWindows(GAP_MS))
    result = (windows.reduce(_add, uid="win") if mode == "reduce"
              else windows.process(CountAndSum(), uid="win"))
    result.sink(FileSink(out or os.path.join(root, "out")), uid="out")
    return p


def expected_sessions(num_records: int = N) -> dict[tuple, tuple]:
    """(key, session start) -> (session end, count, sum)."""
    src, per_key = source(num_records, num_keys=200, arrow=False), defaultdict(list)
    for i in range(num_records):
        r = src.record(i)
        per_key[r["key"]].append((r["ts"], r["value"]))
    out = {}
    for key, events in per_key.items():
        events.sort()
        start, end, n, total = None, None, 0, 0
        for ts, value in events:
            if start is not None and ts >= end:
                out[(key, start)] = (end, n, total)
                start = None
            if start is None:
                start, n, total = ts, 0, 0
            end, n, total = ts + GAP_MS, n + 1, total + value
        out[(key, start)] = (end, n, total)
    return out


def committed_sessions(out_dir: str) -> dict[tuple, tuple]:
    got: dict[tuple, tuple] = {}
    for r in read_committed(out_dir):
        k = (r["key"], r["window_start"])
        assert k not in got, f"session {k} emitted twice"
        got[k] = (r["window_end"], r["n"], r["total"])
    return got


def late_pipeline(root: str, *, per_record: bool = False, rate: float | None = None,
                  faults: FaultPlan | None = None) -> Pipeline:
    """Windows behind a watermark that is too tight for the input (bound 20 ms, disorder
    300 ms): many records are late; they go to a late-data side output (``late/``)."""
    p = _pipeline(root, "late", 150, "heap")
    # 64 ms of event time per batch, Arrow or dicts: the watermark moves in small steps
    p.batch_size = p.arrow_batch_size = 32
    stream = p.source(source(rate=rate, arrow=not per_record), uid="gen", parallelism=2,
                      watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                          20, timestamp_field="ts").with_emit_interval(5))
    if faults is not None:
        stream = stream.key_by("key").process(FaultyPassThrough(faults), uid="faulty")
    windows = stream.key_by("key").window(TumblingWindows(WINDOW_MS))
    if per_record:
        result = windows.process(CountAndSum(), uid="win")
    else:
        result = windows.aggregate(uid="win", n="count", total=("sum", "value"))
    result.sink(FileSink(os.path.join(root, "out")), uid="out")
    result.late_records().sink(FileSink(os.path.join(root, "late")), uid="late-out")
    return p


def windows_plus_late(root: str) -> tuple[dict[tuple, tuple], int]:
    """Committed window results with the committed late records of each window added back,
    and how many records were late."""
    got = {k: list(v) for k, v in committed_windows(os.path.join(root, "out")).items()}
    late = list(read_committed(os.path.join(root, "late")))
    ids = [r["id"] for r in late]
    assert len(ids) == len(set(ids)), "a late record was committed twice"
    for r in late:
        acc = got.setdefault((r["key"], r["ts"] - r["ts"] % WINDOW_MS), [0, 0])
        acc[0] += 1
        acc[1] += r["value"]
    return {k: tuple(v) for k, v in got.items()}, len(late)


def expected_windows(num_records: int = N, *, sliding: bool = False) -> dict[tuple, tuple]:
    """(key, window_start) -> (count, sum) for every record."""
    src, out = source(num_records, arrow=False), defaultdict(lambda: [0, 0])
    slide = WINDOW_MS // 2 if sliding else WINDOW_MS
    for i in range(num_records):
        r = src.record(i)
        start = r["ts"] - r["ts"] % slide
        while start > r["ts"] - WINDOW_MS:
            acc = out[(r["key"], start)]
            acc[0] += 1
            acc[1] += r["value"]
            start -= slide
    return {k: tuple(v) for k, v in out.items()}


def committed_windows(out_dir: str) -> dict[tuple, tuple]:
    """The committed window rows; fails on a (key, window) emitted twice."""
    got: dict[tuple, tuple] = {}
    for r in read_committed(out_dir):
        k = (r["key"], r["window_start"])
        assert k not in got, f"window {k} emitted twice"
        assert r["window_end"] - r["window_start"] == WINDOW_MS
        got[k] = (r["n"], r["total"])
    return got


class InactivityAlert(KeyedProcessFunction):
    """Alerts when a key had no event for ``gap_ms`` of event time: every event sets an
    event-time timer at ``ts + gap``; when it fires, the alert is raised if no event of the
    key fell in ``(ts - gap, ts]``. Deterministic for any arrival order within the
    watermark bound (the events it checks have all arrived when the timer fires)."""

    def __init__(self, gap_ms: int = GAP_MS, faults: FaultPlan | None = None) -> None:
        self.gap_ms = gap_ms
        self.faults = faults

    def open(self, ctx):
        self.recent = ctx.list_state("recent")
        self.attempt = ctx.attempt

    def process_element(self, record, ctx):
        if self.faults is not None:
            info = {"attempt": self.attempt}
            self.faults.maybe_fail("record", record["id"], info)
            self.faults.maybe_fail("kill", record["id"], info)
        self.recent.add(ctx.timestamp)
        ctx.timer_service.register_event_time_timer(ctx.timestamp + self.gap_ms)

    def on_timer(self, timestamp, ctx):
        recent = [t for t in self.recent.get() if t > timestamp - self.gap_ms]
        self.recent.update(recent)
        if not any(t <= timestamp for t in recent):
            return {"key": ctx.current_key, "silent_since": timestamp - self.gap_ms,
                    "alert_at": timestamp, "watermark": ctx.timer_service.current_watermark()}
        return None


def alert_pipeline(root: str, *, num_records: int = N, rate: float | None = None,
                   faults: FaultPlan | None = None, parallelism: int = 2,
                   keyed_parallelism: int = 2, interval_ms: int = 150, out: str | None = None,
                   state_backend: str = "heap") -> Pipeline:
    p = _pipeline(root, "alerts", interval_ms, state_backend)
    (p.source(source(num_records, num_keys=200, rate=rate, arrow=False), uid="gen",
              parallelism=parallelism, watermarks=watermarks())
      .key_by("key")
      .process(InactivityAlert(faults=faults), uid="alert", parallelism=keyed_parallelism)
      .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def expected_alerts(num_records: int = N, gap_ms: int = GAP_MS) -> set[tuple]:
    src, times = source(num_records, num_keys=200, arrow=False), defaultdict(set)
    for i in range(num_records):
        r = src.record(i)
        times[r["key"]].add(r["ts"])
    out = set()
    for key, ts in times.items():
        ordered = sorted(ts)
        for t, nxt in zip(ordered, [*ordered[1:], None], strict=True):
            if nxt is None or nxt > t + gap_ms:
                out.add((key, t, t + gap_ms))
    return out


def committed_alerts(out_dir: str) -> list[tuple]:
    return [(r["key"], r["silent_since"], r["alert_at"]) for r in read_committed(out_dir)]
