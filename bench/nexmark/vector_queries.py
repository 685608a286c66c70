"""The Nexmark queries that ran per record, on the vectorized operators of
:mod:`airflow_checkpoint_provider.engine.vectorized_ops` (issue 39): q3, q4, q6, q9, q18,
q20. Same output rows as the per-record versions (kept in :data:`ROW_QUERIES` as
``<query>-rows``: the tests and the before/after runs compare the two).

* q4, q6, q9: :func:`max_by_join` (auctions by id, bids by auction: the highest price in
  ``[auction.date_time, auction.expires]``, earlier bid on ties, emitted when the watermark
  passes ``expires``), as the per-record ``WinningBid``. q6's last-10 average per seller
  stays per record (one call per closed auction, about 6% of the events).
* q3, q20: :func:`unique_key_join` (a person, an auction occurs once per id): every person /
  auction is kept, as the per-record joins keep a marker for those the query filters out,
  and the filter (state, category) runs on the joined rows.
* q18: :func:`latest_by_key` by ``date_time`` (ties: the later bid), an upsert stream by
  (bidder, auction) that emits a key's row when it changes (the per-record ``reduce``
  emitted one row per bid; the last row per key is the same).
* q13: :func:`temporal_table_join` of the bids (key ``auction % 10,000``) with the side
  input, nexmark's bounded table ``key -> str(key)`` read by its own source without event
  time (a static table: the bids wait until it was read, then join per watermark); the
  per-record ``q13-rows`` is the same join on ``temporal_join().process()``, and ``q13-map``
  the array lookup that ran before (valid only because this side input is a function of
  its key: no state, no table).
* q19: ``top_n`` (vectorized since issue 27); ``q19-rows`` is the per-record top 10 it
  replaced (:class:`TopN`, a list in a value state), kept for the before/after figures.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from airflow_checkpoint_provider.engine import GeneratorSource, KeyedProcessFunction
from airflow_checkpoint_provider.engine.vectorized_ops import (
    latest_by_key,
    max_by_join,
    temporal_table_join,
    unique_key_join,
)

from . import join_queries as jq

WIN_RIGHT = {"auction": "auction", "bidder": "bidder", "price": "price",
             "date_time": "bid_date_time", "extra": "bid_extra"}


def winning_bids(events, p, uid: str):
    return max_by_join(events.map_batches(jq.auctions, name=f"{uid}: auctions").key_by("id"),
                       events.map_batches(jq._win_bids, name=f"{uid}: bids").key_by("auction"),
                       uid=uid, start="date_time", end="expires", right_time="date_time",
                       by="price", right_columns=WIN_RIGHT, parallelism=p)


def q4(events, p):
    return (winning_bids(events, p, "q4-winning")
            .map_batches(jq._q4_final, name="q4: final prices")
            .key_by("category").aggregate(uid="q4-avg", parallelism=p, avg=("mean", "final")))


def q6(events, p):
    return (winning_bids(events, p, "q6-winning")
            .key_by("seller").process(jq.LastTenAverage(), uid="q6-avg", parallelism=p))


def q9(events, p):
    return winning_bids(events, p, "q9-winning")


# -- q20 ------------------------------------------------------------------------------------
_Q20_TABLE = {"id": "id", "item_name": "item_name", "description": "description",
              "initial_bid": "initial_bid", "reserve": "reserve",
              "date_time": "auction_date_time", "expires": "expires", "seller": "seller",
              "category": "category", "extra": "auction_extra"}


def _q20_auctions(batch):
    a = jq.auctions(batch)
    names = [n for n in _Q20_TABLE if n in a.schema.names]
    return pa.RecordBatch.from_arrays([a.column(n) for n in names],
                                      names=[_Q20_TABLE[n] for n in names])


def _q20_out(batch):
    b = batch.filter(pc.equal(batch.column("category"), 10))
    return b.drop_columns(["id"]) if "id" in b.schema.names else b


def q20(events, p):
    return (unique_key_join(events.map_batches(jq.bids, name="q20: bids").key_by("auction"),
                            events.map_batches(_q20_auctions, name="q20: auctions").key_by("id"),
                            uid="q20-join", parallelism=p)
            .map_batches(_q20_out, name="q20: category 10"))


# -- q3 -------------------------------------------------------------------------------------
def _q3_persons(batch):
    return jq.persons(batch).select(["id", "name", "city", "state"])


def _q3_out(batch):
    b = batch.filter(pc.is_in(batch.column("state"), pa.array(jq.Q3_STATES)))
    return b.select(["name", "city", "state", "id"])


def q3(events, p):
    return (unique_key_join(
        events.map_batches(jq._q3_auctions, name="q3: auctions of category 10").key_by("seller"),
        events.map_batches(_q3_persons, name="q3: persons").key_by("id"),
        uid="q3-join", parallelism=p)
            .map_batches(_q3_out, name="q3: persons of OR, ID, CA"))


# -- q18 ------------------------------------------------------------------------------------
def _q18_in(batch):
    b = jq.bids(batch)
    k = pc.add(pc.shift_left(b.column("bidder"), 31), b.column("auction"))
    return b.append_column("k", k)


def q18(events, p):
    return latest_by_key(events.map_batches(_q18_in, name="q18: key").key_by("k"),
                         by="date_time", uid="q18-latest", parallelism=p)


# -- q13 ------------------------------------------------------------------------------------
def _q13_side(batch):
    """GeneratorSource rows ``id`` -> nexmark's side input row ``(key, str(key))``."""
    ids = batch.column("id")
    return pa.RecordBatch.from_arrays([ids, pc.cast(ids, pa.string())], names=["key", "value"])


def _q13_bids(batch):
    b = jq.bids(batch).select(["auction", "bidder", "price", "date_time"])
    return b.append_column("key", pc.cast(
        b.column("auction").to_numpy(zero_copy_only=False) % jq.SIDE_INPUT_ROWS, pa.int64()))


def _q13_out(batch):
    return batch.drop_columns(["key"])


def side_input(events, uid: str):
    """Nexmark's side input as a bounded source without event time (a static table)."""
    return (events._p.source(GeneratorSource(jq.SIDE_INPUT_ROWS, arrow=True, int_keys=True,
                                             splits=1), uid=f"{uid}-side", parallelism=1)
            .map_batches(_q13_side, name=f"{uid}: side input"))


def q13(events, p):
    return (temporal_table_join(events.map_batches(_q13_bids, name="q13: bids").key_by("key"),
                                side_input(events, "q13").key_by("key"), uid="q13-join",
                                parallelism=p)
            .map_batches(_q13_out, name="q13: out"))


def q13_rows(events, p):
    return (events.map_batches(_q13_bids, name="q13: bids").key_by("key")
            .temporal_join(side_input(events, "q13-rows").key_by("key"))
            .process(lambda b, s: {"auction": b["auction"], "bidder": b["bidder"],
                                   "price": b["price"], "date_time": b["date_time"],
                                   "value": s["value"]}, uid="q13-join-rows", parallelism=p))


# -- q19 ------------------------------------------------------------------------------------
class TopN(KeyedProcessFunction):
    """Per auction, the ``n`` highest bids (price descending, earlier first on ties); emits
    the rows whose rank changed when a bid enters (rank_number 1..n). The per-record top-N
    that ``top_n`` replaced (commit 5bbfe0f)."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def open(self, ctx):
        self.top = ctx.value_state("top", None)

    def process_element(self, r, ctx):
        top = self.top.value() or []
        price = r["price"]
        i = len(top)
        while i > 0 and top[i - 1]["price"] < price:
            i -= 1
        if i >= self.n:
            return None
        top = [*top[:i], r, *top[i:]][: self.n]
        self.top.update(top)
        return [{**row, "rank_number": j + 1} for j, row in enumerate(top) if j >= i]


def q19_rows(events, p):
    return (events.map_batches(jq.bids, name="q19: bids")
            .key_by("auction").process(TopN(10), uid="q19-top10-rows", parallelism=p))


VECTOR_QUERIES: dict[str, Callable] = {"q3": q3, "q4": q4, "q6": q6, "q9": q9, "q13": q13,
                                       "q18": q18, "q20": q20}
#: the per-record versions, by ``<query>-rows`` (run.py and the tests run them by that name)
ROW_QUERIES: dict[str, Callable] = {f"{q}-rows": f for q, f in {
    "q3": jq.q3, "q4": jq.q4, "q6": jq.q6, "q9": jq.q9, "q13": q13_rows, "q19": q19_rows,
    "q20": jq.q20}.items()}
#: q13 before the temporal table join: a stateless array lookup (see the module's text)
ROW_QUERIES["q13-map"] = jq.q13
#: how the queries above run now (queries.PER_RECORD keeps what is still per record)
VECTOR_NOTES = {"q6": "last 10 per seller (per closed auction, after the vectorized "
                      "winning bid)"}
