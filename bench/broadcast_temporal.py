"""Broadcast connect and temporal joins at saturation, in the style of bench/joins.py.

    PYTHONPATH=$PWD .venv/bin/python bench/broadcast_temporal.py [--records N] [--reps R]

Ours (per-record operators, dict records, parallelism 2, heap state, 1 s checkpoints,
discarding sink, local runner; sustained = input rows / (wall time - start-up)):

* **broadcast**: ``events.key_by("key").connect(rules.broadcast("rules")).process(fn)``, the
  "rules + events" pattern: ``--records`` events of ``--keys`` string keys and
  ``--rules`` rules over 100 rule keys; the function keeps the latest threshold per rule
  key in the broadcast state and emits each event whose value reaches its rule's threshold
  (no keyed state). No SS counterpart (SS has no broadcast state).
* **temporal**: ``events.key_by("key").temporal_join(prices.key_by("key"), how="left")``
  with a versioned table in event time: a price changelog with one version per
  ``--versions-every`` events, over the same span of event time, watermarks on both. SS has
  no event-time temporal join (its stream-stream joins need a time range, and a
  stream-static join does not version the table), so no SS row.
* **static**: the same join against a table without time (a bounded source of one price row
  per key, read before any probe joins: a stream-static join), against SS's stream-static
  left join (``rate-micro-batch`` stream of the same keys joined with a static DataFrame of
  one price per key; local[2], 2 shuffle partitions, noop sink; rows / summed
  ``triggerExecution`` after the warm-up batches).

Writes broadcast_temporal.json; ``join_state.broadcast_temporal_section`` renders it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import cloudpickle  # noqa: E402
from jobs import add_results_dir, median, write_results  # noqa: E402
from structured_streaming import SS_CONF, keyed_rate, ss_measure  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    DiscardSink,
    GeneratorSource,
    KeyedBroadcastProcessFunction,
    Pipeline,
    RestartStrategy,
    WatermarkStrategy,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

KINDS = ("broadcast", "temporal", "static")
START_MS = 1_700_000_000_000
RULE_KEYS = 100


class RuleFilter(KeyedBroadcastProcessFunction):
    """Latest threshold per rule key (broadcast state); events at or above it pass."""

    def process_broadcast_element(self, rule, ctx):
        ctx.broadcast_state("rules").put(rule["key"], rule["value"])

    def process_element(self, event, ctx):
        threshold = ctx.broadcast_state("rules").get(f"k{event['id'] % RULE_KEYS}", 50)
        if event["value"] >= threshold:
            return event
        return None


def price_version(record: dict) -> dict:
    return {"key": record["key"], "price": record["value"], "ts": record["ts"]}


class PriceRow:
    """map: generator id -> the price row of key ``k<id>`` (one per key)."""

    def __call__(self, record: dict) -> dict:
        return {"key": f"k{record['id']}", "price": record["id"] % 100}


def build(kind: str, root: str, args) -> tuple[Pipeline, int]:
    """The pipeline and its input rows (both inputs)."""
    p = Pipeline(f"bench-{kind}", max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=1000,
                                             directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    n = args.records
    wm = WatermarkStrategy.for_bounded_out_of_orderness(args.bound_ms, timestamp_field="ts")
    events = p.source(GeneratorSource(n, num_keys=args.keys, seed=1, splits=4,
                                      event_time_step_ms=args.step_ms,
                                      max_disorder_ms=args.disorder_ms, start_ms=START_MS),
                      uid="events", parallelism=2, watermarks=wm)
    if kind == "broadcast":
        rules = p.source(GeneratorSource(args.rules, num_keys=RULE_KEYS, seed=2, splits=1),
                         uid="rules")
        out = events.key_by("key").connect(rules.broadcast("rules")).process(
            RuleFilter(), uid="bc", parallelism=2)
        other = args.rules
    elif kind == "temporal":
        versions = n // args.versions_every
        table = (p.source(GeneratorSource(versions, num_keys=args.keys, seed=2, splits=1,
                                          event_time_step_ms=args.step_ms * args.versions_every,
                                          max_disorder_ms=args.disorder_ms, start_ms=START_MS),
                          uid="prices", watermarks=wm)
                 .map(price_version, name="as-version"))
        out = events.key_by("key").temporal_join(table.key_by("key"), how="left").process(
            uid="tj", parallelism=2)
        other = versions
    else:
        table = p.source(GeneratorSource(args.keys, seed=2, splits=1), uid="prices").map(
            PriceRow(), name="price-row")
        out = events.key_by("key").temporal_join(table.key_by("key"), how="left").process(
            uid="tj", parallelism=2)
        other = args.keys
    out.sink(DiscardSink(), uid="out")
    return p, n + other


def ours(kind: str, args) -> dict:
    root = tempfile.mkdtemp(prefix=f"bench-{kind}-")
    try:
        p, rows = build(kind, root, args)
        t0 = time.monotonic()
        result = p.run()
        elapsed = time.monotonic() - t0
        if result.status != "FINISHED":
            raise RuntimeError(f"{kind} ended {result.status}: {result.failure_reason}")
        startup = (result.extra.get("startup_seconds") or [0])[0] or 0
        return {"rows": rows, "seconds": elapsed, "startup_s": startup,
                "sustained_records_per_s": rows / (elapsed - startup),
                "checkpoints": result.checkpoints_completed}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ss_static(spark, args) -> dict:
    """SS's stream-static left join: the rate stream's keys joined with one price per key."""
    from pyspark.sql import functions as F

    rate = (spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", args.ss_rows_per_batch).option("numPartitions", 2).load())
    stream = keyed_rate(rate, args.keys, False)
    table = spark.range(args.keys).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        (F.col("id") % 100).alias("price"))
    return ss_measure(stream.join(table, "key", "left"), "append", warmup=args.warmup_batches,
                      measure=args.batches, timeout_s=args.ss_timeout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--records", type=int, default=200_000, help="events per run")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--rules", type=int, default=1_000)
    ap.add_argument("--versions-every", type=int, default=10)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--step-ms", type=float, default=0.1)
    ap.add_argument("--disorder-ms", type=int, default=100)
    ap.add_argument("--bound-ms", type=int, default=200)
    ap.add_argument("--ss-rows-per-batch", type=int, default=2_000_000)
    ap.add_argument("--warmup-batches", type=int, default=1)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--ss-timeout", type=float, default=600.0)
    ap.add_argument("--skip-ss", action="store_true")
    ap.add_argument("--note", default="")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    load_before = os.getloadavg()
    spark = None
    if "static" in kinds and not args.skip_ss:
        from airflow_checkpoint_provider.engine.client import spark_session

        spark = spark_session("local[2]", "bench-stream-static", extra_conf=SS_CONF)
    runs = []
    try:
        for rep in range(args.reps):
            run: dict = {}
            for kind in kinds:
                row = {"local": ours(kind, args)}
                if kind == "static" and spark is not None:
                    row["ss"] = ss_static(spark, args)
                    row["ratio_local"] = (row["local"]["sustained_records_per_s"]
                                          / row["ss"]["sustained_records_per_s"])
                run[kind] = row
                print(f"rep {rep} {kind}: ours {row['local']['sustained_records_per_s']:,.0f} "
                      "rows/s" + (f", SS {row['ss']['sustained_records_per_s']:,.0f} "
                                  f"({row['ratio_local']:.2f}x)" if "ss" in row else ""),
                      flush=True)
            runs.append(run)
    finally:
        if spark is not None:
            spark.stop()
    summary = {k: v for k, v in vars(args).items() if k != "results_dir"}
    summary["scenarios"] = {
        kind: {"local_records_per_s": median(r[kind]["local"]["sustained_records_per_s"]
                                             for r in runs),
               "ss_records_per_s": median(r[kind]["ss"]["sustained_records_per_s"]
                                          for r in runs if "ss" in r[kind]),
               "ratio_local": median(r[kind].get("ratio_local") for r in runs)}
        for kind in kinds}
    summary["load_average"] = [round(load_before[0], 1), round(os.getloadavg()[0], 1)]
    write_results(args.results_dir, "broadcast_temporal.json",
                  {"summary": summary, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
