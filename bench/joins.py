"""Joins at saturation against Spark Structured Streaming's stream-stream join, and join state
size over a long run with watermark clean-up.

    .venv/bin/python bench/joins.py [--keys K] [--reps R] [--flat-seconds S]

Data, the same for both engines: two streams (left, right), each ``--records`` rows of
``--keys`` string keys ``k<n>`` (a hash of the row id, a different one per stream), event time
``start + id * step`` ms minus a disorder of up to ``--disorder-ms``, so each stream carries
``1 / step`` rows per millisecond of event time; watermark bound ``--bound-ms`` on both.

* **Interval join** (inner): ``right.ts BETWEEN left.ts + lower AND left.ts + upper``.
  SS: ``withWatermark`` on both + the join condition ``key = key AND t BETWEEN ...``.
  Ours: ``left.key_by("key").interval_join(right.key_by("key")).between(lower, upper)``.
* **Window join** (inner, tumbling ``--window-ms``): SS joins on the key and
  ``window(t, ...)`` of both sides; ours ``left.join(right).where("key").equal_to("key")
  .window(TumblingWindows(...))``.

SS: two ``rate-micro-batch`` sources (``--ss-rows-per-batch`` rows each per batch), local[2],
2 shuffle partitions, RocksDB state store with changelog checkpointing, append mode, noop sink,
1 s processing-time trigger; sustained = input rows of both sides / summed
``triggerExecution`` of the batches after the warm-up ones. Ours: the per-record join
operators (dict records), and with ``--kinds interval_vec,window_vec`` the vectorized ones
(``vectorized=True``, Arrow batches from the generator on), parallelism 2, heap
state, checkpoints every 1 s, discarding sink, local runner; sustained = rows of both sides /
(wall time - launch-to-running start-up). Ratios ours / SS pair by pair per repetition.

State over time: each join of ours fed at ``--flat-rate`` rows/s per side for
``--flat-seconds`` with 1 s checkpoints; the checkpointed state size of each checkpoint
(flat once the watermark clean-up keeps up), and SS's state rows per batch in the saturation
runs. Writes joins.json.
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
from jobs import add_results_dir, median, run_to_end, write_results  # noqa: E402
from structured_streaming import SS_CONF, TRIGGER_MS  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    DiscardSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

KINDS = ("interval", "window", "interval_vec", "window_vec")
START_MS = 1_700_000_000_000
HASHES = (2654435761, 2246822519)  # left, right: different keys and disorder per stream


def build(kind: str, root: str, args, records: int, rate: float | None = None,
          **checkpoint) -> Pipeline:
    # "<join>_vec": the vectorized operator (vectorized=True), fed Arrow batches end to end
    vectorized = kind.endswith("_vec")
    kind = kind.removesuffix("_vec")
    p = Pipeline(f"bench-join-{kind}", max_parallelism=128,
                 state_backend=getattr(args, "state_backend", "heap"),
                 checkpoint=CheckpointConfig(**{"interval_ms": 1000, **checkpoint},
                                             directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    wm = WatermarkStrategy.for_bounded_out_of_orderness(args.bound_ms, timestamp_field="ts")
    left, right = (
        p.source(GeneratorSource(records, num_keys=args.keys, seed=seed, splits=4,
                                 records_per_second=rate, event_time_step_ms=args.step_ms,
                                 max_disorder_ms=args.disorder_ms, start_ms=START_MS,
                                 arrow=vectorized),
                 uid=uid, parallelism=2, watermarks=wm)
        for uid, seed in (("left", 1), ("right", 2)))
    if kind == "interval":
        joined = (left.key_by("key").interval_join(right.key_by("key"))
                  .between(args.lower_ms, args.upper_ms)
                  .process(uid="join", parallelism=2, vectorized=vectorized))
    else:
        joined = (left.join(right).where("key").equal_to("key")
                  .window(TumblingWindows(args.window_ms))
                  .apply(uid="join", parallelism=2, vectorized=vectorized))
    joined.sink(DiscardSink(), uid="out")
    return p


def ours(kind: str, args, records: int, rate: float | None = None) -> dict:
    root = tempfile.mkdtemp(prefix="bench-join-")
    try:
        result, elapsed, done = run_to_end(build(kind, root, args, records, rate),
                                           f"join bench {kind}")
        startup = (result.extra.get("startup_seconds") or [0])[0] or 0
        rows = 2 * records
        return {"rows": rows, "seconds": elapsed, "startup_s": startup,
                "sustained_records_per_s": rows / (elapsed - startup),
                "checkpoints": result.checkpoints_completed,
                "state_bytes": [c.state_size for c in done],
                "peak_rss_mb": result.extra.get("peak_rss_mb")}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _ss_side(spark, args, side: int):
    """One SS input: the rate source's ``value`` as the row id, keyed and timed like ours."""
    from pyspark.sql import functions as F

    rate = (spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", args.ss_rows_per_batch).option("numPartitions", 2).load())
    h = (F.col("value") * F.lit(HASHES[side])) % F.lit(1 << 32)
    ms = (F.lit(START_MS) + (F.col("value") * F.lit(args.step_ms)).cast("long")
          - (h / F.lit(4096)).cast("long") % F.lit(args.disorder_ms + 1))
    p = "lr"[side]
    df = rate.select(F.concat(F.lit("k"), (h % F.lit(args.keys)).cast("string")).alias(f"{p}_key"),
                     F.col("value").alias(f"{p}_id"), F.timestamp_millis(ms).alias(f"{p}_t"))
    return df.withWatermark(f"{p}_t", f"{args.bound_ms} milliseconds")


def ss_join(spark, kind: str, args) -> dict:
    from pyspark.sql import functions as F

    left, right = _ss_side(spark, args, 0), _ss_side(spark, args, 1)
    if kind == "interval":
        cond = F.expr(f"l_key = r_key AND r_t BETWEEN l_t + INTERVAL {args.lower_ms} "
                      f"MILLISECONDS AND l_t + INTERVAL {args.upper_ms} MILLISECONDS")
        joined = left.join(right, cond, "inner")
    else:
        w = f"{args.window_ms} milliseconds"
        # the window replaces the timestamp as the event-time column (SS allows one)
        joined = (left.select("l_key", "l_id", F.window("l_t", w).alias("l_w"))
                  .join(right.select("r_key", "r_id", F.window("r_t", w).alias("r_w")),
                        F.expr("l_key = r_key AND l_w = r_w"), "inner"))
    chk = tempfile.mkdtemp(prefix="ss-join-chk-")
    try:
        q = (joined.writeStream.outputMode("append").format("noop")
             .option("checkpointLocation", chk)
             .trigger(processingTime=f"{TRIGGER_MS} milliseconds").start())
        want, deadline = args.warmup_batches + args.batches, time.monotonic() + args.ss_timeout
        try:
            while len([p for p in q.recentProgress if p.numInputRows]) < want:
                if q.exception() is not None:
                    raise RuntimeError(f"structured streaming join failed: {q.exception()}")
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            q.stop()
        progress = [p for p in q.recentProgress if p.numInputRows]
        batches = progress[args.warmup_batches:want]
        if not batches:
            raise RuntimeError("no SS join batch after the warm-up ones within the timeout")
        ms = [p.durationMs.get("triggerExecution", 0) for p in batches]
        rows = sum(p.numInputRows for p in batches)
        return {"rows": rows, "batches": len(batches), "batch_ms": ms,
                "batches_under_trigger": sum(1 for m in ms if m < TRIGGER_MS),
                "sustained_records_per_s": rows / (sum(ms) / 1000.0),
                "output_rows": sum(p.sink["numOutputRows"] for p in batches),
                "state_rows": [sum(op["numRowsTotal"] for op in p.stateOperators)
                               for p in progress]}
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kinds", default="interval,window")
    ap.add_argument("--records", type=int, default=300_000, help="ours: rows per side")
    ap.add_argument("--step-ms", type=float, default=0.1, help="event time per row and side")
    ap.add_argument("--disorder-ms", type=int, default=100)
    ap.add_argument("--bound-ms", type=int, default=200)
    ap.add_argument("--lower-ms", type=int, default=-100)
    ap.add_argument("--upper-ms", type=int, default=100)
    ap.add_argument("--window-ms", type=int, default=1000)
    ap.add_argument("--ss-rows-per-batch", type=int, default=200_000, help="per side")
    ap.add_argument("--warmup-batches", type=int, default=1)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--ss-timeout", type=float, default=600.0)
    ap.add_argument("--skip-ss", action="store_true", help="ours only (no Spark)")
    ap.add_argument("--state-backend", default="heap", choices=("heap", "rocksdb"),
                    help="ours: the join's state backend")
    ap.add_argument("--flat-rate", type=float, default=5_000, help="rows/s per side")
    ap.add_argument("--flat-seconds", type=float, default=120.0)
    ap.add_argument("--note", default="", help="conditions of the run, shown in BENCHMARKS.md")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    load_before = os.getloadavg()
    runs: list[dict] = []
    if args.reps:
        spark = None
        if not args.skip_ss:
            from airflow_checkpoint_provider.engine.client import spark_session

            spark = spark_session("local[2]", "bench-joins", extra_conf=SS_CONF)
        try:
            for rep in range(args.reps):
                run: dict = {}
                ss_of: dict = {}  # SS runs each join once per rep; the _vec kinds reuse it
                for kind in kinds:
                    row = {"local": ours(kind, args, args.records)}
                    base = kind.removesuffix("_vec")
                    if spark is not None:
                        if base not in ss_of:
                            ss_of[base] = ss_join(spark, base, args)
                        row["ss"] = ss_of[base]
                        row["ratio_local"] = (row["local"]["sustained_records_per_s"]
                                              / row["ss"]["sustained_records_per_s"])
                    if base != kind and base in run:  # vectorized / per-record, same rep
                        row["ratio_row_path"] = (row["local"]["sustained_records_per_s"]
                                                 / run[base]["local"]["sustained_records_per_s"])
                    run[kind] = row
                    print(f"rep {rep} {kind}: ours {row['local']['sustained_records_per_s']:,.0f}"
                          + (f" rows/s, SS {row['ss']['sustained_records_per_s']:,.0f} "
                             f"({row['ratio_local']:.2f}x)" if "ss" in row else "")
                          + (f", {row['ratio_row_path']:.2f}x the row path"
                             if "ratio_row_path" in row else ""), flush=True)
                runs.append(run)
        finally:
            if spark is not None:
                spark.stop()
    flat = {}
    if args.flat_seconds > 0:
        for kind in kinds:
            records = int(args.flat_rate * args.flat_seconds)
            flat[kind] = ours(kind, args, records, rate=args.flat_rate)
            s = flat[kind]["state_bytes"]
            print(f"flat {kind}: {len(s)} checkpoints, state bytes {s[:1]} .. {s[-2:]}",
                  flush=True)
    summary = {k: v for k, v in vars(args).items() if k != "results_dir"}
    summary["scenarios"] = {}
    for kind in kinds:
        reps = [r[kind] for r in runs if kind in r]
        if reps:
            summary["scenarios"][kind] = {
                "local_records_per_s": median(r["local"]["sustained_records_per_s"] for r in reps),
                "ss_records_per_s": median(r["ss"]["sustained_records_per_s"]
                                           for r in reps if "ss" in r),
                "ratio_local": median(r.get("ratio_local") for r in reps),
                "ratio_row_path": median(r.get("ratio_row_path") for r in reps),
                "ss_batches_under_trigger": sum(r["ss"]["batches_under_trigger"]
                                                for r in reps if "ss" in r)}
    summary["state_bytes"] = {kind: f["state_bytes"] for kind, f in flat.items()}
    # 1-minute load averages before and after: this machine is often shared while measuring
    summary["load_average"] = [round(load_before[0], 1), round(os.getloadavg()[0], 1)]
    summary["note"] = args.note
    write_results(args.results_dir, "joins.json", {"summary": summary, "runs": runs,
                                                   "flat": flat})
    return 0


if __name__ == "__main__":
    sys.exit(main())
