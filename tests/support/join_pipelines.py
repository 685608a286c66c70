"""Join pipelines shared by tests (importable by slot processes): impressions and clicks
from two out-of-order generators, joined by a co-process function (per key and second:
counts and sums of both streams, emitted by event-time timers), by a left outer interval
join and by a tumbling window join, with their expected output computed in plain Python
from the generators' records."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

from pipelines import TEST_RESTARTS, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedCoProcessFunction,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
    read_committed,
)

N_IMPRESSIONS, N_CLICKS, KEYS = 6_000, 3_000, 30
STEP_MS, DISORDER_MS, BOUND_MS = 2, 300, 400
START_MS = 1_700_000_000_000
WINDOW_MS = 1_000
LOWER_MS, UPPER_MS = -50, 150
JOIN_WINDOW_MS = 250


def impressions(n: int = N_IMPRESSIONS, rate: float | None = None) -> GeneratorSource:
    return GeneratorSource(n, num_keys=KEYS, seed=11, splits=4, records_per_second=rate,
                           event_time_step_ms=STEP_MS, max_disorder_ms=DISORDER_MS,
                           start_ms=START_MS)


def clicks(n: int = N_CLICKS, rate: float | None = None) -> GeneratorSource:
    # half as many records over the same span of event time
    return GeneratorSource(n, num_keys=KEYS, seed=12, splits=4, records_per_second=rate,
                           event_time_step_ms=STEP_MS * N_IMPRESSIONS / n,
                           max_disorder_ms=DISORDER_MS, start_ms=START_MS)


def watermarks() -> WatermarkStrategy:
    return (WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS, timestamp_field="ts")
            .with_emit_interval(20))


class CoWindowSums(KeyedCoProcessFunction):
    """Per key and second of event time: count and sum of each stream's values, emitted
    when the watermark passes the second (map state + event-time timers shared by both
    inputs). Injects the seeded failures on impressions."""

    def __init__(self, faults: FaultPlan | None = None) -> None:
        self.faults = faults

    def open(self, ctx):
        self.sums = ctx.map_state("sums")   # window start -> [na, sa, nb, sb]
        self.seen = ctx.value_state("seen", 0)
        self.attempt = ctx.attempt

    def _add(self, record, ctx, side: int):
        start = ctx.timestamp - ctx.timestamp % WINDOW_MS
        acc = list(self.sums.get(start) or [0, 0, 0, 0])
        acc[2 * side] += 1
        acc[2 * side + 1] += record["value"]
        self.sums.put(start, acc)
        self.seen.update(self.seen.value() + 1)
        ctx.timer_service.register_event_time_timer(start + WINDOW_MS - 1)

    def process_element1(self, record, ctx):
        if self.faults:
            info = {"attempt": self.attempt}
            self.faults.maybe_fail("record", record["id"], info)
            self.faults.maybe_fail("kill", record["id"], info)
        self._add(record, ctx, 0)

    def process_element2(self, record, ctx):
        self._add(record, ctx, 1)

    def on_timer(self, timestamp, ctx):
        start = timestamp - WINDOW_MS + 1
        na, sa, nb, sb = self.sums.get(start)
        self.sums.remove(start)
        return {"key": ctx.current_key, "window": start, "na": na, "sa": sa, "nb": nb, "sb": sb}


def pair(left, right):
    """The interval join's output: the impression and click ids (None if unmatched)."""
    return {"key": (left or right)["key"], "imp": left and left["id"],
            "click": right and right["id"]}


def join_pipeline(root: str, *, name: str = "joins", faults: FaultPlan | None = None,
                  rate: float | None = None, parallelism: int = 2, join_parallelism: int = 2,
                  state_backend: str = "heap", how: str = "left", interval_ms: int = 150,
                  out: str | None = None, mode: str = "exactly_once",
                  **checkpoint_options) -> Pipeline:
    out = out or root
    p = Pipeline(name, max_parallelism=128, state_backend=state_backend,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms, mode=mode,
                                             directory=os.path.join(root, "ckpt"),
                                             **checkpoint_options),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    imps = p.source(impressions(rate=rate), uid="imps", parallelism=parallelism,
                    watermarks=watermarks())
    clks = p.source(clicks(rate=rate / 2 if rate else None), uid="clicks",
                    parallelism=parallelism, watermarks=watermarks())
    (imps.connect(clks).key_by("key", "key")
         .process(CoWindowSums(faults), uid="co", parallelism=join_parallelism)
         .sink(FileSink(os.path.join(out, "co")), uid="co-out"))
    (imps.key_by("key").interval_join(clks.key_by("key"), how=how)
         .between(LOWER_MS, UPPER_MS)
         .process(pair, uid="ij", parallelism=join_parallelism)
         .sink(FileSink(os.path.join(out, "ij")), uid="ij-out"))
    (imps.join(clks).where("key").equal_to("key").window(TumblingWindows(JOIN_WINDOW_MS))
         .apply(pair, uid="wj", parallelism=join_parallelism)
         .sink(FileSink(os.path.join(out, "wj")), uid="wj-out"))
    return p


def _records(src: GeneratorSource, n: int) -> list[dict]:
    return [src.record(i) for i in range(n)]


def expected_co() -> Counter:
    sums: dict = defaultdict(lambda: [0, 0, 0, 0])
    for side, recs in enumerate((_records(impressions(), N_IMPRESSIONS),
                                 _records(clicks(), N_CLICKS))):
        for r in recs:
            acc = sums[(r["key"], r["ts"] - r["ts"] % WINDOW_MS)]
            acc[2 * side] += 1
            acc[2 * side + 1] += r["value"]
    return Counter((k, w, *acc) for (k, w), acc in sums.items())


def expected_interval_join(how: str = "left", lower: int = LOWER_MS,
                           upper: int = UPPER_MS) -> Counter:
    """Every (key, impression, click) with click.ts in [imp.ts + lower, imp.ts + upper],
    plus the unmatched rows of the outer side(s): a nested loop over the records."""
    imps, clks = _records(impressions(), N_IMPRESSIONS), _records(clicks(), N_CLICKS)
    by_key = defaultdict(list)
    for c in clks:
        by_key[c["key"]].append(c)
    out: Counter = Counter()
    matched_clicks = set()
    for a in imps:
        hits = [c for c in by_key[a["key"]] if a["ts"] + lower <= c["ts"] <= a["ts"] + upper]
        for c in hits:
            out[(a["key"], a["id"], c["id"])] += 1
            matched_clicks.add(c["id"])
        if not hits and how in ("left", "full"):
            out[(a["key"], a["id"], None)] += 1
    if how in ("right", "full"):
        for c in clks:
            if c["id"] not in matched_clicks:
                out[(c["key"], None, c["id"])] += 1
    return out


def expected_window_join() -> Counter:
    """Every (key, impression, click) in the same tumbling window."""
    windows = defaultdict(list)
    for c in _records(clicks(), N_CLICKS):
        windows[(c["key"], c["ts"] // JOIN_WINDOW_MS)].append(c["id"])
    return Counter((a["key"], a["id"], c)
                   for a in _records(impressions(), N_IMPRESSIONS)
                   for c in windows[(a["key"], a["ts"] // JOIN_WINDOW_MS)])


def committed_window_join(out: str) -> Counter:
    return Counter((r["key"], r["imp"], r["click"])
                   for r in read_committed(os.path.join(out, "wj")))


def committed_co(out: str) -> Counter:
    return Counter((r["key"], r["window"], r["na"], r["sa"], r["nb"], r["sb"])
                   for r in read_committed(os.path.join(out, "co")))


def committed_interval_join(out: str) -> Counter:
    return Counter((r["key"], r["imp"], r["click"])
                   for r in read_committed(os.path.join(out, "ij")))
