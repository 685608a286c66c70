"""A deterministic Nexmark event generator, vectorized, emitting Arrow batches.

The model follows the Nexmark specification as the Apache Beam and nexmark-flink generators
define it (written here from that description, not translated from their code):

* events are numbered ``0, 1, 2, ...``; of every 50 consecutive event ids, 1 is a Person,
  3 are Auctions and 46 are Bids (``id % 50``: ``0`` person, ``1..3`` auction, else bid);
* person ids and auction ids start at 1000 and grow with the event id (the "last" person
  or auction created before an event is a pure function of its id);
* a bid goes to a *hot* auction with probability 1/2 (``hot_auction_ratio`` 2: the last
  auction id rounded down to a multiple of 100), else to one of the ~100 auctions in flight
  (or up to 10 not created yet); its bidder is a hot bidder with probability 3/4
  (``hot_bidders_ratio`` 4), else one of the 1,000 most recent people (+10 ahead); an
  auction's seller is hot with probability 3/4 likewise;
* prices are ``round(10 ** (6 u) * 100)`` cents for ``u`` uniform in [0, 1); half of the
  bids come from 4 hot channels (Google, Facebook, Baidu, Apple), the rest from
  ``channel-0`` .. ``channel-9999`` with a fixed URL each (9 in 10 carry
  ``&channel_id=...``);
* event time: event ``n`` happens at ``base_time_ms + floor(n * 1e6 / events_per_second) /
  1000`` (Nexmark's ``interEventDelayUs``), so event time is exact and in order by id;
* ``extra`` pads each event towards the average sizes 200 (person), 500 (auction) and 100
  (bid) bytes with a slice of one fixed random string, as nexmark-flink does.

Deviations, on purpose: every random draw is a counter-based hash of ``(seed, event id,
draw number)`` instead of a sequential random generator, so any event is a pure function of
its id (the same events for any number of splits, any batch size and after any restore);
the bidder id gets ``FIRST_PERSON_ID`` added once (nexmark-flink adds it twice); event ids
are not reordered in "out-of-order groups" (``outOfOrderGroupSize`` 1, the default).

One table for all three kinds (``event_type`` 0 person, 1 auction, 2 bid, as the
``datagen`` table of nexmark-flink's DDL), flat: the columns of the other kinds are null.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PERSON, AUCTION, BID = 0, 1, 2
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO, HOT_BIDDERS_RATIO, HOT_SELLERS_RATIO = 2, 4, 4
HOT_ID_RATIO = 100  # hot auctions, bidders and sellers: the last id rounded down to 100s
NUM_IN_FLIGHT_AUCTIONS, NUM_ACTIVE_PEOPLE = 100, 1000
AUCTION_ID_LEAD = PERSON_ID_LEAD = 10
AVG_PERSON_BYTES, AVG_AUCTION_BYTES, AVG_BID_BYTES = 200, 500, 100
CHANNELS_NUMBER = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
             "Redmond", "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris")
#: 2026-01-01T00:00:00 (UTC), the default time of event 0
DEFAULT_BASE_TIME_MS = 1_767_225_600_000

SCHEMA = pa.schema([
    ("event_type", pa.int32()),
    ("date_time", pa.timestamp("ms")),
    # person
    ("person_id", pa.int64()), ("person_name", pa.string()), ("person_email", pa.string()),
    ("person_credit_card", pa.string()), ("person_city", pa.string()),
    ("person_state", pa.string()),
    # auction
    ("auction_id", pa.int64()), ("auction_item_name", pa.string()),
    ("auction_description", pa.string()), ("auction_initial_bid", pa.int64()),
    ("auction_reserve", pa.int64()), ("auction_expires", pa.timestamp("ms")),
    ("auction_seller", pa.int64()), ("auction_category", pa.int64()),
    # bid
    ("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
    ("channel", pa.string()), ("url", pa.string()),
    # every kind
    ("extra", pa.string()),
])

_MASK = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _random_letters(seed: int, n: int, space_every: int = 13) -> bytes:
    """``n`` pseudo-random lower-case letters, about one in ``space_every`` a space."""
    h = _mix(np.arange(n, dtype=np.uint64) + np.uint64((seed * 0x2545F4914F6CDD1D) & _MASK))
    letters = (np.uint64(ord("a")) + h % np.uint64(26)).astype(np.uint8)
    if space_every:
        letters[(h >> np.uint64(40)) % np.uint64(space_every) == 0] = ord(" ")
    return letters.tobytes()


@dataclass(frozen=True)
class NexmarkConfig:
    """What the events depend on. ``events_per_second``: the event-time rate (Nexmark's
    ``firstEventRate``; nexmark-flink's benchmark suite uses 10,000,000)."""

    seed: int = 0
    events_per_second: float = 10_000_000
    base_time_ms: int = DEFAULT_BASE_TIME_MS

    def timestamp_ms(self, event_ids: np.ndarray) -> np.ndarray:
        delay_us = 1_000_000.0 / self.events_per_second
        return self.base_time_ms + (event_ids * delay_us).astype(np.int64) // 1000


def last_person_id0(event_ids: np.ndarray) -> np.ndarray:
    """Base-0 id of the last person created at or before each event."""
    epoch, offset = np.divmod(event_ids, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + np.minimum(offset, PERSON_PROPORTION - 1)


def last_auction_id0(event_ids: np.ndarray) -> np.ndarray:
    """Base-0 id of the last auction created at or before each event (-1 before any)."""
    epoch, offset = np.divmod(event_ids, TOTAL_PROPORTION)
    before = offset < PERSON_PROPORTION
    epoch = np.where(before, epoch - 1, epoch)
    offset = np.where(before | (offset >= PERSON_PROPORTION + AUCTION_PROPORTION),
                      AUCTION_PROPORTION - 1, offset - PERSON_PROPORTION)
    return epoch * AUCTION_PROPORTION + offset


def event_types(event_ids: np.ndarray) -> np.ndarray:
    rem = event_ids % TOTAL_PROPORTION
    return np.where(rem < PERSON_PROPORTION, PERSON,
                    np.where(rem < PERSON_PROPORTION + AUCTION_PROPORTION, AUCTION, BID)
                    ).astype(np.int32)


class NexmarkGenerator:
    """``batch(event_ids)``: the events of those ids as one Arrow batch (:data:`SCHEMA`)."""

    EXTRA_POOL_BYTES = 1 << 20
    MAX_STRING = 1024

    def __init__(self, config: NexmarkConfig | None = None) -> None:
        self.config = config or NexmarkConfig()
        seed = self.config.seed
        self._pool = np.frombuffer(_random_letters(seed * 7 + 1, self.EXTRA_POOL_BYTES, 0),
                                   dtype=np.uint8)
        self._words = np.frombuffer(_random_letters(seed * 7 + 2, self.EXTRA_POOL_BYTES),
                                    dtype=np.uint8)
        # the 4 hot channels' URLs, then channel-0 .. channel-9999 and theirs
        urls = self._base_urls(CHANNELS_NUMBER + len(HOT_CHANNELS))
        cold = np.arange(CHANNELS_NUMBER)
        flag = _mix(cold.astype(np.uint64) + np.uint64(seed * 31 + 5)) % np.uint64(10) > 0
        ids = [str(abs(_reverse32(int(i)))) for i in cold]
        cold_urls = [u + ("&channel_id=" + c if f else "")
                     for u, c, f in zip(urls[len(HOT_CHANNELS):], ids, flag.tolist(), strict=True)]
        self._channels = pa.array(list(HOT_CHANNELS) + [f"channel-{i}" for i in cold])
        self._urls = pa.array(urls[:len(HOT_CHANNELS)] + cold_urls)

    def _base_urls(self, n: int) -> list[str]:
        out = []
        for i in range(n):
            parts = []
            for j in range(3):
                h = int(_mix(np.array([i * 3 + j], dtype=np.uint64)
                             + np.uint64(self.config.seed * 131 + 7))[0])
                length = 3 + h % 2
                word = bytes(ord("a") + (h >> (8 + 5 * k)) % 26 for k in range(length)).decode()
                parts.append(word if (h >> 60) % 13 else word[:-1] + "_")
            out.append("https://www.nexmark.com/" + "/".join(parts) + "/item.htm?query=1")
        return out

    # -- random draws --------------------------------------------------------------------
    def _draw(self, ids: np.ndarray, k: int) -> np.ndarray:
        """Draw number ``k`` of each event: a uint64 hash of (seed, event id, k)."""
        base = np.uint64(((self.config.seed * 0x100000001B3) + k * 0x9E3779B1) & _MASK)
        with np.errstate(over="ignore"):
            return _mix(ids.astype(np.uint64) * np.uint64(64) + base)

    def _int(self, ids: np.ndarray, k: int, n) -> np.ndarray:
        """Uniform in ``0..n-1`` (``n`` scalar or per event, >= 1)."""
        n = np.asarray(n, dtype=np.uint64)
        return (self._draw(ids, k) % n).astype(np.int64)

    def _unit(self, ids: np.ndarray, k: int) -> np.ndarray:
        return (self._draw(ids, k) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def _price(self, ids: np.ndarray, k: int) -> np.ndarray:
        return np.round(10.0 ** (self._unit(ids, k) * 6.0) * 100.0).astype(np.int64)

    def _slices(self, pool: np.ndarray, ids: np.ndarray, k: int, lengths: np.ndarray) -> pa.Array:
        """Strings: for each event a slice of ``pool`` of its length at a random offset."""
        lengths = lengths.astype(np.int64)
        # the bound must not depend on the batch (an event is a function of its id alone)
        assert int(lengths.max(initial=0)) < self.MAX_STRING, "string longer than MAX_STRING"
        starts = self._int(ids, k, len(pool) - self.MAX_STRING)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
        data = pool[idx]
        return pa.LargeStringArray.from_buffers(len(ids), pa.py_buffer(offsets),
                                                pa.py_buffer(data)).cast(pa.string())

    def _string(self, ids: np.ndarray, k: int, max_length: int) -> pa.Array:
        """Nexmark's ``nextString``: 3..max_length-1 letters with spaces, trimmed."""
        lengths = 3 + self._int(ids, k, max_length - 3)
        return pc.utf8_trim_whitespace(self._slices(self._words, ids, k + 1, lengths))

    def _extra(self, ids: np.ndarray, k: int, current: np.ndarray | int, average: int) -> pa.Array:
        """Padding towards ``average`` bytes: ``average - current`` +- 20%."""
        want = np.maximum(average - np.asarray(current, dtype=np.int64), 0)
        delta = np.round(want * 0.2).astype(np.int64)
        spread = self._int(ids, k, np.maximum(2 * delta, 1))
        lengths = np.where(delta > 0, want - delta + spread, want)
        lengths = np.broadcast_to(lengths, ids.shape)
        return self._slices(self._pool, ids, k + 1, lengths)

    def _recent_person0(self, ids: np.ndarray, k: int) -> np.ndarray:
        people = last_person_id0(ids) + 1
        active = np.minimum(people, NUM_ACTIVE_PEOPLE)
        return people - active + self._int(ids, k, active + PERSON_ID_LEAD)

    # -- the three kinds -----------------------------------------------------------------
    def persons(self, ids: np.ndarray) -> dict[str, pa.Array]:
        first = pa.array(FIRST_NAMES).take(pa.array(self._int(ids, 1, len(FIRST_NAMES))))
        last = pa.array(LAST_NAMES).take(pa.array(self._int(ids, 2, len(LAST_NAMES))))
        name = pc.binary_join_element_wise(first, last, " ")
        email = pc.binary_join_element_wise(self._string(ids, 3, 7), self._string(ids, 5, 5),
                                            "@")
        email = pc.binary_join_element_wise(email, ".com", "")
        card = pc.binary_join_element_wise(
            *[pc.utf8_lpad(pc.cast(pa.array(self._int(ids, 7 + j, 10_000)), pa.string()), 4,
                           padding="0") for j in range(4)], " ")
        city = pa.array(US_CITIES).take(pa.array(self._int(ids, 11, len(US_CITIES))))
        state = pa.array(US_STATES).take(pa.array(self._int(ids, 12, len(US_STATES))))
        size = (8 + _lengths(name) + _lengths(email) + _lengths(card) + _lengths(city)
                + _lengths(state))
        return {"person_id": pa.array(last_person_id0(ids) + FIRST_PERSON_ID),
                "person_name": name, "person_email": email, "person_credit_card": card,
                "person_city": city, "person_state": state,
                "extra": self._extra(ids, 13, size, AVG_PERSON_BYTES)}

    def auctions(self, ids: np.ndarray, ts: np.ndarray) -> dict[str, pa.Array]:
        hot = self._int(ids, 1, HOT_SELLERS_RATIO) > 0
        seller = np.where(hot, last_person_id0(ids) // HOT_ID_RATIO * HOT_ID_RATIO,
                          self._recent_person0(ids, 2)) + FIRST_PERSON_ID
        initial = self._price(ids, 3)
        # an auction lasts up to twice the event time that 100 auctions take to appear
        n_for_auctions = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
        horizon = self.config.timestamp_ms(ids + n_for_auctions) - ts
        expires = ts + 1 + self._int(ids, 4, np.maximum(horizon * 2, 1))
        item = self._string(ids, 5, 20)
        desc = self._string(ids, 7, 100)
        size = 8 + _lengths(item) + _lengths(desc) + 40
        return {"auction_id": pa.array(last_auction_id0(ids) + FIRST_AUCTION_ID),
                "auction_item_name": item, "auction_description": desc,
                "auction_initial_bid": pa.array(initial),
                "auction_reserve": pa.array(initial + self._price(ids, 9)),
                "auction_expires": pa.array(expires, pa.timestamp("ms")),
                "auction_seller": pa.array(seller),
                "auction_category": pa.array(FIRST_CATEGORY_ID + self._int(ids, 10, NUM_CATEGORIES)),
                "extra": self._extra(ids, 11, size, AVG_AUCTION_BYTES)}

    def bids(self, ids: np.ndarray) -> dict[str, pa.Array]:
        last_auction = last_auction_id0(ids)
        low = np.maximum(last_auction - NUM_IN_FLIGHT_AUCTIONS, 0)
        recent = low + self._int(ids, 2, last_auction - low + 1 + AUCTION_ID_LEAD)
        hot = self._int(ids, 1, HOT_AUCTION_RATIO) > 0
        auction = np.where(hot, last_auction // HOT_ID_RATIO * HOT_ID_RATIO, recent)
        hot = self._int(ids, 3, HOT_BIDDERS_RATIO) > 0
        bidder = np.where(hot, last_person_id0(ids) // HOT_ID_RATIO * HOT_ID_RATIO + 1,
                          self._recent_person0(ids, 4))
        hot = self._int(ids, 6, 2) > 0
        channel = np.where(hot, self._int(ids, 7, len(HOT_CHANNELS)),
                           len(HOT_CHANNELS) + self._int(ids, 8, CHANNELS_NUMBER))
        channel = pa.array(channel)
        return {"auction": pa.array(auction + FIRST_AUCTION_ID),
                "bidder": pa.array(bidder + FIRST_PERSON_ID),
                "price": pa.array(self._price(ids, 5)),
                "channel": self._channels.take(channel), "url": self._urls.take(channel),
                "extra": self._extra(ids, 9, 32, AVG_BID_BYTES)}

    def batch(self, event_ids: np.ndarray) -> pa.RecordBatch:
        """The events ``event_ids`` (int64, any order) as one batch of :data:`SCHEMA`."""
        ids = np.asarray(event_ids, dtype=np.int64)
        kinds = event_types(ids)
        ts = self.config.timestamp_ms(ids)
        columns: dict[str, pa.Array] = {}
        extras = []
        for kind, build in ((PERSON, lambda s: self.persons(s)),
                            (AUCTION, lambda s: self.auctions(s, ts[kinds == AUCTION])),
                            (BID, lambda s: self.bids(s))):
            rows = np.flatnonzero(kinds == kind)
            cols = build(ids[rows]) if len(rows) else None
            # scatter the kind's values to its rows (null elsewhere): a take with null indices
            where = np.full(len(ids), -1, dtype=np.int64)
            where[rows] = np.arange(len(rows))
            take = pa.array(where, mask=where < 0)
            for name, field in ((f.name, f) for f in SCHEMA):
                if name in ("event_type", "date_time"):
                    continue
                if cols is None or name not in cols:
                    continue
                arr = cols[name]
                if name == "extra":
                    extras.append((rows, arr))
                    continue
                columns[name] = arr.cast(field.type).take(take) if len(ids) != len(rows) \
                    else arr.cast(field.type)
        columns["extra"] = _merge_strings(len(ids), extras)
        arrays = [pa.array(kinds), pa.array(ts, pa.timestamp("ms"))]
        for field in SCHEMA:
            if field.name in ("event_type", "date_time"):
                continue
            arrays.append(columns.get(field.name, pa.nulls(len(ids), field.type)))
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def _lengths(arr: pa.Array) -> np.ndarray:
    return pc.binary_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)


def _merge_strings(n: int, parts: list[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """One string column of ``n`` rows from disjoint (rows, values) parts covering all."""
    if len(parts) == 1 and len(parts[0][0]) == n:
        return parts[0][1]
    order = np.empty(n, dtype=np.int64)
    base = 0
    for rows, _ in parts:
        order[rows] = base + np.arange(len(rows))
        base += len(rows)
    merged = pa.concat_arrays([arr for _, arr in parts]) if parts else pa.nulls(0, pa.string())
    return merged.take(pa.array(order))


def _reverse32(i: int) -> int:
    """Java's ``Integer.reverse`` as a signed 32-bit int."""
    r = int(f"{i & 0xFFFFFFFF:032b}"[::-1], 2)
    return r - (1 << 32) if r >= 1 << 31 else r


def write_parquet(directory: str, num_events: int, *, config: NexmarkConfig | None = None,
                  events_per_file: int = 1_000_000, batch: int = 65_536,
                  csv_directory: str | None = None) -> list[str]:
    """Events ``0..num_events-1`` in order, into ``part-00000.parquet``, ... of
    ``events_per_file`` events each (and, with ``csv_directory``, the same rows as CSV
    files for engines without a Parquet reader: timestamps as ``yyyy-MM-dd HH:mm:ss.SSS``,
    nulls as empty fields). Returns the Parquet paths."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    gen = NexmarkGenerator(config)
    os.makedirs(directory, exist_ok=True)
    if csv_directory:
        os.makedirs(csv_directory, exist_ok=True)
    paths = []
    for f, start in enumerate(range(0, num_events, events_per_file)):
        stop = min(start + events_per_file, num_events)
        path = os.path.join(directory, f"part-{f:05d}.parquet")
        tmp = os.path.join(directory, f".part-{f:05d}.parquet")
        csv_out = None
        if csv_directory:
            csv_path = os.path.join(csv_directory, f"part-{f:05d}.csv")
            csv_out = pacsv.CSVWriter(csv_path + ".tmp", _csv_schema(),
                                      write_options=pacsv.WriteOptions(include_header=False,
                                                                       quoting_style="needed"))
        with pq.ParquetWriter(tmp, SCHEMA, compression="snappy") as w:
            for s in range(start, stop, batch):
                b = gen.batch(np.arange(s, min(s + batch, stop), dtype=np.int64))
                w.write_batch(b, row_group_size=batch)
                if csv_out is not None:
                    csv_out.write_batch(_for_csv(b))
        os.replace(tmp, path)
        if csv_out is not None:
            csv_out.close()
            os.replace(csv_path + ".tmp", csv_path)
        paths.append(path)
    return paths


def _csv_schema() -> pa.Schema:
    return pa.schema([pa.field(f.name, pa.string() if pa.types.is_timestamp(f.type) else f.type)
                      for f in SCHEMA])


def _for_csv(b: pa.RecordBatch) -> pa.RecordBatch:
    cols = []
    for f, col in zip(SCHEMA, b.columns, strict=True):
        if pa.types.is_timestamp(f.type):
            col = pc.strftime(col, format="%Y-%m-%d %H:%M:%S")  # %S: seconds.mmm
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=_csv_schema())
