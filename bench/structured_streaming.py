"""Keyed running count/sum: our engine vs Spark Structured Streaming, same machine, same data.

    .venv/bin/python bench/structured_streaming.py [--records N] [--keys K] [--reps R]

* Structured Streaming: Parquet files of the generated records (10 files, one per
  micro-batch; and, as SSS's best case, all files in one micro-batch) -> groupBy(key).agg(count, sum) -> update mode -> ``noop`` sink; RocksDB state
  store provider; checkpoint location on local disk; 1 s processing-time trigger; local[2],
  2 shuffle partitions. Time = from query start until every file is processed.
* Ours, vectorized: the ``aggregate`` job of bench/jobs.py (GeneratorSource in Arrow mode,
  the same records -> key_by -> built-in aggregate(count, sum) -> discarding sink), Spark
  runner on local[2] (one barrier stage, parallelism 2), checkpoints every 1 s.
* Ours, per record: the ``running_sum`` job (a Python KeyedProcessFunction per record,
  heap state, exactly-once file sink), same runner; shown for reference, not the target.

Both engines share one SparkSession. Repetitions are interleaved; ratios are computed pair
by pair. Writes structured_streaming.json.
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

from airflow_checkpoint_provider.engine import GeneratorSource  # noqa: E402
from airflow_checkpoint_provider.engine.runners.spark import session_for  # noqa: E402


def write_input(directory: str, records: int, keys: int, files: int = 10) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = GeneratorSource(records, num_keys=keys, seed=1, arrow=True)
    per = -(-records // files)
    for f in range(files):
        ids = np.arange(f * per, min(records, (f + 1) * per), dtype=np.int64)
        table = pa.Table.from_batches([src.record_batch(ids)])
        pq.write_table(table, os.path.join(directory, f"part-{f:03d}.parquet"))


def structured_streaming(spark, input_dir: str, records: int, files_per_trigger: int = 1) -> dict:
    from pyspark.sql import functions as F

    chk = tempfile.mkdtemp(prefix="sss-chk-")
    try:
        schema = spark.read.parquet(input_dir).schema
        df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_trigger).parquet(input_dir)
              .groupBy("key").agg(F.count("*").alias("count"), F.sum("value").alias("sum")))
        t0 = time.monotonic()
        q = (df.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", chk).trigger(processingTime="1 second").start())
        q.processAllAvailable()
        elapsed = time.monotonic() - t0
        progress = [p for p in q.recentProgress if p.numInputRows]
        busy_ms = sum(p.durationMs.get("triggerExecution", 0) for p in progress)
        q.stop()
        # sustained: rows over the time micro-batches ran (query start-up and idle waits for
        # the next trigger excluded)
        return {"seconds": elapsed, "records_per_s": records / elapsed,
                "micro_batches": len(progress),
                "sustained_records_per_s": records / (busy_ms / 1000.0) if busy_ms else None}
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--per-record-records", type=int, default=200_000,
                    help="records for the per-record reference job (it is ~10x slower)")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    input_dir = tempfile.mkdtemp(prefix="sss-in-")
    write_input(input_dir, args.records, args.keys)
    spark = session_for("local[2]", "bench-sss", extra_conf={
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.shuffle.partitions": "2"})
    opts = {"spark": spark}
    runs = []
    try:
        for rep in range(args.reps):
            sss = structured_streaming(spark, input_dir, args.records)
            # SSS's best case: every file in one micro-batch (no streaming cadence at all)
            sss_one = structured_streaming(spark, input_dir, args.records, files_per_trigger=1000)
            ours = run_job("aggregate", None, args.records, args.keys, 1000, "spark", opts)
            per_record = run_job("running_sum", None, args.per_record_records, args.keys, 1000,
                                 "spark", opts)
            for r in (ours, per_record):  # sustained: launch-to-running start-up excluded
                r["sustained_records_per_s"] = r["records"] / (r["seconds"] - (r["startup_s"] or 0))
            runs.append({"sss": sss, "sss_one_batch": sss_one, "ours": ours,
                         "sustained_ratio": ours["sustained_records_per_s"]
                         / sss["sustained_records_per_s"],
                         "one_batch_sustained_ratio": ours["sustained_records_per_s"]
                         / sss_one["sustained_records_per_s"],
                         "per_record": per_record,
                         "one_batch_ratio": ours["records_per_s"] / sss_one["records_per_s"],
                         "ratio": ours["records_per_s"] / sss["records_per_s"],
                         "per_record_ratio": per_record["records_per_s"] / sss["records_per_s"]})
            print(f"rep {rep}: structured streaming {sss['records_per_s']:,.0f} rec/s, ours "
                  f"{ours['records_per_s']:,.0f} rec/s (ratio {runs[-1]['ratio']:.2f}), per-record "
                  f"{per_record['records_per_s']:,.0f} rec/s", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(input_dir, ignore_errors=True)
    summary = {"records": args.records, "keys": args.keys, "reps": args.reps,
               "per_record_records": args.per_record_records,
               "sss_records_per_s": median(r["sss"]["records_per_s"] for r in runs),
               "ours_records_per_s": median(r["ours"]["records_per_s"] for r in runs),
               "per_record_records_per_s": median(r["per_record"]["records_per_s"] for r in runs),
               "ratio_median": median(r["ratio"] for r in runs),
               "sss_one_batch_records_per_s": median(r["sss_one_batch"]["records_per_s"]
                                                     for r in runs),
               "one_batch_ratio_median": median(r["one_batch_ratio"] for r in runs),
               "sustained_ratio_median": median(r["sustained_ratio"] for r in runs),
               "one_batch_sustained_ratio_median": median(r["one_batch_sustained_ratio"]
                                                          for r in runs),
               "per_record_ratio_median": median(r["per_record_ratio"] for r in runs),
               "ours_peak_rss_mb": max((peak_rss(r["ours"]) or 0) for r in runs)}
    write_results(args.results_dir, "structured_streaming.json", {"summary": summary, "runs": runs})
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
