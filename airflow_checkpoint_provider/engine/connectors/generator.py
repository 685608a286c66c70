"""A deterministic, seeded generator source (bounded or unbounded, optional rate)."""

from __future__ import annotations

import time
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import Source, SourceContext, SplitReader

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    """SplitMix64 finaliser: a stable, well-spread 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def mix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` over a uint64 array (numpy integer arithmetic wraps modulo 2**64)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class GeneratorSource(Source):
    """Records ``{"id": i, "key": "k<n>", "value": v}`` for ``i`` in ``0..num_records-1``
    (``"key": n``, an int64, with ``int_keys=True``).

    Record ``i`` is a pure function of ``(seed, i)``, so any run, any restore and any
    parallelism produce the same records. Split ``j`` of ``splits`` yields the ids
    ``j, j + splits, j + 2*splits, ...``; its position is how many it has emitted.

    :param num_records: ``None`` for an unbounded stream.
    :param num_keys: distinct keys.
    :param records_per_second: total rate limit across all splits (``None``: as fast as possible);
        a split emits the records due together, at least 64 or every 20 ms.
    :param arrow: emit ``pyarrow.RecordBatch`` batches (columns ``id``, ``key``, ``value``)
        generated with numpy instead of lists of dicts; the same records either way.
    :param int_keys: integer keys ``n`` instead of strings ``"k<n>"`` (same distribution).
    :param event_time_step_ms: add an event time ``"ts"`` (epoch ms): record ``i`` happens
        at ``start_ms + floor(i * event_time_step_ms)`` (a fraction such as ``0.001`` gives
        1,000 records per millisecond), minus a seeded delay of up to
        ``max_disorder_ms`` (so records arrive out of order by at most that much).
    """

    def __init__(self, num_records: int | None = 10_000, *, num_keys: int = 100, seed: int = 0,
                 splits: int = 4, records_per_second: float | None = None,
                 arrow: bool = False, int_keys: bool = False,
                 event_time_step_ms: float | None = None, max_disorder_ms: int = 0,
                 start_ms: int = 0) -> None:
        if num_records is not None and num_records < 0:
            raise ValueError(f"num_records must be >= 0 (got {num_records})")
        if splits < 1:
            raise ValueError(f"splits must be >= 1 (got {splits})")
        self.num_records = num_records
        self.num_keys = num_keys
        self.seed = seed
        self.num_splits = splits
        self.records_per_second = records_per_second
        self.arrow = arrow
        self.int_keys = int_keys
        if max_disorder_ms < 0:
            raise ValueError(f"max_disorder_ms must be >= 0 (got {max_disorder_ms})")
        self.event_time_step_ms = event_time_step_ms
        self.max_disorder_ms = max_disorder_ms
        self.start_ms = start_ms

    def splits(self) -> list[str]:
        return [f"split-{j}" for j in range(self.num_splits)]

    def record(self, i: int) -> dict:
        h = mix64(self.seed * 0x100000001B3 + i)
        n = h % self.num_keys
        record = {"id": i, "key": n if self.int_keys else f"k{n}", "value": (h >> 32) % 100}
        if self.event_time_step_ms is not None:
            record["ts"] = (self.start_ms + int(i * self.event_time_step_ms)
                            - (h >> 12) % (self.max_disorder_ms + 1))
        return record

    def records(self, ids: np.ndarray) -> list[dict]:
        """The records of ``ids`` (int64) as dicts: :meth:`record` of each, with the hashing
        done in numpy (unless a subclass overrides :meth:`record`)."""
        if type(self).record is not GeneratorSource.record or self.event_time_step_ms is not None:
            return [self.record(int(i)) for i in ids]
        with np.errstate(over="ignore"):
            h = mix64_array(ids.astype(np.uint64) + np.uint64(self.seed * 0x100000001B3 & _MASK))
        n = (h % np.uint64(self.num_keys)).tolist()
        keys = n if self.int_keys else [f"k{k}" for k in n]
        values = ((h >> np.uint64(32)) % np.uint64(100)).tolist()
        return [{"id": i, "key": k, "value": v}
                for i, k, v in zip(ids.tolist(), keys, values, strict=True)]

    def record_batch(self, ids: np.ndarray) -> pa.RecordBatch:
        """The records of ``ids`` (int64) as one Arrow batch, computed without a Python loop."""
        with np.errstate(over="ignore"):
            x = ids.astype(np.uint64) + np.uint64(self.seed * 0x100000001B3 & _MASK)
            h = mix64_array(x)
        n = pa.array((h % np.uint64(self.num_keys)).astype(np.int64))
        keys = n if self.int_keys else pc.binary_join_element_wise(
            "k", pc.cast(n, pa.string()), "")
        values = ((h >> np.uint64(32)) % np.uint64(100)).astype(np.int64)
        arrays = [pa.array(ids, pa.int64()), keys, pa.array(values)]
        names = ["id", "key", "value"]
        if self.event_time_step_ms is not None:
            delay = ((h >> np.uint64(12)) % np.uint64(self.max_disorder_ms + 1)).astype(np.int64)
            step = (ids * self.event_time_step_ms).astype(np.int64)  # a fraction: floor
            arrays.append(pa.array(self.start_ms + step - delay))
            names.append("ts")
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        start = cast(int, position or 0)  # what _GeneratorReader.position() returned
        return _GeneratorReader(self, int(split_id.rsplit("-", 1)[1]), int(start))

    def describe(self) -> str:
        return f"generator(seed={self.seed})"


#: A rate-limited split emits the records due once there are this many (or its reader's room)...
PACE_RECORDS = 64
#: ...or this long after its last emission. At a low rate, one record per read of the source
#: loop (every 5 ms) would make every record a batch of its own, each costing a frame, a
#: wake-up and a mailbox round trip in every task downstream (measured: a running-sum job at
#: 500 records/s used 40% less CPU in its slots when paced at 20 ms); at a high rate the
#: records due fill a batch sooner and the pace never holds them.
PACE_S = 0.02


class StridedSplitReader(SplitReader):
    """Split ``split`` of ``num_splits`` over the ids ``0..total-1`` (``total`` None:
    unbounded): it emits the ids ``split, split + num_splits, ...`` (so every split advances
    together), as :meth:`records` makes them of the ids; its position is how many it has
    emitted, so a restore at any parallelism rewinds exactly. ``rate``: records per second
    of all the splits together (``None``: as fast as read), counted from the reader's open;
    the records due are emitted together, at least :data:`PACE_RECORDS` or every
    :data:`PACE_S` seconds. Serves :class:`GeneratorSource` and the Nexmark source of bench/nexmark."""

    def __init__(self, split: int, num_splits: int, emitted: int, total: int | None,
                 rate: float | None) -> None:
        self.split, self.num_splits, self.total = split, num_splits, total
        self.emitted = emitted
        self.started = time.monotonic()
        self.emitted_at_start = emitted
        self.rate = rate / num_splits if rate else None
        self.last_emit = float("-inf")

    def records(self, ids: np.ndarray):
        """The records (a list of dicts or an Arrow batch) of ``ids`` (int64)."""
        raise NotImplementedError

    def read_batch(self, max_records: int):
        n = max_records
        if self.rate is not None:
            now = time.monotonic()
            due = int((now - self.started) * self.rate) + 1 - (self.emitted - self.emitted_at_start)
            if due <= 0 or (due < min(PACE_RECORDS, n) and now - self.last_emit < PACE_S):
                return []
            n = min(n, due)
            self.last_emit = now
        start = self.split + self.emitted * self.num_splits
        if self.total is not None:
            if start >= self.total:
                return None
            n = min(n, (self.total - start + self.num_splits - 1) // self.num_splits)
        out = self.records(start + np.arange(n, dtype=np.int64) * self.num_splits)
        self.emitted += n
        return out

    def position(self) -> int:
        return self.emitted


class _GeneratorReader(StridedSplitReader):
    def __init__(self, source: GeneratorSource, split: int, emitted: int) -> None:
        super().__init__(split, source.num_splits, emitted, source.num_records,
                         source.records_per_second)
        self.s = source

    def records(self, ids: np.ndarray):
        return self.s.record_batch(ids) if self.s.arrow else self.s.records(ids)
