"""Keyed running count/sum: our engine vs Spark Structured Streaming, same machine, same data.

    .venv/bin/python bench/structured_streaming.py [--records N] [--keys K] [--reps R]

* Structured Streaming: Parquet files of the generated records (10 files, read one per
  micro-batch) -> groupBy(key).agg(count, sum) -> update mode -> `noop` sink; RocksDB state
  store provider; checkpoint location on local disk; 1 s processing-time trigger; local[2].
  Time = from query start until every file is processed.
* Ours: GeneratorSource (same records) -> key_by -> running count/sum (heap state) ->
  exactly-once file sink; Spark runner on local[2]; checkpoints every 1 s.

Repetitions are interleaved; the ratio is computed pair by pair. Writes
bench/results/structured_streaming.json (BENCHMARKS.md via write_benchmarks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from running_sum import one_run  # noqa: E402

from airflow_checkpoint_provider.engine import GeneratorSource  # noqa: E402
from airflow_checkpoint_provider.engine.runners.spark import session_for  # noqa: E402


def write_input(directory: str, records: int, keys: int, files: int = 10) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = GeneratorSource(records, num_keys=keys, seed=1)
    per = -(-records // files)
    for f in range(files):
        rows = [src.record(i) for i in range(f * per, min(records, (f + 1) * per))]
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(directory, f"part-{f:03d}.parquet"))


def structured_streaming(spark, input_dir: str, records: int) -> dict:
    from pyspark.sql import functions as F

    chk = tempfile.mkdtemp(prefix="sss-chk-")
    try:
        schema = spark.read.parquet(input_dir).schema
        df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
              .groupBy("key").agg(F.count("*").alias("count"), F.sum("value").alias("sum")))
        t0 = time.monotonic()
        q = (df.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", chk).trigger(processingTime="1 second").start())
        q.processAllAvailable()
        elapsed = time.monotonic() - t0
        batches = len(q.recentProgress)
        q.stop()
        return {"seconds": elapsed, "records_per_s": records / elapsed, "micro_batches": batches}
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    input_dir = tempfile.mkdtemp(prefix="sss-in-")
    write_input(input_dir, args.records, args.keys)
    spark = session_for("local[2]", "bench-sss", extra_conf={
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.shuffle.partitions": "2"})
    runs = []
    try:
        for rep in range(args.reps):
            sss = structured_streaming(spark, input_dir, args.records)
            ours = one_run(args.records, args.keys, 1000, "spark", {"spark": spark})
            runs.append({"sss": sss, "ours": ours, "ratio": ours["records_per_s"] / sss["records_per_s"]})
            print(f"rep {rep}: structured streaming {sss['records_per_s']:.0f} rec/s, "
                  f"ours {ours['records_per_s']:.0f} rec/s, ratio {runs[-1]['ratio']:.2f}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(input_dir, ignore_errors=True)
    summary = {"records": args.records, "keys": args.keys, "reps": args.reps,
               "sss_records_per_s": statistics.median(r["sss"]["records_per_s"] for r in runs),
               "ours_records_per_s": statistics.median(r["ours"]["records_per_s"] for r in runs),
               "ratio_median": statistics.median(r["ratio"] for r in runs)}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "structured_streaming.json"), "w") as f:
        json.dump({"summary": summary, "runs": runs}, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
