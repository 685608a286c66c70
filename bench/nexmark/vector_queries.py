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
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from airflow_checkpoint_provider.engine.vectorized_ops import (
    latest_by_key,
    max_by_join,
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


VECTOR_QUERIES: dict[str, Callable] = {"q3": q3, "q4": q4, "q6": q6, "q9": q9, "q18": q18,
                                       "q20": q20}
#: the per-record versions, by ``<query>-rows`` (run.py and the tests run them by that name)
ROW_QUERIES: dict[str, Callable] = {f"{q}-rows": f for q, f in {
    "q3": jq.q3, "q4": jq.q4, "q6": jq.q6, "q9": jq.q9, "q20": jq.q20}.items()}
#: how the queries above run now (queries.PER_RECORD keeps what is still per record)
VECTOR_NOTES = {"q6": "last 10 per seller (per closed auction, after the vectorized "
                      "winning bid)"}
