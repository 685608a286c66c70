"""Spark Structured Streaming on the Nexmark Parquet files: the queries SS can express.

q10 writes CSV files partitioned by ``dt`` and ``hm`` (:func:`ss_sink`); the others run into
the noop sink.

Joins: q3 and q20 are inner stream-stream joins, which SS runs without watermarks (both
sides kept in state, as Flink's regular join); q13 is a stream-static join with the bounded
side input. q8 (two windowed GROUP BYs joined) needs a join after aggregations, which SS
refuses in append mode; q4 (MAX then AVG: two aggregations in update mode), q9 and q6
(``row_number()`` over a window, an OVER window) are not supported on streams either.

Not expressible in SS (streaming): q5 and q7 (an aggregation over a streaming aggregation's
output joined back to it), q12 (processing-time windows: ``window`` needs an event-time
column with a watermark), q15/q16 (``count(distinct)`` is not supported on streams), q18
and q19 (``row_number()`` over a window is not supported on streams).
"""

from __future__ import annotations

from .generator import SCHEMA

STATELESS = ("q0", "q1", "q2", "q10", "q14", "q21", "q22")
#: joins of the event stream with itself: SS counts each input row once per side
SS_SELF_JOINS = ("q3", "q20")
SS_QUERIES = (*STATELESS, "q11", "q17", "q3", "q13", "q20")


def ss_sink(query: str, directory: str):
    """How ``query``'s DataStreamWriter writes (for ss_measure): q10 into CSV files under
    ``directory`` partitioned by ``dt`` and ``hm`` (SS's file sink: exactly once through its
    ``_spark_metadata`` log); the other queries into the noop sink (``None``)."""
    if query != "q10":
        return None
    return lambda w: w.format("csv").option("path", directory).partitionBy("dt", "hm")


def spark_schema():
    from pyspark.sql import types as T

    kinds = {"int32": T.IntegerType(), "int64": T.LongType(), "string": T.StringType(),
             "timestamp[ms]": T.TimestampNTZType()}
    return T.StructType([T.StructField(f.name, kinds[str(f.type)]) for f in SCHEMA])


def ss_query(spark, query: str, path: str, files_per_trigger: int):
    """``(DataFrame, output mode)`` of ``query`` over the Parquet directory ``path``."""
    from pyspark.sql import functions as F

    events = (spark.readStream.schema(spark_schema()).option("maxFilesPerTrigger",
                                                             files_per_trigger).parquet(path))
    # SS wants TIMESTAMP (not _NTZ) event time; the session time zone is UTC (run.py)
    bid = (events.where(F.col("event_type") == 2)
           .select("auction", "bidder", "price", "channel", "url",
                   F.col("date_time").cast("timestamp").alias("date_time"), "extra"))
    price_eur = (F.col("price") * F.lit(0.908)).alias("price")
    if query == "q0":
        return bid.select("auction", "bidder", "price", "date_time", "extra"), "append"
    if query == "q1":
        return bid.select("auction", "bidder", price_eur, "date_time", "extra"), "append"
    if query == "q2":
        return bid.where(F.col("auction") % 123 == 0).select("auction", "price"), "append"
    if query == "q10":  # written by ss_sink: CSV files partitioned by dt and hm
        return bid.select("auction", "bidder", "price", "date_time", "extra",
                          F.date_format("date_time", "yyyy-MM-dd").alias("dt"),
                          F.date_format("date_time", "HH:mm").alias("hm")), "append"
    if query == "q14":
        hour = F.hour("date_time")
        kind = (F.when((hour >= 8) & (hour <= 18), "dayTime")
                .when((hour <= 6) | (hour >= 20), "nightTime").otherwise("otherTime"))
        euro = F.col("price") * F.lit(0.908)
        counts = F.length("extra") - F.length(F.regexp_replace("extra", "c", ""))
        return (bid.where((euro > 1_000_000) & (euro < 50_000_000))
                .select("auction", "bidder", euro.alias("price"), kind.alias("bidTimeType"),
                        "date_time", "extra", counts.alias("c_counts"))), "append"
    if query == "q21":
        found = F.regexp_extract("url", "(&|^)channel_id=([^&]*)", 2)  # '' when no match
        lower = F.lower("channel")
        hot = (F.when(lower == "apple", "0").when(lower == "google", "1")
               .when(lower == "facebook", "2").when(lower == "baidu", "3"))
        return (bid.where((found != "") | lower.isin("apple", "google", "facebook", "baidu"))
                .select("auction", "bidder", "price", "channel",
                        F.coalesce(hot, found).alias("channel_id"))), "append"
    if query == "q22":
        parts = F.split("url", "/")
        return bid.select("auction", "bidder", "price", "channel",
                          parts.getItem(3).alias("dir1"), parts.getItem(4).alias("dir2"),
                          parts.getItem(5).alias("dir3")), "append"
    if query == "q11":
        return (bid.withWatermark("date_time", "4 seconds")
                .groupBy(F.session_window("date_time", "10 seconds"), "bidder")
                .agg(F.count("*").alias("bid_count"))), "append"
    if query == "q17":
        price = F.col("price")
        return (bid.groupBy("auction", F.date_format("date_time", "yyyy-MM-dd").alias("day"))
                .agg(F.count("*").alias("total_bids"),
                     F.count(F.when(price < 10_000, 1)).alias("rank1_bids"),
                     F.count(F.when((price >= 10_000) & (price < 1_000_000), 1)).alias("rank2_bids"),
                     F.count(F.when(price >= 1_000_000, 1)).alias("rank3_bids"),
                     F.min(price).alias("min_price"), F.max(price).alias("max_price"),
                     F.avg(price).alias("avg_price"), F.sum(price).alias("sum_price"))), "update"
    ts = F.col("date_time").cast("timestamp")
    person = events.where(F.col("event_type") == 0).select(
        F.col("person_id").alias("id"), F.col("person_name").alias("name"),
        F.col("person_city").alias("city"), F.col("person_state").alias("state"))
    auction = events.where(F.col("event_type") == 1).select(
        F.col("auction_id").alias("id"), F.col("auction_item_name").alias("item_name"),
        F.col("auction_description").alias("description"),
        F.col("auction_initial_bid").alias("initial_bid"),
        F.col("auction_reserve").alias("reserve"), ts.alias("auction_date_time"),
        F.col("auction_expires").cast("timestamp").alias("expires"),
        F.col("auction_seller").alias("seller"), F.col("auction_category").alias("category"),
        F.col("extra").alias("auction_extra"))
    if query == "q3":
        a = auction.where(F.col("category") == 10).select(F.col("id").alias("a_id"), "seller")
        p = person.where(F.col("state").isin("OR", "ID", "CA"))
        return (a.join(p, a.seller == p.id).select("name", "city", "state", "a_id")), "append"
    if query == "q20":
        a = auction.where(F.col("category") == 10)
        return bid.join(a, bid.auction == a.id).drop("id"), "append"
    if query == "q13":
        side = spark.range(10_000).select(F.col("id").alias("key"),
                                          F.col("id").cast("string").alias("value"))
        return (bid.join(side, (bid.auction % 10_000) == side.key)
                .select("auction", "bidder", "price", "date_time", "value")), "append"
    raise ValueError(f"{query} is not expressible in Structured Streaming")
