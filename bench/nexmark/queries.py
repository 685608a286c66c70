"""The Nexmark queries in our API, over the event table of :mod:`.generator`.

``QUERIES[name](events, parallelism)`` takes the stream of events (Arrow batches of
:data:`~.generator.SCHEMA`, from :class:`~.source.NexmarkSource` or the Parquet files) and
returns the query's output stream. The semantics are those of nexmark-flink's SQL
(``queries/q*.sql``); where ours differ it is said at the query. Unbounded GROUP BYs emit
updates (the running result of each key a batch touched), as Flink's and Structured
Streaming's update mode do: a key's last row is its result.

``MISSING``: the queries our operators cannot express yet, with the operator they need (none
since q10 got its partitioned file sink: ``SINK_OPTIONS``). The join queries (q3, q4, q6, q8, q9, q13, q20) are in :mod:`.join_queries`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_checkpoint_provider.engine import (
    KeyedProcessFunction,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)

from .generator import BID
from .join_queries import JOIN_COLUMNS, JOIN_PER_RECORD, JOIN_QUERIES
from .vector_queries import ROW_QUERIES, VECTOR_NOTES, VECTOR_QUERIES

BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")
HOT = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
_CALC = ["auction", "bidder", "price", "date_time", "extra"]
DAY_MS = 86_400_000


def bids(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The ``bid`` view: bid events, bid columns (those the source read: see COLUMNS)."""
    b = batch.filter(pc.equal(batch.column("event_type"), BID))
    return b.select([c for c in BID_COLUMNS if c in b.schema.names])


def bids_ms(batch: pa.RecordBatch) -> pa.RecordBatch:
    """:func:`bids` with ``date_time`` as epoch ms (int64): what per-record state can hold."""
    b = bids(batch)
    i = b.schema.get_field_index("date_time")
    return b.set_column(i, "date_time", pc.cast(b.column(i), pa.int64()))


def _ms(col: pa.Array) -> np.ndarray:
    return pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)


def _rank(price: np.ndarray) -> np.ndarray:
    """Nexmark's price ranks: 1 below 10,000, 2 below 1,000,000, else 3."""
    return np.where(price < 10_000, 1, np.where(price < 1_000_000, 2, 3))


# -- stateless ---------------------------------------------------------------------------
def q0(events, p):
    return events.map_batches(bids, name="q0: bids")


def _q1(batch):
    b = bids(batch)
    return b.set_column(2, "price", pc.multiply(pc.cast(b.column("price"), pa.float64()), 0.908)
                        ).select(["auction", "bidder", "price", "date_time", "extra"])


def q1(events, p):
    return events.map_batches(_q1, name="q1: currency")


def _q2(batch):
    b = bids(batch)
    keep = b.column("auction").to_numpy() % 123 == 0
    return b.filter(pa.array(keep)).select(["auction", "price"])


def q2(events, p):
    return events.map_batches(_q2, name="q2: selection")


def _q14(batch):
    b = bids(batch)
    euro = pc.multiply(pc.cast(b.column("price"), pa.float64()), 0.908)
    b = b.set_column(2, "price", euro).filter(
        pc.and_(pc.greater(euro, 1_000_000), pc.less(euro, 50_000_000)))
    hour = (_ms(b.column("date_time")) // 3_600_000) % 24
    kind = np.where((hour >= 8) & (hour <= 18), "dayTime",
                    np.where((hour <= 6) | (hour >= 20), "nightTime", "otherTime"))
    extra = b.column("extra")
    counts = pc.subtract(pc.utf8_length(extra),
                         pc.utf8_length(pc.replace_substring(extra, "c", "")))
    return pa.RecordBatch.from_arrays(
        [b.column("auction"), b.column("bidder"), b.column("price"), pa.array(kind),
         b.column("date_time"), extra, pc.cast(counts, pa.int64())],
        names=["auction", "bidder", "price", "bidTimeType", "date_time", "extra", "c_counts"])


def q14(events, p):
    return events.map_batches(_q14, name="q14: calculation")


def _q10(batch):
    """The bid columns and ``dt``/``hm``: ``yyyy-MM-dd`` and ``HH:mm`` of ``date_time``, as
    nexmark-flink's q10 (``DATE_FORMAT(dateTime, 'HH:mm')``; the sink escapes the ``:``)."""
    b = bids(batch).select(_CALC)
    ts = b.column("date_time")
    if ts.null_count:
        dt, hm = pc.strftime(ts, "%Y-%m-%d"), pc.strftime(ts, "%H:%M")
    else:  # formatted once per distinct minute (a batch spans a few), then taken per row
        minutes, row_minute = np.unique(_ms(ts) // 60_000, return_inverse=True)
        when = pa.array(minutes * 60_000, pa.int64()).cast(pa.timestamp("ms"))
        dt = pc.take(pc.strftime(when, "%Y-%m-%d"), row_minute)
        hm = pc.take(pc.strftime(when, "%H:%M"), row_minute)
    return b.append_column("dt", dt).append_column("hm", hm)


def q10(events, p):
    """Every bid into a file sink partitioned by ``dt`` and ``hm``: :data:`SINK_OPTIONS`."""
    return events.map_batches(_q10, name="q10: dt/hm")


def _q21(batch):
    b = bids(batch)
    lower = pc.utf8_lower(b.column("channel"))
    found = pc.struct_field(pc.extract_regex(b.column("url"), r"(?:&|^)channel_id=(?P<id>[^&]*)"),
                            [0])
    hot = pc.is_in(lower, pa.array(list(HOT)))
    hot_id = pc.take(pa.array([*HOT.values(), None]),
                     pc.fill_null(pc.index_in(lower, pa.array(list(HOT))), len(HOT)))
    channel_id = pc.if_else(hot, hot_id, found)
    keep = pc.or_(pc.is_valid(found), hot)
    out = pa.RecordBatch.from_arrays(
        [b.column("auction"), b.column("bidder"), b.column("price"), b.column("channel"),
         channel_id], names=["auction", "bidder", "price", "channel", "channel_id"])
    return out.filter(keep)


def q21(events, p):
    return events.map_batches(_q21, name="q21: channel id")


def _q22(batch):
    b = bids(batch)
    parts = pc.split_pattern(b.column("url"), "/")
    dirs = [pc.list_element(parts, i) for i in (3, 4, 5)]
    return pa.RecordBatch.from_arrays(
        [b.column("auction"), b.column("bidder"), b.column("price"), b.column("channel"), *dirs],
        names=["auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"])


def q22(events, p):
    return events.map_batches(_q22, name="q22: url dirs")


# -- q5: hot items (sliding windows, then the max per window) -----------------------------
def _window_end_ms(batch):
    return batch.set_column(batch.schema.get_field_index("window_end"), "window_end",
                            pc.cast(batch.column("window_end"), pa.int64())
                            ).drop_columns(["window_start"])


class MaxPerWindow(KeyedProcessFunction):
    """Keyed by window end: the auctions with the most bids in the window, emitted when the
    watermark passes its end (the upstream window emitted all its counts by then)."""

    def open(self, ctx):
        self.best = ctx.value_state("best", None)  # [num, [auctions]]

    def process_element(self, record, ctx):
        best = self.best.value()
        num = record["num"]
        if best is None or num > best[0]:
            if best is None:
                ctx.timer_service.register_event_time_timer(ctx.current_key - 1)
            self.best.update([num, [record["auction"]]])
        elif num == best[0]:
            self.best.update([num, [*best[1], record["auction"]]])

    def on_timer(self, timestamp, ctx):
        best = self.best.value()
        self.best.clear()
        if best is not None:
            return [{"auction": a, "num": best[0], "window_end": timestamp + 1} for a in best[1]]
        return None


def q5(events, p):
    return (events.map_batches(lambda b: bids(b).select(["auction", "date_time"]),
                               name="q5: bids")
            .key_by("auction").window(SlidingWindows(10_000, 2_000))
            .aggregate(uid="q5-count", parallelism=p, num="count")
            .map_batches(_window_end_ms, name="q5: window end")
            .key_by("window_end").process(MaxPerWindow(), uid="q5-max", parallelism=p))


# -- q7: highest bid per 10 s window, without a join ---------------------------------------
def _q7_local_max(batch):
    """A combiner: per batch, only the bids at their window's maximum price in this batch
    can be at the window's maximum overall (ties kept). Cuts the stream to a few rows."""
    b = bids_ms(batch).select(["auction", "bidder", "price", "date_time", "extra"])
    if b.num_rows == 0:
        return b.append_column("w", pa.array([], pa.int64()))
    w = b.column("date_time").to_numpy() // 10_000
    price = b.column("price").to_numpy()
    order = np.lexsort((-price, w))
    ws, first = np.unique(w[order], return_index=True)
    top = np.repeat(price[order][first], np.diff(np.append(first, len(order))))
    keep = order[price[order] == top]
    return b.take(pa.array(np.sort(keep))).append_column("w", pa.array(w[np.sort(keep)]))


def _q7_reduce(a, b):
    ta, tb = a.get("ties") or [_bid7(a)], b.get("ties") or [_bid7(b)]
    if ta[0]["price"] != tb[0]["price"]:
        top = ta if ta[0]["price"] > tb[0]["price"] else tb
    else:
        top = ta + tb
    return {"w": a["w"], "price": top[0]["price"], "date_time": a["date_time"], "ties": top}


def _bid7(r):
    return {k: r[k] for k in ("auction", "bidder", "price", "date_time", "extra")}


def q7(events, p):
    # one key per window (all its bids meet at one subtask), after the vectorized combiner
    return (events.map_batches(_q7_local_max, name="q7: local max")
            .key_by("w").window(TumblingWindows(10_000))
            .reduce(_q7_reduce, uid="q7-max", parallelism=p)
            .flat_map(lambda r: [{**t, "window_end": r["window_end"]}
                                 for t in (r.get("ties") or [_bid7(r)])], name="q7: ties"))


# -- q11: user sessions -----------------------------------------------------------------
def _q11_bids(batch):
    return bids_ms(batch).select(["bidder", "date_time"])


def q11(events, p):
    # session windows merged a batch at a time (vectorized window aggregate)
    return (events.map_batches(_q11_bids, name="q11: bids")
            .key_by("bidder").window(SessionWindows(10_000))
            .aggregate(uid="q11-sessions", parallelism=p, bid_count="count"))


# -- q12: processing-time windows -------------------------------------------------------
def _q12_key(batch):
    import time

    b = bids(batch)
    window = int(time.time() * 1000) // 10_000
    key = pc.add(pc.shift_left(b.column("bidder"), 28), window & ((1 << 28) - 1))
    return pa.RecordBatch.from_arrays([key], names=["k"])


def _q12_out(batch):
    k = batch.column("k").to_numpy()
    start = (k & ((1 << 28) - 1)) * 10_000
    return pa.RecordBatch.from_arrays(
        [pa.array(k >> 28), batch.column("bid_count"), pa.array(start), pa.array(start + 10_000)],
        names=["bidder", "bid_count", "starttime", "endtime"])


def q12(events, p):
    # the processing-time window is part of the key; ttl drops a window's counts 20 s on
    return (events.map_batches(_q12_key, name="q12: proc-time window")
            .key_by("k").aggregate(uid="q12-count", parallelism=p, ttl=20_000,
                                   bid_count="count")
            .map_batches(_q12_out, name="q12: out"))


# -- q15, q16: distinct counts per day (and channel), vectorized --------------------------
def _day_names(days: np.ndarray) -> pa.Array:
    """Day numbers (since the epoch) as ``yyyy-MM-dd`` (formatted once per distinct day)."""
    uniq, inv = np.unique(days, return_inverse=True)
    names = pc.strftime(pa.array(uniq * DAY_MS, pa.timestamp("ms")), format="%Y-%m-%d")
    return names.take(pa.array(inv.ravel()))


def _distinct_in(batch, key: pa.Array) -> pa.RecordBatch:
    """Per bid: the key, a 0/1 column per price rank (``count(*) FILTER``) and bidder and
    auction nulled outside each rank (``count(DISTINCT ...) FILTER``)."""
    price = batch.column("price").to_numpy()
    rank = _rank(price)
    cols, names = [key], ["key"]
    for r in (1, 2, 3):
        cols.append(pa.array((rank == r).astype(np.int64)))
        names.append(f"r{r}")
    for who in ("bidder", "auction"):
        values = batch.column(who)
        cols.append(values)
        names.append(who)
        for r in (1, 2, 3):
            cols.append(pa.array(values.to_numpy(), mask=rank != r))
            names.append(f"{who}_r{r}")
    return pa.RecordBatch.from_arrays(cols, names=names)


_DISTINCT_AGGS = {"total_bids": "count",
                  **{f"rank{r}_bids": ("sum", f"r{r}") for r in (1, 2, 3)},
                  "total_bidders": ("count_distinct", "bidder"),
                  **{f"rank{r}_bidders": ("count_distinct", f"bidder_r{r}") for r in (1, 2, 3)},
                  "total_auctions": ("count_distinct", "auction"),
                  **{f"rank{r}_auctions": ("count_distinct", f"auction_r{r}") for r in (1, 2, 3)}}


def _q15_in(batch):
    b = bids(batch)
    return _distinct_in(b, pa.array(_ms(b.column("date_time")) // DAY_MS))


def _q15_out(batch):
    return batch.set_column(0, "key", _day_names(batch.column("key").to_numpy()))


def q15(events, p):
    # count(DISTINCT ...) per day: aggregate()'s vectorized count_distinct (the key is the
    # day number, named on output)
    return (events.map_batches(_q15_in, name="q15: day")
            .key_by("key").aggregate(uid="q15-distinct", parallelism=p, **_DISTINCT_AGGS)
            .map_batches(_q15_out, name="q15: out"))


def _q16_in(batch):
    b = bids(batch)
    t = _ms(b.column("date_time"))
    key = pc.binary_join_element_wise(b.column("channel"), _day_names(t // DAY_MS), "|")
    out = _distinct_in(b, key)
    return out.append_column("minute", pa.array((t % DAY_MS) // 60_000))


def _q16_out(batch):
    m = batch.column("minute").to_numpy()
    hhmm = pc.binary_join_element_wise(
        pc.utf8_lpad(pc.cast(pa.array(m // 60), pa.string()), 2, "0"),
        pc.utf8_lpad(pc.cast(pa.array(m % 60), pa.string()), 2, "0"), ":")
    return batch.set_column(batch.schema.get_field_index("minute"), "minute", hhmm)


def q16(events, p):
    return (events.map_batches(_q16_in, name="q16: channel and day")
            .key_by("key").aggregate(uid="q16-distinct", parallelism=p,
                                     minute=("max", "minute"), **_DISTINCT_AGGS)
            .map_batches(_q16_out, name="q16: out"))


# -- q17: per auction and day, vectorized ---------------------------------------------------
def _q17_in(batch):
    b = bids(batch)
    price = b.column("price").to_numpy()
    day = _ms(b.column("date_time")) // DAY_MS
    rank = _rank(price)
    cols = [pa.array(b.column("auction").to_numpy() * 100_000 + day), b.column("price")]
    cols += [pa.array((rank == r).astype(np.int64)) for r in (1, 2, 3)]
    return pa.RecordBatch.from_arrays(cols, names=["k", "price", "r1", "r2", "r3"])


def _q17_out(batch):
    k = batch.column("k").to_numpy()
    day = pc.strftime(pa.array((k % 100_000) * DAY_MS, pa.timestamp("ms")), format="%Y-%m-%d")
    rest = batch.drop_columns(["k"])
    return pa.RecordBatch.from_arrays([pa.array(k // 100_000), day, *rest.columns],
                                      names=["auction", "day", *rest.schema.names])


def q17(events, p):
    return (events.map_batches(_q17_in, name="q17: auction and day")
            .key_by("k").aggregate(uid="q17-agg", parallelism=p, total_bids="count",
                                   rank1_bids=("sum", "r1"), rank2_bids=("sum", "r2"),
                                   rank3_bids=("sum", "r3"), min_price=("min", "price"),
                                   max_price=("max", "price"), avg_price=("mean", "price"),
                                   sum_price=("sum", "price"))
            .map_batches(_q17_out, name="q17: out"))


# -- q18: the last bid per (bidder, auction); q19: top 10 bids per auction -----------------
def _q18_in(batch):
    b = bids_ms(batch)
    k = pc.add(pc.shift_left(b.column("bidder"), 31), b.column("auction"))
    return b.append_column("k", k)


def _latest(a, b):
    return b if b["date_time"] >= a["date_time"] else a


def q18(events, p):
    return (events.map_batches(_q18_in, name="q18: key")
            .key_by("k").reduce(_latest, uid="q18-latest", parallelism=p))


def q19(events, p):
    # ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) <= 10: the vectorized
    # top_n (ties: the earlier bid first), an upsert stream keyed by (auction, rank_number)
    return (events.map_batches(bids_ms, name="q19: bids")
            .key_by("auction").top_n(10, by="price", uid="q19-top10", parallelism=p))


_ALL = list(BID_COLUMNS)
_URL = ["auction", "bidder", "price", "channel", "url"]
#: the event columns each query reads (FileSource(columns=...): projection pushdown);
#: every query keeps event_type (the bid filter) and date_time (event time, watermarks)
COLUMNS: dict[str, list[str]] = {q: ["event_type", "date_time", *(c for c in cols
                                                                  if c != "date_time")]
                                 for q, cols in {
    "q0": _ALL, "q1": _CALC, "q2": ["auction", "price"], "q5": ["auction"], "q7": _CALC,
    "q10": _CALC,
    "q11": ["bidder"], "q12": ["bidder"], "q14": _CALC,
    "q15": ["bidder", "auction", "price"], "q16": ["channel", "bidder", "auction", "price"],
    "q17": ["auction", "price"], "q18": _ALL, "q19": _ALL, "q21": _URL, "q22": _URL}.items()}
COLUMNS.update(JOIN_COLUMNS)
COLUMNS.update({f"{q}-rows": COLUMNS[q] for q in ("q3", "q4", "q6", "q9", "q13", "q18", "q19",
                                                  "q20")})
COLUMNS["q13-map"] = COLUMNS["q13"]

QUERIES: dict[str, Callable] = {
    "q0": q0, "q1": q1, "q2": q2, "q5": q5, "q7": q7, "q10": q10, "q11": q11, "q12": q12,
    "q14": q14, "q15": q15, "q16": q16, "q17": q17, "q18": q18, "q19": q19, "q21": q21, "q22": q22,
    **JOIN_QUERIES, **VECTOR_QUERIES,
}
#: the per-record versions of the queries VECTOR_QUERIES replaced (``q4-rows``, ...)
ROW_QUERIES = {**ROW_QUERIES, "q18-rows": q18}

#: how each query runs: vectorized (Arrow batches end to end) or per record in Python
PER_RECORD = {"q5": "the max per window (stage 2, after a vectorized sliding count)",
              "q7": "the reduce per window (after a vectorized per-batch combiner)",
              **{q: d for q, d in JOIN_PER_RECORD.items() if q not in VECTOR_QUERIES},
              **VECTOR_NOTES}

#: the queries whose output is the point (not discarded in the benchmark): FileSink options
#: (run.py writes them under a temporary directory per run; the tests read them back)
SINK_OPTIONS: dict[str, dict] = {"q10": {"partition_by": ["dt", "hm"]}}

MISSING: dict[str, str] = {}
