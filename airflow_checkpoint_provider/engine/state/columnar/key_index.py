"""Key -> row number for columnar keyed state (:mod:`.aggregates`), a batch at a time.

A :class:`KeyIndex` maps keys to row numbers: integer keys by binary search in a sorted copy
(``np.searchsorted``: one C call per batch, no hashes needed), other keys with open
addressing over numpy arrays, so a batch of keys is looked up and inserted with a few
vectorized probe rounds instead of a Python loop per key. Row ``r`` of every accumulator
column belongs to key ``keys[r]``.

The sorted copy is two sorted runs, as in a log-structured merge tree: new keys are merged
into a small run, which is merged into the large one once it outgrows :func:`delta_limit`.
One run cost a copy of every key per batch, so a state of a million keys
(``count_distinct``'s pairs) paid as much for a batch of 10,000 rows as for one of 65,536
(measured on Nexmark q16's input: 1.7x the time in batches of 16,384 rows; 1.5x with two
runs). An open-addressing table for integer keys was measured too: slower at every batch
size (random probes into a table of millions of slots, where a sorted run is searched with
sorted needles). :class:`IntSet` is the same two runs without row numbers, for sets that
need membership only (``count_distinct``'s pairs).

Written by hand because no library offers an incremental hash map that numpy can probe
with a whole array of keys (pandas' hash tables are private API; rebuilding an Arrow or
pandas index per batch costs O(state) per batch).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_FIB = np.uint64(0x9E3779B97F4A7C15)
#: direct-address table for integer keys: at most this many slots per key, and in all
DENSE_FACTOR = 8
DENSE_MAX = 1 << 24
#: the small sorted run is merged into the large one beyond ``max(DELTA_MIN, DELTA_FACTOR *
#: sqrt(keys))`` keys
DELTA_MIN = 8192
DELTA_FACTOR = 64
_EMPTY = np.empty(0, dtype=np.int64)


def delta_limit(n: int) -> int:
    """Keys the small sorted run of an index of ``n`` keys may hold before it is merged
    into the large run: per batch a merge into the small run costs O(limit), and the large
    run is rewritten once per ``limit`` new keys, O(n / limit) per key."""
    return max(DELTA_MIN, int(DELTA_FACTOR * np.sqrt(n)))


def _merge(keys: np.ndarray, new_keys: np.ndarray) -> np.ndarray:
    """A sorted run with sorted keys absent from it merged in."""
    return np.insert(keys, np.searchsorted(keys, new_keys), new_keys) if len(keys) else new_keys


def _merge_rows(keys: np.ndarray, rows: np.ndarray, new_keys: np.ndarray, new_rows: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_merge` of keys with a row each."""
    if not len(keys):
        return new_keys, new_rows
    at = np.searchsorted(keys, new_keys)
    return np.insert(keys, at, new_keys), np.insert(rows, at, new_rows)


def _positions(run: np.ndarray, keys: np.ndarray, *, presorted: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """Where each key is in a sorted run, and whether it is there (``run`` not empty)."""
    if presorted:
        pos = np.searchsorted(run, keys)
    else:
        # sorted needles: each binary search starts where the previous one ended (numpy),
        # about twice as fast as searching in arrival order
        order = np.argsort(keys)
        pos = np.empty(len(keys), dtype=np.int64)
        pos[order] = np.searchsorted(run, keys[order])
    np.minimum(pos, len(run) - 1, out=pos)
    return pos, run[pos] == keys


def _search(found: np.ndarray, found_rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row of each key in one sorted run, -1 where absent."""
    if not len(found):
        return np.full(len(keys), -1, dtype=np.int64)
    pos, hit = _positions(found, keys)
    return np.where(hit, found_rows[pos], -1)


class IntSet:
    """A set of int64 keys, for membership only: the two sorted runs of :class:`KeyIndex`
    without row numbers (``count_distinct``'s packed pairs need none; a run of keys alone is
    half the bytes to move per merge, and a pair costs 8 bytes instead of 28)."""

    def __init__(self) -> None:
        self.sorted_keys = self.delta_keys = _EMPTY

    def __len__(self) -> int:
        return len(self.sorted_keys) + len(self.delta_keys)

    def add(self, keys: np.ndarray) -> np.ndarray:
        """Add sorted distinct ``keys`` (e.g. from ``np.unique``); return the mask of those
        that were absent."""
        new = np.ones(len(keys), dtype=bool)
        for run in (self.sorted_keys, self.delta_keys):
            if len(run) and new.any():
                candidates = np.flatnonzero(new)
                new[candidates[_positions(run, keys[candidates], presorted=True)[1]]] = False
        fresh = keys[new]
        if len(fresh):
            self.delta_keys = _merge(self.delta_keys, fresh)
            if len(self.delta_keys) > delta_limit(len(self.sorted_keys)):
                self.sorted_keys = _merge(self.sorted_keys, self.delta_keys)
                self.delta_keys = _EMPTY
        return new


def _grow(array: np.ndarray, size: int) -> np.ndarray:
    if size <= len(array):
        return array
    new = np.empty(max(size, 2 * len(array), 16), dtype=array.dtype)
    new[: len(array)] = array
    return new


def keys_to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Integer keys without nulls as int64, anything else as Python objects."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_integer(column.type) and column.null_count == 0 and not (
            pa.types.is_uint64(column.type) and len(column) and pc.max(column).as_py() >= 2**63):
        return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if column.null_count and not (pa.types.is_string(column.type)
                                  or pa.types.is_large_string(column.type)
                                  or pa.types.is_binary(column.type)
                                  or pa.types.is_large_binary(column.type)):
        # numeric keys with nulls: to_numpy() would give NaN for null, which never equals
        # itself (a null key would get a new row in every batch)
        out = np.empty(len(column), dtype=object)
        out[:] = column.to_pylist()
        return out
    return column.to_numpy(zero_copy_only=False).astype(object, copy=False)


def _varlen(arrow_type: pa.DataType) -> bool:
    return (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type))


class KeyIndex:
    """Key -> row number. Rows are numbered 0..n-1 in insertion order.

    While every key is an int64 the index is a sorted copy of the keys with their rows, in
    two runs (:attr:`sorted_keys` and :attr:`sorted_rows`, the large one; :attr:`delta_keys`
    and :attr:`delta_rows`, the small one; a key is in one of them); the hash slots are built
    only when the keys become Python objects (strings, or ints mixed with nulls)."""

    def __init__(self) -> None:
        self.n = 0
        self.keys: np.ndarray = np.empty(0, dtype=np.int64)
        self.hashes = np.empty(0, dtype=np.uint32)
        self._bits = 4
        self._slots = np.full(1 << self._bits, -1, dtype=np.int64)
        self.sorted_keys = self.sorted_rows = _EMPTY
        self.delta_keys = self.delta_rows = _EMPTY
        #: string/binary keys: the same keys as an Arrow array (row order), kept while every
        #: insert came with its Arrow keys, so :meth:`lookup_arrow` compares candidate keys
        #: in Arrow instead of as Python objects
        self.key_array: pa.Array | None = None
        #: integer keys in a compact range: row of ``key - _dense_min`` (see _update_dense)
        self._dense: np.ndarray | None = None
        self._dense_min = 0

    @property
    def by_sort(self) -> bool:
        """Integer keys: looked up by binary search, no hashes needed."""
        return self.keys.dtype != object

    def _home(self, hashes: np.ndarray) -> np.ndarray:
        # Fibonacci hashing takes the high bits of h * phi: every bit of the murmur hash
        # counts (the low bits are the key group, nearly constant within one subtask).
        return ((hashes.astype(np.uint64) * _FIB) >> np.uint64(64 - self._bits)).astype(np.int64)

    def _coerce(self, keys: np.ndarray) -> np.ndarray:
        if keys.dtype != self.keys.dtype:
            if self.n == 0:
                self.keys = self.keys.astype(keys.dtype)
            elif self.keys.dtype != object:
                # e.g. int keys, then a batch with nulls: from now on hash slots
                self.keys = self.keys.astype(object)
                self._dense = None
                while 2 * self.n > (1 << self._bits):
                    self._bits += 1
                self._slots = np.full(1 << self._bits, -1, dtype=np.int64)
                self._place(np.arange(self.n, dtype=np.int64))
            if keys.dtype != self.keys.dtype:
                keys = keys.astype(object)
        return keys

    def lookup(self, keys: np.ndarray, hashes: np.ndarray | None = None) -> np.ndarray:
        """Row of each key, -1 where absent. ``hashes`` (the keys' murmur3 hashes) are
        needed unless the index holds integer keys (:attr:`by_sort`)."""
        keys = self._coerce(keys)
        if self.by_sort:
            return self._lookup_sorted(keys)
        if hashes is None:
            raise ValueError("KeyIndex.lookup of non-integer keys needs their hashes")
        return self._probe(hashes, lambda rows, at: self.keys[rows] == keys[at])

    def _probe(self, hashes: np.ndarray, equal) -> np.ndarray:
        """Linear probing for every needle at once: row of each needle, -1 where absent.
        ``equal(rows, needles)``: whether the keys at those rows equal those needles (their
        hashes already do)."""
        rows = np.full(len(hashes), -1, dtype=np.int64)
        pos = self._home(hashes)
        active = np.arange(len(hashes))
        mask = (1 << self._bits) - 1
        while active.size:
            slot = self._slots[pos[active]]
            occupied = slot >= 0
            active, slot = active[occupied], slot[occupied]
            if not active.size:
                break
            same = self.hashes[slot] == hashes[active]
            if same.any():
                same[same] = equal(slot[same], active[same])
            rows[active[same]] = slot[same]
            active = active[~same]
            pos[active] = (pos[active] + 1) & mask
        return rows

    def lookup_arrow(self, keys: pa.Array, hashes: np.ndarray) -> np.ndarray | None:
        """:meth:`lookup` of string/binary keys given as an Arrow array without nulls,
        without converting them to Python objects (hash probe in numpy, key comparison in
        Arrow); ``None`` when the index has no Arrow copy of its keys (then use
        :meth:`lookup`)."""
        mirror = self.key_array
        if mirror is None or self.by_sort or keys.null_count:
            return None
        if keys.type != mirror.type:
            try:
                keys = keys.cast(mirror.type)
            except pa.ArrowException:
                return None
        return self._probe(hashes, lambda rows, at: pc.equal(
            mirror.take(pa.array(rows)), keys.take(pa.array(at))).to_numpy(zero_copy_only=False))

    def _lookup_sorted(self, keys: np.ndarray) -> np.ndarray:
        dense = self._dense
        if dense is not None:  # direct addressing: one gather
            offset = keys - self._dense_min
            inside = (offset >= 0) & (offset < len(dense))
            return np.where(inside, dense[np.where(inside, offset, 0)], -1).astype(np.int64)
        rows = _search(self.sorted_keys, self.sorted_rows, keys)
        if len(self.delta_keys):
            miss = np.flatnonzero(rows < 0)
            if len(miss):
                rows[miss] = _search(self.delta_keys, self.delta_rows, keys[miss])
        return rows

    def insert(self, keys: np.ndarray, hashes: np.ndarray,
               arrow_keys: pa.Array | None = None) -> np.ndarray:
        """Append keys that are absent and distinct; return their new rows. ``arrow_keys``:
        the same keys as an Arrow string/binary array (keeps :attr:`key_array`)."""
        keys = self._coerce(keys)
        if len(keys):
            self._mirror(arrow_keys)
        k = len(keys)
        rows = np.arange(self.n, self.n + k, dtype=np.int64)
        self.keys = _grow(self.keys, self.n + k)
        self.hashes = _grow(self.hashes, self.n + k)
        self.keys[self.n: self.n + k] = keys
        self.hashes[self.n: self.n + k] = hashes
        self.n += k
        if self.by_sort:  # into the small sorted run; that into the large one when it is full
            order = np.argsort(keys, kind="stable")
            self.delta_keys, self.delta_rows = _merge_rows(self.delta_keys, self.delta_rows,
                                                           keys[order], rows[order])
            if len(self.delta_keys) > delta_limit(len(self.sorted_keys)):
                self.sorted_keys, self.sorted_rows = _merge_rows(
                    self.sorted_keys, self.sorted_rows, self.delta_keys, self.delta_rows)
                self.delta_keys = self.delta_rows = _EMPTY
            self._update_dense(keys, rows)
            return rows
        if 2 * self.n > (1 << self._bits):  # keep the load factor <= 1/2
            while 2 * self.n > (1 << self._bits):
                self._bits += 1
            self._slots = np.full(1 << self._bits, -1, dtype=np.int64)
            self._place(np.arange(self.n, dtype=np.int64))
        else:
            self._place(rows)
        return rows

    def _update_dense(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Integer keys in a compact range (at most ``DENSE_FACTOR`` slots per key, at most
        ``DENSE_MAX`` slots): a direct-address table ``key - min -> row`` (-1: absent), so a
        lookup is one gather instead of a sort and a binary search."""
        runs = [(k, r) for k, r in ((self.sorted_keys, self.sorted_rows),
                                    (self.delta_keys, self.delta_rows)) if len(k)]
        if not runs:  # nothing yet (e.g. every key of a table expired)
            self._dense = None
            return
        lo, hi = min(int(k[0]) for k, _ in runs), max(int(k[-1]) for k, _ in runs)
        span = hi - lo + 1
        if (span > DENSE_MAX or span > DENSE_FACTOR * max(self.n, 1024)
                or lo <= -(2**62) or hi >= 2**62):  # far from int64's ends: no wrap-around
            self._dense = None
            return
        dense = self._dense
        if dense is None or lo < self._dense_min or hi >= self._dense_min + len(dense):
            # (re)build with headroom on both sides, so growing ranges rebuild rarely
            pad = span // 4
            start = lo - pad
            size = min(span + 2 * pad, DENSE_MAX)
            dense = np.full(size, -1, dtype=np.int32 if self.n < 2**31 else np.int64)
            for run_keys, run_rows in runs:
                dense[run_keys - start] = run_rows
            self._dense, self._dense_min = dense, start
        else:
            dense[keys - self._dense_min] = rows

    def _mirror(self, arrow_keys: pa.Array | None) -> None:
        if arrow_keys is None or arrow_keys.null_count or not _varlen(arrow_keys.type):
            self.key_array = None  # from now on: lookup() only
            return
        if self.n == 0:
            self.key_array = arrow_keys
        elif self.key_array is not None:
            try:
                self.key_array = pa.concat_arrays(
                    [self.key_array, arrow_keys.cast(self.key_array.type)])
            except pa.ArrowException:
                self.key_array = None

    def _place(self, rows: np.ndarray) -> None:
        mask = (1 << self._bits) - 1
        pos = self._home(self.hashes[rows])
        pending = np.arange(len(rows))
        while pending.size:
            p = pos[pending]
            free = self._slots[p] < 0
            cand, cand_pos = pending[free], p[free]
            # several rows may want the same free slot: the first of each takes it
            taken_pos, first = np.unique(cand_pos, return_index=True)
            winners = cand[first]
            self._slots[taken_pos] = rows[winners]
            placed = np.zeros(len(rows), dtype=bool)
            placed[winners] = True
            pending = pending[~placed[pending]]
            pos[pending] = (pos[pending] + 1) & mask

    def take_keys(self) -> np.ndarray:
        return self.keys[: self.n]

