"""Interval and window joins checked row for row against Spark Structured Streaming's
stream-stream join on the same out-of-order input: impressions and clicks of
tests/support/join_pipelines.py (30 keys, disorder up to 300 ms, watermark bound 400 ms on both
sides), joined on the key with the time range ``click.t BETWEEN imp.t - 50 ms AND imp.t +
150 ms`` (inner, left, right and full outer), and on the key and the 250 ms tumbling window
(SS: equality of both sides' ``window(t, '250 milliseconds')`` columns, inner).

SS reads the same records as Parquet files, one file per source per micro-batch, so its
watermark advances between batches. The comparison is on the final output of the bounded
input, once both engines have seen all of it and their watermarks passed every row: then
both emit every pair of the time range and (left outer) every impression that matched
nothing, exactly once. Differences in *when* rows are emitted (and so which rows could be
late) are documented in the README section "Joins and two-input operators":

* SS's watermark is global (the minimum over all inputs' ``withWatermark``,
  ``spark.sql.streaming.multipleWatermarkPolicy=min``) and moves once per micro-batch, from
  the maximum event time of the previous batches; ours is the minimum over the join's input
  channels and moves with every watermark a source emits (``with_emit_interval``). Both drop
  rows behind the watermark ("late"), so which rows are late can differ between the two
  when the input's disorder exceeds the bound; this input stays within it and nothing is
  late in either engine (checked below: SS's ``numRowsDroppedByWatermark`` is 0, ours is
  the same output as the plain Python reference, which drops nothing).
* SS emits a left outer join's unmatched row in the first micro-batch whose watermark is past
  ``imp.t + 150 ms`` (so a bounded input needs a later batch to flush them: the sentinel rows
  below); ours emits it as soon as our watermark reaches ``imp.t + 150 ms``.
* SS's NULL-padded columns are ours ``fn(left, None)`` / ``fn(None, right)``; the key of an
  unmatched click is ``coalesce(i_key, c_key)``.
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from join_pipelines import (
    BOUND_MS,
    JOIN_WINDOW_MS,
    LOWER_MS,
    N_CLICKS,
    N_IMPRESSIONS,
    UPPER_MS,
    _records,
    clicks,
    expected_interval_join,
    expected_window_join,
    impressions,
    pair,
    watermarks,
)

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    read_committed,
)

pytestmark = pytest.mark.slow
#: micro-batches of each input: two, so SS's watermark still advances between data batches;
#: each batch of the five queries costs ~3-4 CPU-s, so four parts made this module's set-up
#: ~90 s longer for the same comparison
PARTS = 2
HOWS = ("inner", "left", "right", "full")
SCHEMA = "id long, key string, value long, ts long"


@pytest.fixture(scope="module")
def spark():
    """One local Spark session for the module."""
    from airflow_checkpoint_provider.engine.runners.spark import session_for

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        # no no-data micro-batches: SS would run one after every batch only to evict state
        # with the advanced watermark; the same watermark evicts in the next batch (the
        # sentinels' second batch flushes the last), so the output and the rows dropped as
        # late are the same, in half the batches (5 queries x 4 batches, ~1-4 s each)
        session = session_for("local[2]", "joins-vs-ss",
                              extra_conf={"spark.sql.shuffle.partitions": "2",
                                          "spark.sql.session.timeZone": "UTC",
                                          "spark.sql.streaming.noDataMicroBatches.enabled":
                                              "false",
                                          "spark.ui.enabled": "false"})
        try:
            yield session
        finally:
            session.stop()


def _sentinel(i: int, max_ts: int) -> dict:
    """A row far in the future (``max_ts`` + 100 s, + 200 s): moves SS's watermark past
    every real row; its key matches no real key."""
    return {"id": -1 - i, "key": "sentinel", "value": 0, "ts": max_ts + 100_000 * (i + 1)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Both generators' records as Parquet files of consecutive ids (in the order the
    records are generated, so out of order in event time), and the largest timestamp. The
    last file of each input ends with the first sentinel row: the watermark SS takes into
    the next batch is past every real row (the rows of that last batch are still checked
    against the watermark of the batches before it, so nothing of it is late)."""
    root = tmp_path_factory.mktemp("join-input")
    recs = {"imps": _records(impressions(), N_IMPRESSIONS),
            "clicks": _records(clicks(), N_CLICKS)}
    max_ts = max(r["ts"] for rows in recs.values() for r in rows)
    for name, rows in recs.items():
        os.makedirs(root / name)
        n = len(rows)
        for part in range(PARTS):
            batch = rows[part * n // PARTS:(part + 1) * n // PARTS]
            if part == PARTS - 1:
                batch = [*batch, _sentinel(0, max_ts)]
            pq.write_table(pa.Table.from_pylist(batch), str(root / name / f"part-{part}.parquet"))
    return root, max_ts


def _ss_joins(spark, root, max_ts: int) -> dict[str, tuple[Counter, int]]:
    """SS's stream-stream joins of the input (five queries running side by side), flushed
    by sentinel rows far in the future on both inputs (the global watermark is the minimum
    of the two); per join: the output rows (key, imp id, click id or None) and the rows SS
    dropped as late."""
    from pyspark.sql import functions as F

    def stream(name: str, prefix: str):
        return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                .parquet(str(root / name))
                .select(F.col("id").alias(f"{prefix}_id"), F.col("key").alias(f"{prefix}_key"),
                        F.timestamp_millis("ts").alias(f"{prefix}_t"))
                .withWatermark(f"{prefix}_t", f"{BOUND_MS} milliseconds"))

    condition = F.expr(
        f"i_key = c_key AND c_t BETWEEN i_t + INTERVAL {LOWER_MS} MILLISECONDS "
        f"AND i_t + INTERVAL {UPPER_MS} MILLISECONDS")
    window = f"{JOIN_WINDOW_MS} milliseconds"
    joins = {how: stream("imps", "i").join(stream("clicks", "c"), condition, kind)
             for how, kind in (("inner", "inner"), ("left", "leftOuter"),
                               ("right", "rightOuter"), ("full", "fullOuter"))}
    # the window join: both sides' tumbling window as a column, equal windows and keys
    joins["window"] = (
        stream("imps", "i").withColumn("i_w", F.window("i_t", window))
        .join(stream("clicks", "c").withColumn("c_w", F.window("c_t", window)),
              F.expr("i_key = c_key AND i_w = c_w"), "inner"))
    queries = {}
    try:
        for how, joined in joins.items():
            queries[how] = (joined.select(F.coalesce("i_key", "c_key").alias("i_key"),
                                          "i_id", "c_id").writeStream
                            .outputMode("append").format("memory").queryName(f"ss_{how}")
                            .option("checkpointLocation", str(root / f"ss-chk-{how}")).start())
        for q in queries.values():
            q.processAllAvailable()
        # the last data batch had the first sentinel in it (``inputs``): the watermark is
        # past every real row now; the batch of the second sentinel evicts (and emits) them
        # (a batch of its own for the first sentinel: one more batch of each query, same
        # output)
        for name in ("imps", "clicks"):
            pq.write_table(pa.Table.from_pylist([_sentinel(1, max_ts)]),
                           str(root / name / "sentinel-1.parquet"))
        for q in queries.values():
            q.processAllAvailable()
        batches = [sum(1 for p in q.recentProgress if p["numInputRows"])
                   for q in queries.values()]
        # at least one batch per data file and one for the second sentinel (the watermark
        # advanced mid-stream); more when the two inputs' files land in different batches
        assert all(b >= PARTS + 1 for b in batches), batches
        out = {}
        for how, q in queries.items():
            ops = [op for p in q.recentProgress for op in p["stateOperators"]]
            assert ops and all("numRowsDroppedByWatermark" in op for op in ops), ops[:1]
            rows = spark.sql(f"select i_key, i_id, c_id from ss_{how} "
                             "where i_key != 'sentinel'").collect()
            out[how] = (Counter((r.i_key, r.i_id, r.c_id) for r in rows),
                        sum(op["numRowsDroppedByWatermark"] for op in ops))
        return out
    finally:
        for q in queries.values():
            q.stop()


@pytest.fixture(scope="module")
def ss(spark, inputs):
    root, max_ts = inputs
    return _ss_joins(spark, root, max_ts)


def _ours(root: str) -> Pipeline:
    """The same joins on this engine: inner and left outer from the same two sources."""
    p = Pipeline("joins-vs-ss", max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=200, directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    imps = p.source(impressions(), uid="imps", parallelism=2, watermarks=watermarks())
    clks = p.source(clicks(), uid="clicks", parallelism=2, watermarks=watermarks())
    for how in HOWS:
        (imps.key_by("key").interval_join(clks.key_by("key"), how=how)
             .between(LOWER_MS, UPPER_MS)
             .process(pair, uid=f"ij-{how}", parallelism=2)
             .sink(FileSink(os.path.join(root, how)), uid=f"out-{how}"))
    (imps.join(clks).where("key").equal_to("key").window(TumblingWindows(JOIN_WINDOW_MS))
         .apply(pair, uid="wj", parallelism=2)
         .sink(FileSink(os.path.join(root, "window")), uid="out-window"))
    return p


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ours"))
    result = _ours(root).run()
    assert result.status == "FINISHED"
    return {how: Counter((r["key"], r["imp"], r["click"])
                         for r in read_committed(os.path.join(root, how)))
            for how in (*HOWS, "window")}


@pytest.mark.timeout(600)  # the first test also sets up the SS and our runs (108-330 s)
@pytest.mark.parametrize("how", HOWS)
def test_interval_join_equals_structured_streaming_row_for_row(ss, ours, how):
    ss, dropped = ss[how]
    assert dropped == 0, "the input is within the bound: SS drops nothing as late"
    assert sum(ss.values()) > 1_000
    if how in ("left", "full"):
        unmatched = sum(n for (_, _, c), n in ss.items() if c is None)
        assert 0 < unmatched < N_IMPRESSIONS, "some impressions matched nothing"
    if how in ("right", "full"):
        unmatched = sum(n for (_, i, _), n in ss.items() if i is None)
        assert 0 < unmatched < N_CLICKS, "some clicks matched nothing"
    assert ours[how] == ss
    assert ss == expected_interval_join(how)


@pytest.mark.timeout(600)  # the first test also sets up the SS and our runs (108-330 s)
def test_tumbling_window_join_equals_structured_streaming_row_for_row(ss, ours):
    """SS's inner join on the key and equal ``window()`` columns pairs the same rows as our
    ``join(...).window(TumblingWindows(250 ms))``: windows aligned to the epoch alike."""
    ss, dropped = ss["window"]
    assert dropped == 0
    assert sum(ss.values()) > 1_000
    assert ours["window"] == ss
    assert ss == expected_window_join()
