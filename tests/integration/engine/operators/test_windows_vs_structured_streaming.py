"""Window semantics checked against Spark Structured Streaming on the same input: tumbling
event-time windows with a watermark, append mode, count and sum per key and window. SS runs
in local mode over the same records written as Parquet files, one file per micro-batch, so
its watermark advances between batches as ours does between record batches."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from event_time_pipelines import BOUND_MS, WINDOW_MS, committed_windows, source, windowed_pipeline

N = 8_000
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]


#: Parquet files (so SS micro-batches) of the input: two, so SS's watermark advances between
#: data batches and the second one evicts and emits the windows the first one's watermark
#: closed, mid-stream; each batch costs ~1-3 CPU-s (four parts: two batches more, same check)
PARTS = 2


def _sentinel(i: int, max_ts: int) -> dict:
    """A record far in the future (``max_ts`` + 100 s, + 200 s): moves SS's watermark past
    every real window; its key is no real key."""
    return {"id": -1 - i, "key": "sentinel", "value": 0, "ts": max_ts + 100_000 * (i + 1)}


def _write_input(directory: str) -> int:
    """The generator's records as PARTS Parquet files of consecutive ids, the last one
    ending with the first sentinel (the watermark SS takes into the next batch is past
    every real window; the rows of that last file are still checked against the watermark
    of the batches before it); returns the max ts of the real records."""
    os.makedirs(directory)
    src = source(N, arrow=False)
    records = [src.record(i) for i in range(N)]
    max_ts = max(r["ts"] for r in records)
    for part in range(PARTS):
        rows = records[part * N // PARTS:(part + 1) * N // PARTS]
        if part == PARTS - 1:
            rows = [*rows, _sentinel(0, max_ts)]
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(directory, f"part-{part}.parquet"))
    return max_ts


def _ss_windows(spark, directory: str, max_ts: int, checkpoint: str) -> dict:
    from pyspark.sql import functions as F

    schema = "id long, key string, value long, ts long"
    stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(directory)
              .withColumn("t", F.timestamp_millis("ts"))
              .withWatermark("t", f"{BOUND_MS} milliseconds")
              .groupBy(F.window("t", f"{WINDOW_MS} milliseconds"), "key")
              .agg(F.count("*").alias("n"), F.sum("value").alias("total")))
    q = (stream.writeStream.outputMode("append").format("memory").queryName("ss_windows")
         .option("checkpointLocation", checkpoint).start())
    try:
        q.processAllAvailable()
        # the second sentinel, in a batch of its own: it evicts (append mode: emits) the
        # windows the first one's watermark passed (a batch of its own for the first
        # sentinel too: one batch more, the same output)
        pq.write_table(pa.Table.from_pylist([_sentinel(1, max_ts)]),
                       os.path.join(directory, "sentinel-1.parquet"))
        q.processAllAvailable()
        batches = sum(1 for p in q.recentProgress if p["numInputRows"])
        assert batches == PARTS + 1, batches
        rows = spark.sql("select key, unix_millis(window.start) as s, unix_millis(window.end) as e, "
                         "n, total from ss_windows where key != 'sentinel'").collect()
    finally:
        q.stop()
    out = {}
    for r in rows:
        assert (r.key, r.s) not in out, "SS emitted a window twice"
        assert r.e - r.s == WINDOW_MS
        out[(r.key, r.s)] = (r.n, r.total)
    return out


@pytest.mark.timeout(300)
def test_tumbling_window_counts_equal_structured_streaming_row_for_row(workdir):
    from airflow_checkpoint_provider.engine.runners.spark import session_for

    max_ts = _write_input(str(workdir / "input"))
    # no no-data micro-batches (run only to evict with the advanced watermark): the second
    # sentinel's batch evicts with the watermark the first one's batch advanced
    spark = session_for("local[2]", "windows-vs-ss",
                        extra_conf={"spark.sql.shuffle.partitions": "2",
                                    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
                                    "spark.sql.session.timeZone": "UTC"})
    try:
        ss = _ss_windows(spark, str(workdir / "input"), max_ts, str(workdir / "ss-chk"))
    finally:
        spark.stop()
    result = windowed_pipeline(str(workdir / "ours"), num_records=N).run()
    assert result.status == "FINISHED"
    ours = committed_windows(str(workdir / "ours" / "out"))
    assert len(ss) > 50
    assert ours == ss
