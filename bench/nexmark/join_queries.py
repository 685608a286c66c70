"""The Nexmark join queries in our API: q3, q4, q6, q8, q9, q13, q20.

Semantics are nexmark-flink's SQL (``queries/q*.sql``) except where said at the query. The
joins are per record (Python), apart from q13 (a bounded side input, a vectorized lookup)
and q8 (a vectorized window join). Rows that wait in state (bids before their auction,
closes before the watermark) are appended to a list state: an append, not a rewrite of
the list (which made long lists quadratic, on RocksDB a decode and encode of it per row).

* q3, q20 are Flink's unbounded regular joins, written as a :class:`KeyedCoProcessFunction`
  keyed by the join key: the side that occurs once per key (the person, the auction) stays in
  keyed state; rows of the other side that come before it wait in state and leave it when
  it comes (an id occurs once, so nothing else can match them). Flink keeps both sides.
* q4, q6, q9 share :class:`WinningBid` (``auction JOIN bid ON id = auction AND bid.dateTime
  BETWEEN auction.dateTime AND auction.expires``, the highest price, earlier bid on ties):
  ours emits each auction's winning bid once, when the watermark passes its expiry (the
  original Nexmark's "closed auction"), and then drops the auction's bids; Flink's SQL emits
  an update per new maximum and keeps the state. Both end at the same result.
* q6 is not run by Flink (its SQL is an OVER window over an updating input, which Flink
  rejects); ours follows the original Nexmark: per seller, the average winning price of its
  last 10 closed auctions, one row per close, in (expires, auction id) order.
* q8 is a tumbling window join (10 s) of persons and auctions on ``id = seller``, one row
  per person and window with at least one auction (the SQL's GROUP BYs before the join):
  the vectorized window join, then a distinct per output batch (:func:`_q8_new_users`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_checkpoint_provider.engine import (
    EntryMapStateDescriptor,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessJoinFunction,
    TumblingWindows,
)

from .generator import AUCTION, BID, PERSON

PERSON_COLUMNS = {"person_id": "id", "person_name": "name", "person_city": "city",
                  "person_state": "state", "date_time": "date_time"}
AUCTION_COLUMNS = {"auction_id": "id", "auction_item_name": "item_name",
                   "auction_description": "description", "auction_initial_bid": "initial_bid",
                   "auction_reserve": "reserve", "date_time": "date_time",
                   "auction_expires": "expires", "auction_seller": "seller",
                   "auction_category": "category", "extra": "extra"}
BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")
Q3_STATES = ("OR", "ID", "CA")
SIDE_INPUT_ROWS = 10_000


def _view(batch: pa.RecordBatch, kind: int, columns) -> pa.RecordBatch:
    """The rows of event type ``kind`` with ``columns`` (renamed; those the source read: see
    :data:`JOIN_COLUMNS`), times as epoch ms."""
    read = set(batch.schema.names)
    if not isinstance(columns, dict):
        columns = {c: c for c in columns}
    names = [n for n in columns if n in read]
    new = [columns[n] for n in names]
    b = batch.select(["event_type", *names]).filter(pc.equal(batch.column("event_type"), kind))
    arrays = [b.column(n) for n in names]
    arrays = [pc.cast(a, pa.int64()) if pa.types.is_timestamp(a.type) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, names=new)


def persons(batch):
    return _view(batch, PERSON, PERSON_COLUMNS)


def auctions(batch):
    return _view(batch, AUCTION, AUCTION_COLUMNS)


def bids(batch):
    return _view(batch, BID, BID_COLUMNS)


# -- q3: local item suggestion --------------------------------------------------------------
def _q3_auctions(batch):
    a = auctions(batch)
    return a.filter(pc.equal(a.column("category"), 10)).select(["id", "seller", "date_time"])


def _q3_persons(batch):
    p = persons(batch)
    # every person goes on (those of other states as a marker): an auction of theirs that
    # came first must leave the state when they come
    return p.set_column(3, "state", pc.if_else(pc.is_in(p.column("state"), pa.array(Q3_STATES)),
                                               p.column("state"), pa.scalar(None, pa.string())))


class Q3Join(KeyedCoProcessFunction):
    """Keyed by seller / person id: 1 = auctions of category 10, 2 = persons."""

    def open(self, ctx):
        self.person = ctx.value_state("person", None)  # [name, city, state] or 0
        self.waiting = ctx.list_state("waiting")  # auction ids before their seller

    def process_element1(self, a, ctx):
        p = self.person.value()
        if p is None:
            self.waiting.add(a["id"])
            return None
        if not p:
            return None
        return {"name": p[0], "city": p[1], "state": p[2], "id": a["id"]}

    def process_element2(self, p, ctx):
        keep = p["state"] is not None
        self.person.update([p["name"], p["city"], p["state"]] if keep else 0)
        waiting = self.waiting.get()
        if not waiting:
            return None
        self.waiting.clear()
        if not keep:
            return None
        return [{"name": p["name"], "city": p["city"], "state": p["state"], "id": i}
                for i in waiting]


def q3(events, p):
    return (events.map_batches(_q3_auctions, name="q3: auctions of category 10")
            .connect(events.map_batches(_q3_persons, name="q3: persons"))
            .key_by("seller", "id").process(Q3Join(), uid="q3-join", parallelism=p))


# -- q20: expand bid with auction -----------------------------------------------------------
AUCTION_OUT = ("item_name", "description", "initial_bid", "reserve", "auction_date_time",
               "expires", "seller", "category", "auction_extra")


class Q20Join(KeyedCoProcessFunction):
    """Keyed by auction id: 1 = bids, 2 = auctions. An auction of category 10 stays in state
    with its columns, any other as a marker (its bids then match nothing)."""

    def open(self, ctx):
        self.auction = ctx.value_state("auction", None)
        # bids before their auction: an entry each, keyed by arrival (as WinningBid's early)
        self.waiting = ctx.get_state(EntryMapStateDescriptor("waiting"))
        self._arrival = (time.time_ns(), 0)

    def process_element1(self, b, ctx):
        a = self.auction.value()
        if a is None:
            epoch, n = self._arrival
            self._arrival = (epoch, n + 1)
            self.waiting.put((epoch, n), b)
            return None
        return {**b, **dict(zip(AUCTION_OUT, a, strict=True))} if a else None

    def process_element2(self, a, ctx):
        if a["category"] != 10:
            self.auction.update(0)
            self.waiting.clear()
            return None
        row = [a["item_name"], a["description"], a["initial_bid"], a["reserve"],
               a["date_time"], a["expires"], a["seller"], a["category"], a["extra"]]
        self.auction.update(row)
        waiting = self.waiting.items()
        if not waiting:
            return None
        self.waiting.clear()
        return [{**b, **dict(zip(AUCTION_OUT, row, strict=True))} for _, b in sorted(waiting)]


def q20(events, p):
    return (events.map_batches(bids, name="q20: bids")
            .connect(events.map_batches(auctions, name="q20: auctions"))
            .key_by("auction", "id").process(Q20Join(), uid="q20-join", parallelism=p))


# -- q4, q6, q9: the winning bid of each auction ---------------------------------------------
WIN_AUCTION = ("id", "item_name", "description", "initial_bid", "reserve", "date_time",
               "expires", "seller", "category", "extra")


def _win_bids(batch):
    return bids(batch).select(["auction", "bidder", "price", "date_time", "extra"])


class WinningBid(KeyedCoProcessFunction):
    """Keyed by auction id: 1 = auctions, 2 = bids. The highest bid (earliest on ties) with
    ``auction.date_time <= bid.date_time <= auction.expires``, emitted when the watermark
    passes ``expires`` (auction columns, then ``bidder, price, bid_date_time, bid_extra``)."""

    def open(self, ctx):
        self.auction = ctx.value_state("auction", None)  # WIN_AUCTION values; 0 once closed
        self.best = ctx.value_state("best", None)  # [price, date_time, bidder, extra]
        # bids before their auction, one entry each (RocksDB: a row per bid, not a list
        # rewritten per bid: most bids of a batch come before the auctions of that batch,
        # up to ~800 for a hot auction); keyed by (attempt, arrival) to keep their order
        self.early = ctx.get_state(EntryMapStateDescriptor("early"))
        self._arrival = (time.time_ns(), 0)

    @staticmethod
    def _better(bid, best) -> bool:
        return best is None or bid[0] > best[0] or (bid[0] == best[0] and bid[1] < best[1])

    def process_element1(self, a, ctx):
        row = [a[c] for c in WIN_AUCTION]
        self.auction.update(row)
        ctx.timer_service.register_event_time_timer(a["expires"])
        early = self.early.items()
        if early:
            self.early.clear()
            best = None
            for _, b in sorted(early):  # in arrival order: the first of equal bids wins
                if a["date_time"] <= b[1] <= a["expires"] and self._better(b, best):
                    best = b
            if best is not None:
                self.best.update(best)

    def process_element2(self, b, ctx):
        a = self.auction.value()
        bid = [b["price"], b["date_time"], b["bidder"], b["extra"]]
        if a is None:  # its auction is still to come: wait until the watermark passes it
            epoch, n = self._arrival
            self._arrival = (epoch, n + 1)
            self.early.put((epoch, n), bid)
            ctx.timer_service.register_event_time_timer(b["date_time"] + 1)
        elif a and a[5] <= bid[1] <= a[6] and self._better(bid, self.best.value()):
            self.best.update(bid)

    def on_timer(self, timestamp, ctx):
        a = self.auction.value()
        if a is None:  # early bids whose auction never came in time (once it came: none)
            for k, b in list(self.early.items()):
                if b[1] + 1 <= timestamp:
                    self.early.remove(k)
            return None
        if not a or a[6] != timestamp:
            return None
        best = self.best.value()
        self.auction.update(0)  # closed: later bids match nothing
        self.best.clear()
        if best is None:
            return None
        return {**dict(zip(WIN_AUCTION, a, strict=True)), "auction": a[0], "bidder": best[2],
                "price": best[0], "bid_date_time": best[1], "bid_extra": best[3]}


def winning_bids(events, p, uid: str):
    return (events.map_batches(auctions, name=f"{uid}: auctions")
            .connect(events.map_batches(_win_bids, name=f"{uid}: bids"))
            .key_by("id", "auction").process(WinningBid(), uid=uid, parallelism=p))


def q9(events, p):
    return winning_bids(events, p, "q9-winning")


def _q4_final(batch):
    return pa.RecordBatch.from_arrays([batch.column("category"), batch.column("price")],
                                      names=["category", "final"])


def q4(events, p):
    return (winning_bids(events, p, "q4-winning")
            .map_batches(_q4_final, name="q4: final prices")
            .key_by("category").aggregate(uid="q4-avg", parallelism=p, avg=("mean", "final")))


class LastTenAverage(KeyedProcessFunction):
    """Keyed by seller: on each closed auction, the average winning price of the seller's
    last 10. Closes wait for the watermark to pass their expiry so that they are taken in
    (expires, auction id) order whatever subtask closed them."""

    def open(self, ctx):
        self.pending = ctx.list_state("pending")
        self.last = ctx.value_state("last", None)

    def process_element(self, r, ctx):
        self.pending.add([r["expires"], r["id"], r["price"]])
        ctx.timer_service.register_event_time_timer(r["expires"])

    def on_timer(self, timestamp, ctx):
        pending = sorted(self.pending.get())
        due = [c for c in pending if c[0] <= timestamp]
        self.pending.update(pending[len(due):])
        last = list(self.last.value() or ())
        out = []
        for expires, auction, price in due:
            last = [*last, price][-10:]
            out.append({"seller": ctx.current_key, "auction": auction, "expires": expires,
                        "avg": sum(last) / len(last)})
        self.last.update(last)
        return out


def q6(events, p):
    return (winning_bids(events, p, "q6-winning")
            .key_by("seller").process(LastTenAverage(), uid="q6-avg", parallelism=p))


# -- q8: monitor new users ------------------------------------------------------------------
def _q8_new_users(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One row per person and window of the vectorized window join's pairs (a pair per
    auction). A (key, window) fires once, all its pairs in one output batch, so a distinct
    per batch is exact (nothing to keep across batches); first occurrences, in order."""
    ids = batch.column("id").to_numpy(zero_copy_only=False)
    starts = batch.column("window_start").to_numpy(zero_copy_only=False)
    order = np.lexsort((starts, ids))  # stable: a group's first row is its first occurrence
    first = np.ones(len(order), dtype=bool)
    first[1:] = (ids[order][1:] != ids[order][:-1]) | (starts[order][1:] != starts[order][:-1])
    keep = pa.array(np.sort(order[first]))
    return pa.RecordBatch.from_arrays(
        [batch.column("id").take(keep), batch.column("name").take(keep),
         batch.column("window_start").take(keep)], names=["id", "name", "starttime"])


def q8(events, p):
    return (events.map_batches(lambda b: persons(b).select(["id", "name", "date_time"]),
                               name="q8: persons")
            .join(events.map_batches(lambda b: auctions(b).select(["seller", "date_time"]),
                                     name="q8: auctions"))
            .where("id").equal_to("seller").window(TumblingWindows(10_000))
            .apply(uid="q8-join", parallelism=p, vectorized=True)
            .map_batches(_q8_new_users, name="q8: one row per person and window"))


class NewUser(ProcessJoinFunction):
    """One row per person and window (the window join emits a pair per auction). The join
    emits all pairs of one key and window one after the other, in one firing, so the last
    (key, window) seen is enough to drop the repeats (nothing to keep across firings)."""

    def open(self, ctx):
        self.last = None

    def process_element(self, person, auction, ctx):
        mark = (ctx.current_key, ctx.timestamp)
        if mark == self.last:
            return None
        self.last = mark
        return {"id": person["id"], "name": person["name"],
                "starttime": ctx.timestamp + 1 - 10_000}


def q8_rows(events, p):
    """q8 on the per-record window join (the vectorized :func:`q8` is checked against it)."""
    return (events.map_batches(lambda b: persons(b).select(["id", "name", "date_time"]),
                               name="q8: persons")
            .join(events.map_batches(lambda b: auctions(b).select(["seller", "date_time"]),
                                     name="q8: auctions"))
            .where("id").equal_to("seller").window(TumblingWindows(10_000))
            .apply(NewUser(), uid="q8-join-rows", parallelism=p))


# -- q13: bounded side input join -------------------------------------------------------------
@functools.cache
def side_values() -> pa.Array:
    """Nexmark's side input values ``str(key)`` by key. Built on first use, from an int
    array: ``pa.array`` of a Python list at import made pyarrow import pandas (its first
    conversion of Python objects does) in every process importing this module."""
    return pc.cast(pa.array(np.arange(SIDE_INPUT_ROWS)), pa.string())


def _q13(batch):
    b = bids(batch)
    key = b.column("auction").to_numpy() % SIDE_INPUT_ROWS
    return pa.RecordBatch.from_arrays(
        [b.column("auction"), b.column("bidder"), b.column("price"), b.column("date_time"),
         side_values().take(pa.array(key.astype(np.int64)))],
        names=["auction", "bidder", "price", "date_time", "value"])


def q13(events, p):
    # the side input (key i -> str(i), 10,000 rows, as nexmark's side_input file) is bounded
    # and static: held by every subtask, joined per batch by array index
    return events.map_batches(_q13, name="q13: side input join")


_PERSON = ["person_id", "person_name", "person_city", "person_state"]
_AUCTION = [c for c in AUCTION_COLUMNS if c not in ("date_time", "extra")]
#: the event columns each join query reads (``FileSource(columns=...)``; merged into
#: ``queries.COLUMNS``): the views take those the source read
JOIN_COLUMNS: dict[str, list[str]] = {q: ["event_type", "date_time", *cols] for q, cols in {
    "q3": [*_PERSON, "auction_id", "auction_seller", "auction_category"],
    "q4": [*_AUCTION, "extra", "auction", "bidder", "price"],
    "q6": [*_AUCTION, "extra", "auction", "bidder", "price"],
    "q8": ["person_id", "person_name", "auction_seller"],
    "q9": [*_AUCTION, "extra", "auction", "bidder", "price"],
    "q13": ["auction", "bidder", "price"],
    "q20": [*_AUCTION, "extra", "auction", "bidder", "price", "channel", "url"]}.items()}

JOIN_QUERIES: dict[str, Callable] = {"q3": q3, "q4": q4, "q6": q6, "q8": q8, "q9": q9,
                                     "q13": q13, "q20": q20}
JOIN_PER_RECORD = {
    "q3": "join (co-process, after vectorized filters)",
    "q4": "winning bid (co-process per bid), then a vectorized average",
    "q6": "winning bid (co-process per bid), then last 10 per seller",
    "q9": "winning bid (co-process per bid)",
    "q20": "join (co-process per bid)",
}
