"""Our engine vs Spark Structured Streaming at saturation: each engine fed faster than it can
process, sustained rows/s after start-up, same machine, same data shape, interleaved.

    .venv/bin/python bench/structured_streaming.py [--keys K] [--reps R] [--runners local,spark]

Scenarios, each repetition running every engine once, one after the other:

* **Vectorized, string keys** ``k<n>`` and **int64 keys** ``n`` (100,000 keys, values 0..99):
  SS ``groupBy(key).agg(count, sum)``, update mode, ``noop`` sink, RocksDB state store with
  changelog checkpointing, 1 s processing-time trigger, local[2], 2 shuffle partitions, fed by
  the ``rate-micro-batch`` source with more rows per batch than it processes in a second (so
  no batch waits for its trigger; batches that finished under 1 s are counted and reported).
  SS sustained = rows / summed ``triggerExecution`` of the batches after ``--warmup-batches``.
  Ours: ``key_by("key").aggregate(count, sum)`` on Arrow batches (bench/jobs.py
  ``aggregate``, pipeline ``batch_size`` 8192; Arrow sources read ``arrow_batch_size`` rows,
  default 65,536), parallelism 2, checkpoints every 1 s, discarding sink, on
  the local runner and on the Spark runner (the same local[2] session). Ours sustained =
  records / (wall time - launch-to-running start-up); teardown and the final checkpoint stay
  in, so ours is measured conservatively.
* **Per record, 100,000 keys**: SS ``applyInPandasWithState`` (count and sum per key in
  Python state, update mode, noop sink) vs our per-record ``KeyedProcessFunction`` running
  sum (bench/jobs.py ``running_sum``: heap state, exactly-once file sink), local runner.

Ratios are ours / SS pair by pair within a repetition; the summary holds their medians.
Writes structured_streaming.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from jobs import add_results_dir, median, peak_rss, run_job, write_results  # noqa: E402

from airflow_checkpoint_provider.engine.client import spark_session  # noqa: E402

SS_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "2",
}
TRIGGER_MS = 1000


def keyed_rate(rate_df, keys: int, int_keys: bool, *extra):
    """``key``/``value`` columns from the rate source's ``value`` (0, 1, 2, ...): a
    multiplicative hash spreads consecutive ids over the keys, as our generator does.
    ``extra``: further columns to keep (e.g. the source's timestamp)."""
    from pyspark.sql import functions as F

    h = (F.col("value") * F.lit(2654435761)) % F.lit(1 << 32)
    key = (h % F.lit(keys)).cast("long")
    if not int_keys:
        key = F.concat(F.lit("k"), key.cast("string"))
    return rate_df.select(key.alias("key"), ((h / F.lit(keys)).cast("long") % 100).alias("value"),
                          *extra)


def _running_sum_in_pandas(key, pdfs, state):
    """SS's Python state per key: the count and sum of the key's values so far."""
    import pandas as pd

    count, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        count += len(pdf)
        total += int(pdf["value"].sum())
    state.update((count, total))
    yield pd.DataFrame({"key": [key[0]], "count": [count], "sum": [total]})


def _aggregation(df):
    from pyspark.sql import functions as F

    return df.groupBy("key").agg(F.count("*").alias("count"), F.sum("value").alias("sum"))


def _pandas_state(df):
    from pyspark.sql.streaming.state import GroupStateTimeout

    return df.groupBy("key").applyInPandasWithState(
        _running_sum_in_pandas, "key string, count long, sum long", "count long, sum long",
        "Update", GroupStateTimeout.NoTimeout)


def ss_sustained(spark, query, *, keys: int, int_keys: bool, rows_per_batch: int,
                 warmup: int, measure: int, timeout_s: float) -> dict:
    """Run ``query`` over the rate-micro-batch source until ``warmup + measure`` batches
    ended; rows/s over the measured batches."""
    rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
            .option("numPartitions", 2).load())
    return ss_measure(query(keyed_rate(rate, keys, int_keys)), "update", warmup=warmup,
                      measure=measure, timeout_s=timeout_s)


def ss_measure(df, output_mode: str, *, warmup: int, measure: int, timeout_s: float,
               sink=None) -> dict:
    """Run the streaming ``df`` into a noop sink (or the one ``sink(writer)`` configures)
    until ``warmup + measure`` batches ended; rows/s over the measured batches (rows / summed
    triggerExecution)."""
    chk = tempfile.mkdtemp(prefix="ss-chk-")
    try:
        writer = df.writeStream.outputMode(output_mode)
        writer = writer.format("noop") if sink is None else sink(writer)
        q = (writer.option("checkpointLocation", chk)
             .trigger(processingTime=f"{TRIGGER_MS} milliseconds").start())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                done = [p for p in q.recentProgress if p.numInputRows]
                if len(done) >= warmup + measure or time.monotonic() > deadline:
                    break
                if q.exception() is not None:
                    raise RuntimeError(f"structured streaming query failed: {q.exception()}")
                time.sleep(0.5)
        finally:
            q.stop()
        batches = [p for p in q.recentProgress if p.numInputRows][warmup:warmup + measure]
        if not batches:
            raise RuntimeError(f"no micro-batch after the {warmup} warm-up ones within "
                               f"{timeout_s:.0f} s")
        rows = sum(p.numInputRows for p in batches)
        ms = [p.durationMs.get("triggerExecution", 0) for p in batches]
        return {"rows": rows, "batches": len(batches), "batch_ms": ms,
                "batches_under_trigger": sum(1 for m in ms if m < TRIGGER_MS),
                "sustained_records_per_s": rows / (sum(ms) / 1000.0)}
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def ours_sustained(job: str, records: int, keys: int, runner: str, opts: dict, **build) -> dict:
    r = run_job(job, None, records, keys, 1000, runner, opts, **build)
    r["sustained_records_per_s"] = r["records"] / (r["seconds"] - (r["startup_s"] or 0))
    return r


def one_rep(spark, args, rep_index: int) -> dict:
    rep: dict = {}
    for mode, int_keys in (("str", False), ("int", True)):
        if mode not in args.modes:
            continue
        row = {"ss": ss_sustained(spark, _aggregation, keys=args.keys, int_keys=int_keys,
                                  rows_per_batch=getattr(args, f"{mode}_rows_per_batch"),
                                  warmup=args.warmup_batches, measure=args.batches,
                                  timeout_s=args.ss_timeout)}
        for runner in args.runners:
            row[runner] = ours_sustained(
                "aggregate", getattr(args, f"{mode}_records"), args.keys, runner,
                {"spark": spark} if runner == "spark" else {}, batch_size=8192,
                int_keys=int_keys)
            row[f"ratio_{runner}"] = (row[runner]["sustained_records_per_s"]
                                      / row["ss"]["sustained_records_per_s"])
        rep[mode] = row
        print(f"  {mode} keys: SS {row['ss']['sustained_records_per_s']:,.0f} rows/s; "
              + ", ".join(f"ours {r} {row[r]['sustained_records_per_s']:,.0f} "
                          f"({row[f'ratio_{r}']:.2f}x)" for r in args.runners), flush=True)
    if "per_record" in args.modes and rep_index < args.per_record_reps:
        # one Python call per key and batch: a batch of 100,000 keys takes minutes, so
        # fewer, bigger batches (SS's best rate) and fewer repetitions
        ss = ss_sustained(spark, _pandas_state, keys=args.keys, int_keys=False,
                          rows_per_batch=args.pandas_rows_per_batch, warmup=1,
                          measure=args.pandas_batches, timeout_s=args.ss_timeout)
        ours = ours_sustained("running_sum", args.per_record_records, args.keys, "local", {})
        rep["per_record"] = {"ss": ss, "local": ours, "ratio_local":
                             ours["sustained_records_per_s"] / ss["sustained_records_per_s"]}
        print(f"  per record: SS applyInPandasWithState {ss['sustained_records_per_s']:,.0f} "
              f"rows/s; ours {ours['sustained_records_per_s']:,.0f} "
              f"({rep['per_record']['ratio_local']:.2f}x)", flush=True)
    return rep


def summarize(args, runs: list[dict]) -> dict:
    scenarios = {}
    for mode in ("str", "int", "per_record"):
        reps = [r[mode] for r in runs if mode in r]
        if not reps:
            continue
        runners = [k for k in reps[0] if k not in ("ss",) and not k.startswith("ratio_")]
        scenarios[mode] = {
            "ss_records_per_s": median(r["ss"]["sustained_records_per_s"] for r in reps),
            "ss_batches_under_trigger": sum(r["ss"]["batches_under_trigger"] for r in reps),
            **{f"{k}_records_per_s": median(r[k]["sustained_records_per_s"] for r in reps)
               for k in runners},
            **{f"ratio_{k}": median(r[f"ratio_{k}"] for r in reps) for k in runners},
            "peak_rss_mb": max((peak_rss(r[k]) or 0) for r in reps for k in runners)}
    return {"keys": args.keys, "reps": args.reps, "runners": args.runners,
            "warmup_batches": args.warmup_batches, "batches": args.batches,
            "str_rows_per_batch": args.str_rows_per_batch,
            "int_rows_per_batch": args.int_rows_per_batch,
            "pandas_rows_per_batch": args.pandas_rows_per_batch,
            "pandas_batches": args.pandas_batches, "per_record_reps": args.per_record_reps,
            "str_records": args.str_records, "int_records": args.int_records,
            "per_record_records": args.per_record_records, "scenarios": scenarios}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runners", default="local,spark",
                    help="our runners to measure, comma-separated (local, spark)")
    ap.add_argument("--modes", default="str,int,per_record",
                    help="scenarios, comma-separated: str, int, per_record")
    ap.add_argument("--warmup-batches", type=int, default=2)
    ap.add_argument("--batches", type=int, default=5, help="measured SS micro-batches")
    ap.add_argument("--str-rows-per-batch", type=int, default=3_000_000)
    ap.add_argument("--int-rows-per-batch", type=int, default=12_000_000)
    ap.add_argument("--pandas-rows-per-batch", type=int, default=1_000_000)
    ap.add_argument("--pandas-batches", type=int, default=1,
                    help="measured applyInPandasWithState batches (after one warm-up batch)")
    ap.add_argument("--per-record-reps", type=int, default=1,
                    help="repetitions that also run the per-record scenario")
    ap.add_argument("--str-records", type=int, default=10_000_000)
    ap.add_argument("--int-records", type=int, default=16_000_000)
    ap.add_argument("--per-record-records", type=int, default=300_000)
    ap.add_argument("--ss-timeout", type=float, default=900.0)
    add_results_dir(ap)
    args = ap.parse_args(argv)
    args.runners = [r for r in args.runners.split(",") if r]
    args.modes = [m for m in args.modes.split(",") if m]
    spark = spark_session("local[2]", "bench-ss", extra_conf=SS_CONF)
    runs = []
    try:
        for rep in range(args.reps):
            print(f"rep {rep}:", flush=True)
            runs.append(one_rep(spark, args, rep))
    finally:
        spark.stop()
    summary = summarize(args, runs)
    write_results(args.results_dir, "structured_streaming.json", {"summary": summary, "runs": runs})
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
