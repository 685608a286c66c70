"""Event time: windowed aggregation against Structured Streaming at saturation, and state
size over a long run with windows and with TTL.

    .venv/bin/python bench/event_time.py [--reps R] [--keys K]

* **Windows vs SS** (interleaved, pair by pair): 10 s tumbling event-time windows, count and
  sum per key and window, 1 s watermark delay, 100,000 string keys ``k<n>``, values 0..99.
  SS: ``withWatermark(1 s).groupBy(window(timestamp, 10 s), key).agg(count, sum)``, append
  mode, ``noop`` sink, RocksDB state store with changelog checkpointing, local[2], 2 shuffle
  partitions, fed by ``rate-micro-batch`` with more rows per batch than it processes in a
  second, each batch 1 s of event time; sustained = rows / summed ``triggerExecution`` after
  the warm-up batches. Ours: ``key_by("key").window(TumblingWindows(10 s)).aggregate(count,
  sum)`` over Arrow batches from the generator (the same number of rows per second of event
  time as SS's batches), watermark bound 1 s, parallelism 2, 1 s checkpoints, discarding
  sink, local runner; sustained = records / (wall time - start-up).
* **State over a long run**: the checkpointed state size of (a) the windowed job, (b)
  ``aggregate()`` over ever new keys with ``ttl=5 s`` and (c) the same without TTL, each
  fed at a fixed rate for ``--flat-seconds`` with 1 s checkpoints: with windows or TTL the
  size stops growing, without it grows with the keys seen.

Writes event_time.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from jobs import add_results_dir, median, run_to_end, write_results  # noqa: E402
from structured_streaming import SS_CONF, keyed_rate, ss_measure  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    DiscardSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.client import spark_session  # noqa: E402

WINDOW_MS, DELAY_MS = 10_000, 1_000


def ss_windows(spark, *, keys: int, rows_per_batch: int, warmup: int, measure: int,
               timeout_s: float) -> dict:
    from pyspark.sql import functions as F

    rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
            .option("numPartitions", 2).option("advanceMillisPerBatch", 1000).load())
    # the key and value of bench/structured_streaming.py, the event time of the source
    df = keyed_rate(rate, keys, False, F.col("timestamp").alias("t"))
    query = (df.withWatermark("t", f"{DELAY_MS} milliseconds")
             .groupBy(F.window("t", f"{WINDOW_MS} milliseconds"), "key")
             .agg(F.count("*").alias("count"), F.sum("value").alias("sum")))
    return ss_measure(query, "append", warmup=warmup, measure=measure, timeout_s=timeout_s)


def _pipeline(root: str, name: str) -> Pipeline:
    return Pipeline(name, batch_size=8192,
                    checkpoint=CheckpointConfig(interval_ms=1000, directory=os.path.join(root, "ckpt")),
                    metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=1, delay_ms=0))


def windowed(root: str, records: int | None, keys: int, rows_per_s_event_time: int,
             rate: float | None = None) -> Pipeline:
    p = _pipeline(root, "bench-windows")
    src = GeneratorSource(records, num_keys=keys, seed=1, arrow=True, splits=4,
                          records_per_second=rate, event_time_step_ms=1000 / rows_per_s_event_time,
                          start_ms=1_700_000_000_000)
    (p.source(src, uid="gen", parallelism=2,
              watermarks=WatermarkStrategy.for_bounded_out_of_orderness(DELAY_MS, timestamp_field="ts"))
      .key_by("key").window(TumblingWindows(WINDOW_MS))
      .aggregate(uid="win", parallelism=2, count="count", sum=("sum", "value"))
      .sink(DiscardSink(), uid="out"))
    return p


def ever_new_keys(root: str, records: int, rate: float, ttl_ms: int | None) -> Pipeline:
    p = _pipeline(root, "bench-ttl")
    src = GeneratorSource(records, num_keys=2**62, seed=1, arrow=True, splits=4,
                          records_per_second=rate)
    (p.source(src, uid="gen", parallelism=2).key_by("key")
      .aggregate(uid="agg", parallelism=2, ttl=ttl_ms, count="count", sum=("sum", "value"))
      .sink(DiscardSink(), uid="out"))
    return p


def run(p: Pipeline) -> dict:
    result, elapsed, rows = run_to_end(p, p.name)
    return {"seconds": elapsed, "startup_s": (result.extra.get("startup_seconds") or [0])[0],
            "checkpoints": len(rows), "state_bytes": [c.state_size for c in rows]}


def ours_windows(args) -> dict:
    root = tempfile.mkdtemp(prefix="bench-windows-")
    try:
        r = run(windowed(root, args.records, args.keys, args.rows_per_batch))
        r["records"] = args.records
        r["sustained_records_per_s"] = args.records / (r["seconds"] - (r["startup_s"] or 0))
        return r
    finally:
        shutil.rmtree(root, ignore_errors=True)


def flat_state(args) -> dict:
    n = int(args.flat_rate * args.flat_seconds)
    out = {}
    for name, build in (
            ("windows", lambda root: windowed(root, n, args.keys, int(args.flat_rate), args.flat_rate)),
            ("aggregate_ttl", lambda root: ever_new_keys(root, n, args.flat_rate, 5_000)),
            ("aggregate_no_ttl", lambda root: ever_new_keys(root, n, args.flat_rate, None))):
        root = tempfile.mkdtemp(prefix=f"bench-{name}-")
        try:
            out[name] = run(build(root))
            sizes = out[name]["state_bytes"]
            print(f"  {name}: {len(sizes)} checkpoints, state bytes first/mid/last "
                  f"{sizes[0] if sizes else '-'} / {sizes[len(sizes) // 2] if sizes else '-'} / "
                  f"{sizes[-1] if sizes else '-'}", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows-per-batch", type=int, default=3_000_000,
                    help="SS rows per micro-batch (= rows per second of event time, both engines)")
    ap.add_argument("--records", type=int, default=10_000_000, help="our records per run")
    ap.add_argument("--warmup-batches", type=int, default=2)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--ss-timeout", type=float, default=600.0)
    ap.add_argument("--flat-rate", type=float, default=20_000.0)
    ap.add_argument("--flat-seconds", type=float, default=30.0)
    ap.add_argument("--skip-ss", action="store_true")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    runs = []
    if not args.skip_ss:
        spark = spark_session("local[2]", "bench-windows-ss", extra_conf=SS_CONF)
        try:
            for rep in range(args.reps):
                ss = ss_windows(spark, keys=args.keys, rows_per_batch=args.rows_per_batch,
                                warmup=args.warmup_batches, measure=args.batches,
                                timeout_s=args.ss_timeout)
                ours = ours_windows(args)
                ratio = ours["sustained_records_per_s"] / ss["sustained_records_per_s"]
                runs.append({"ss": ss, "local": ours, "ratio_local": ratio})
                print(f"rep {rep}: SS {ss['sustained_records_per_s']:,.0f} rows/s, ours "
                      f"{ours['sustained_records_per_s']:,.0f} ({ratio:.2f}x)", flush=True)
        finally:
            spark.stop()
    print("state over a long run:", flush=True)
    flat = flat_state(args)
    summary = {
        "keys": args.keys, "reps": len(runs), "rows_per_batch": args.rows_per_batch,
        "records": args.records, "window_ms": WINDOW_MS, "delay_ms": DELAY_MS,
        "ss_records_per_s": median(r["ss"]["sustained_records_per_s"] for r in runs),
        "local_records_per_s": median(r["local"]["sustained_records_per_s"] for r in runs),
        "ratio_local": median(r["ratio_local"] for r in runs),
        "ss_batches_under_trigger": sum(r["ss"]["batches_under_trigger"] for r in runs),
        "flat_rate": args.flat_rate, "flat_seconds": args.flat_seconds,
        "state_bytes": {k: v["state_bytes"] for k, v in flat.items()}}
    write_results(args.results_dir, "event_time.json", {"summary": summary, "runs": runs,
                                                        "flat": flat})
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
