"""Broadcast-state and temporal-join pipelines shared by tests (importable by slot
processes), with their expected output computed independently from the generators' records.

* events: the impressions of tests/support/join_pipelines.py (30 keys, out of order by up to
  300 ms, watermark bound 400 ms);
* rules: a broadcast stream of versioned thresholds for 5 rule keys over the same span of
  event time; each event waits (keyed state + an event-time timer) until the watermark
  passes it, then takes the latest version of its rule key at or before its time from the
  broadcast state (deterministic whatever the arrival order of rules and events);
* prices: a changelog (upserts ``+U``, every 5th a delete ``-D``) of prices per event key,
  the versioned table of a left temporal join of the events; the reference is pandas'
  ``merge_asof`` per key.

Rules and prices come from one split each, so versions of equal timestamps arrive in id
order (the later one wins, in the engine and in the reference alike).
"""

from __future__ import annotations

import os
from collections import Counter

from join_pipelines import N_IMPRESSIONS, START_MS, STEP_MS, impressions, watermarks
from pipelines import TEST_RESTARTS, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedBroadcastProcessFunction,
    Pipeline,
    ProcessJoinFunction,
    RestartStrategy,
    read_committed,
)

N_RULES, RULE_KEYS, N_PRICES = 200, 5, 1_500
SPAN_MS = STEP_MS * N_IMPRESSIONS


def rules(rate: float | None = None) -> GeneratorSource:
    return GeneratorSource(N_RULES, num_keys=RULE_KEYS, seed=21, splits=1,
                           records_per_second=rate, event_time_step_ms=SPAN_MS / N_RULES,
                           max_disorder_ms=300, start_ms=START_MS)


def prices(rate: float | None = None) -> GeneratorSource:
    return GeneratorSource(N_PRICES, num_keys=30, seed=22, splits=1, records_per_second=rate,
                           event_time_step_ms=SPAN_MS / N_PRICES, max_disorder_ms=300,
                           start_ms=START_MS)


def rule_key(event: dict) -> str:
    return f"k{event['value'] % RULE_KEYS}"


def as_change(record: dict) -> dict:
    """A price record as a changelog row: every 5th deletes its key's price."""
    return {"key": record["key"], "price": record["value"], "ts": record["ts"],
            "pid": record["id"], "_op": "-D" if record["id"] % 5 == 0 else "+U"}


class ApplyRules(KeyedBroadcastProcessFunction):
    """Events wait in keyed state until the watermark passes them, then take the threshold
    valid at their time from the broadcast state ``rules`` (rule key -> [[ts, id, value]])."""

    def __init__(self, faults: FaultPlan | None = None) -> None:
        self.faults = faults

    def open(self, ctx):
        self.waiting = ctx.map_state("waiting")   # ts -> [event ids and values]
        self.attempt = ctx.attempt

    def process_broadcast_element(self, rule, ctx):
        state = ctx.broadcast_state("rules")
        state.put(rule["key"], [*state.get(rule["key"], []),
                                [rule["ts"], rule["id"], rule["value"]]])

    def process_element(self, event, ctx):
        if self.faults:
            info = {"attempt": self.attempt}
            self.faults.maybe_fail("record", event["id"], info)
            self.faults.maybe_fail("kill", event["id"], info)
        ts = ctx.timestamp
        self.waiting.put(ts, [*self.waiting.get(ts, []), [event["id"], event["value"]]])
        ctx.timer_service.register_event_time_timer(ts)

    def on_timer(self, timestamp, ctx):
        events = self.waiting.get(timestamp)
        self.waiting.remove(timestamp)
        rules = ctx.broadcast_state("rules")
        for event_id, value in events:
            best = None
            for ts, _, threshold in rules.get(rule_key({"value": value}), []):
                if ts <= timestamp and (best is None or ts >= best[0]):
                    best = (ts, threshold)   # ">=": of equal times the later rule wins
            yield {"id": event_id, "key": ctx.current_key,
                   "threshold": None if best is None else best[1]}


class Priced(ProcessJoinFunction):
    """The temporal join's output: the event, its key and the price valid at its time."""

    def __init__(self, faults: FaultPlan | None = None) -> None:
        self.faults = faults

    def open(self, ctx):
        self.attempt = ctx.attempt

    def process_element(self, event, price, ctx):
        if self.faults:
            self.faults.maybe_fail("record", event["id"], {"attempt": self.attempt})
        return {"id": event["id"], "key": event["key"], "at": ctx.timestamp,
                "price": price and price["price"], "pid": price and price["pid"]}


def broadcast_pipeline(root: str, *, name: str = "bcast", faults: FaultPlan | None = None,
                       rate: float | None = None, parallelism: int = 2,
                       join_parallelism: int = 2, state_backend: str = "heap",
                       interval_ms: int = 150, **checkpoint_options) -> Pipeline:
    p = Pipeline(name, max_parallelism=128, state_backend=state_backend,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt"),
                                             **checkpoint_options),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    scale = rate / N_IMPRESSIONS if rate else None
    events = p.source(impressions(rate=rate), uid="events", parallelism=parallelism,
                      watermarks=watermarks())
    rule_stream = p.source(rules(scale and scale * N_RULES), uid="rules", watermarks=watermarks())
    changes = (p.source(prices(scale and scale * N_PRICES), uid="prices",
                        watermarks=watermarks())
               .map(as_change, name="as-changelog"))
    (events.key_by("key").connect(rule_stream.broadcast("rules"))
           .process(ApplyRules(faults), uid="apply-rules", parallelism=join_parallelism)
           .sink(FileSink(os.path.join(root, "rules-out")), uid="rules-out"))
    (events.key_by("key").temporal_join(changes.key_by("key"), how="left")
           .process(Priced(faults), uid="priced", parallelism=join_parallelism)
           .sink(FileSink(os.path.join(root, "priced")), uid="priced-out"))
    return p


def _records(src: GeneratorSource, n: int) -> list[dict]:
    return [src.record(i) for i in range(n)]


def expected_rules() -> Counter:
    """Per event: the value of the latest rule of its rule key at or before its time (of
    equal times the higher id), by a sort of all rules, not the function's loop."""
    latest: dict = {}
    out: Counter = Counter()
    timeline = sorted([(r["ts"], 0, r["id"], r) for r in _records(rules(), N_RULES)]
                      + [(e["ts"], 1, e["id"], e) for e in _records(impressions(), N_IMPRESSIONS)],
                      key=lambda t: t[:3])
    for _, is_event, _, rec in timeline:
        if is_event:
            out[(rec["id"], rec["key"], latest.get(rule_key(rec)))] += 1
        else:
            latest[rec["key"]] = rec["value"]
    return out


def expected_prices(how: str = "left") -> Counter:
    """pandas ``merge_asof`` of the events on the price changelog, per key (backward, exact
    times match; a delete as the version found means no price)."""
    import pandas as pd

    events = pd.DataFrame(_records(impressions(), N_IMPRESSIONS))[["id", "key", "ts"]]
    changes = pd.DataFrame([as_change(r) for r in _records(prices(), N_PRICES)])
    changes["deleted"] = changes["_op"] == "-D"
    changes = changes.rename(columns={"ts": "version_ts"}).sort_values(
        ["version_ts", "pid"], kind="stable")
    merged = pd.merge_asof(events.sort_values("ts", kind="stable"),
                           changes[["key", "version_ts", "price", "pid", "deleted"]],
                           left_on="ts", right_on="version_ts", by="key",
                           direction="backward", allow_exact_matches=True)
    out: Counter = Counter()
    for r in merged.itertuples():
        found = not pd.isna(r.pid) and not r.deleted
        if found or how == "left":
            out[(int(r.id), r.key, int(r.ts), int(r.price) if found else None,
                 int(r.pid) if found else None)] += 1
    return out


def committed_rules(out: str) -> Counter:
    return Counter((r["id"], r["key"], r["threshold"])
                   for r in read_committed(os.path.join(out, "rules-out")))


def committed_prices(out: str) -> Counter:
    return Counter((r["id"], r["key"], r["at"], r["price"], r["pid"])
                   for r in read_committed(os.path.join(out, "priced")))
