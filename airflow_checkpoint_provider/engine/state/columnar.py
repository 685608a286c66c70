"""Columnar keyed state for the built-in aggregations: one row per key, numpy columns.

A :class:`KeyIndex` maps keys to row numbers: integer keys by binary search in a sorted copy
(``np.searchsorted``: one C call per batch, no hashes needed), other keys with open
addressing over numpy arrays, so a batch of keys is looked up and inserted with a few
vectorized probe rounds instead of a Python loop per key. Row ``r`` of every accumulator
column belongs to key ``keys[r]``.

Written by hand because no library offers an incremental hash map that numpy can probe
with a whole array of keys (pandas' hash tables are private API; rebuilding an Arrow or
pandas index per batch costs O(state) per batch).

Snapshot file (the ``arrow`` keyed-state handle): one Arrow IPC file, zstd-compressed,
columns ``key_group`` (int32), ``key`` and one column per accumulator; restore
reads the rows of the key groups the subtask owns (any parallelism).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import RestoreError, StateMigrationError
from ..snapshot.codec import read_state_file
from . import ttl
from .backend import StateSnapshot, write_state_file
from .keygroups import KeyGroupRange
from .vectorized import key_hashes

_FIB = np.uint64(0x9E3779B97F4A7C15)
#: direct-address table for integer keys: at most this many slots per key, and in all
DENSE_FACTOR = 8
DENSE_MAX = 1 << 24
#: accumulator of aggregate(ttl=...): processing time (ms) of each key's last update
LAST_UPDATE = "_last"


def _grow(array: np.ndarray, size: int) -> np.ndarray:
    if size <= len(array):
        return array
    new = np.empty(max(size, 2 * len(array), 16), dtype=array.dtype)
    new[: len(array)] = array
    return new


def _numpy_filled(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The column as numpy with nulls as 0 (``fill_null`` only when there are nulls)."""
    if column.null_count:
        column = column.fill_null(0)
    return column.to_numpy(zero_copy_only=False)


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


def _key_kind(arrow_type: pa.DataType) -> str:
    for kind, test in (("null", pa.types.is_null), ("integer", pa.types.is_integer),
                       ("string", pa.types.is_string), ("string", pa.types.is_large_string),
                       ("binary", pa.types.is_binary), ("binary", pa.types.is_large_binary),
                       ("floating", pa.types.is_floating), ("boolean", pa.types.is_boolean)):
        if test(arrow_type):
            return kind
    return str(arrow_type)


def _varlen(arrow_type: pa.DataType) -> bool:
    return (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type))


def _encodable(arrow_type: pa.DataType) -> bool:
    """Key types :meth:`AggregateTable._fold_encoded` handles (dictionary_encode, then the
    same index as the group_by path)."""
    return pa.types.is_integer(arrow_type) or _varlen(arrow_type)


class KeyIndex:
    """Key -> row number. Rows are numbered 0..n-1 in insertion order.

    While every key is an int64 the index is a sorted copy of the keys with their rows
    (:attr:`sorted_keys`, :attr:`sorted_rows`); the hash slots are built only when the keys
    become Python objects (strings, or ints mixed with nulls)."""

    def __init__(self) -> None:
        self.n = 0
        self.keys: np.ndarray = np.empty(0, dtype=np.int64)
        self.hashes = np.empty(0, dtype=np.uint32)
        self._bits = 4
        self._slots = np.full(1 << self._bits, -1, dtype=np.int64)
        self.sorted_keys = np.empty(0, dtype=np.int64)
        self.sorted_rows = np.empty(0, dtype=np.int64)
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
        found = self.sorted_keys
        if not len(found):
            return np.full(len(keys), -1, dtype=np.int64)
        dense = self._dense
        if dense is not None:  # direct addressing: one gather
            offset = keys - self._dense_min
            inside = (offset >= 0) & (offset < len(dense))
            return np.where(inside, dense[np.where(inside, offset, 0)], -1).astype(np.int64)
        # sorted needles: each binary search starts where the previous one ended (numpy),
        # about twice as fast as searching in arrival order
        order = np.argsort(keys)
        pos = np.empty(len(keys), dtype=np.int64)
        pos[order] = np.searchsorted(found, keys[order])
        np.minimum(pos, len(found) - 1, out=pos)
        return np.where(found[pos] == keys, self.sorted_rows[pos], -1)

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
        if self.by_sort:  # merge the new keys into the sorted copy: O(n + k)
            order = np.argsort(keys, kind="stable")
            at = np.searchsorted(self.sorted_keys, keys[order])
            self.sorted_keys = np.insert(self.sorted_keys, at, keys[order])
            self.sorted_rows = np.insert(self.sorted_rows, at, rows[order])
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
        lo, hi = int(self.sorted_keys[0]), int(self.sorted_keys[-1])
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
            dense[self.sorted_keys - start] = self.sorted_rows
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


class AggregateSpec:
    """The aggregations of one ``aggregate()`` operator: ``[(output, function, column)]``.

    Functions: ``count`` (rows, or non-null values of ``column``), ``sum``, ``min``, ``max``,
    ``mean`` (of non-null values; null while a key has none).
    """

    FUNCTIONS = ("count", "sum", "min", "max", "mean")

    def __init__(self, key: str, aggregations: list[tuple[str, str, str | None]],
                 ttl_ms: int | None = None) -> None:
        self.key = key
        self.aggregations = aggregations
        self.columns = sorted({c for _, _, c in aggregations if c is not None})
        #: a key not updated for this long (processing time) starts over, and leaves the
        #: next checkpoint
        self.ttl_ms = ttl_ms

    def describe(self) -> dict:
        out: dict[str, object] = {"key": self.key,
                                  "aggregations": [list(a) for a in self.aggregations]}
        if self.ttl_ms is not None:
            out["ttl_ms"] = self.ttl_ms
        return out


class AggregateTable:
    """Per-key accumulators of an :class:`AggregateSpec` for the key groups of one subtask.

    Accumulators: ``count`` (rows per key), and per input column ``nn:<col>`` (non-null
    values), ``sum:<col>``, ``min:<col>``, ``max:<col>`` as needed.
    """

    def __init__(self, spec: AggregateSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 operator_uid: str) -> None:
        self.spec = spec
        self.uid = operator_uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.index = KeyIndex()
        self.key_group = np.empty(0, dtype=np.int32)
        self.acc: dict[str, np.ndarray] = {"count": np.empty(0, dtype=np.int64)}
        self._value_types: dict[str, np.dtype] = {}
        self._key_kind: str | None = None
        needs = {(fn, col) for _, fn, col in spec.aggregations if col is not None}
        self._needed = {col: {fn for fn, c in needs if c == col} for col in spec.columns}
        for name in self.required_accumulators():  # every snapshot carries all of them
            self.acc.setdefault(name, np.empty(0, dtype=np.int64))
        if spec.ttl_ms is not None:
            self.acc.setdefault(LAST_UPDATE, np.empty(0, dtype=np.int64))

    def __len__(self) -> int:
        return self.index.n

    # -- update ---------------------------------------------------------------------------
    def _column_dtype(self, name: str, arrow_type: pa.DataType) -> np.dtype:
        dtype: np.dtype
        if pa.types.is_integer(arrow_type) or pa.types.is_boolean(arrow_type):
            dtype = np.dtype(np.int64)
        elif pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type):
            dtype = np.dtype(np.float64)
        elif pa.types.is_null(arrow_type):
            dtype = self._value_types.get(name, np.dtype(np.int64))
        else:
            raise TypeError(f"aggregate {self.uid!r}: column {name!r} has type {arrow_type}; "
                            "sum/min/max/mean need a numeric column")
        known = self._value_types.get(name)
        if known is not None and known != dtype:
            dtype = np.dtype(np.float64)  # int column that later carries floats
            for prefix in ("sum:", "min:", "max:"):
                if prefix + name in self.acc:
                    self.acc[prefix + name] = self.acc[prefix + name].astype(np.float64)
        self._value_types[name] = dtype
        return dtype

    def update(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Fold ``batch`` into the accumulators; return the new values of the keys it touched
        (one row per distinct key, in order of first appearance)."""
        return self._output(*self.fold(batch))

    def fold(self, batch: pa.RecordBatch | pa.Table) -> tuple[pa.Array, np.ndarray]:
        """Fold ``batch`` into the accumulators; return the distinct keys it touched and
        their rows."""
        spec = self.spec
        if spec.key not in batch.schema.names:
            raise KeyError(f"aggregate {self.uid!r}: key field {spec.key!r} is not in the input "
                           f"(columns: {', '.join(batch.schema.names)})")
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        plan: list = [([], "count_all")]
        dtypes = {}
        for col in spec.columns:
            if col not in batch.schema.names:
                raise KeyError(f"aggregate {self.uid!r}: column {col!r} is not in the input "
                               f"(columns: {', '.join(batch.schema.names)})")
            dtypes[col] = self._column_dtype(col, batch.schema.field(col).type)
            plan.append((col, "count"))
            needed = self._needed[col]
            if needed & {"sum", "mean"}:
                plan.append((col, "sum"))
            if "min" in needed:
                plan.append((col, "min"))
            if "max" in needed:
                plan.append((col, "max"))
        self._check_key_type(batch.schema.field(spec.key).type)
        if _encodable(batch.schema.field(spec.key).type):
            return self._fold_encoded(batch, dtypes)
        grouped = table.group_by(spec.key, use_threads=False).aggregate(plan)
        key_col = grouped.column(spec.key)
        if isinstance(key_col, pa.ChunkedArray):
            key_col = key_col.combine_chunks()
        rows = self._rows_of(key_col)
        acc = self.acc
        if spec.ttl_ms is not None:
            self._expire(rows)
        acc["count"][rows] += grouped.column("count_all").to_numpy()
        for col in spec.columns:
            dtype = dtypes[col]
            parts = {fn: _numpy_filled(grouped.column(f"{col}_{fn}")).astype(dtype, copy=False)
                     for fn in self._partials(col)}
            self._merge_partials(rows, col, dtype, grouped.column(f"{col}_count").to_numpy(),
                                 parts)
        return key_col, rows

    def _partials(self, col: str) -> list[str]:
        """The per-key partial aggregates of ``col`` a batch contributes (besides its
        non-null count)."""
        needed = self._needed[col]
        return [fn for fn in ("sum", "min", "max")
                if fn in needed or (fn == "sum" and "mean" in needed)]

    def _merge_partials(self, rows: np.ndarray, col: str, dtype: np.dtype, nn_part: np.ndarray,
                        parts: dict[str, np.ndarray]) -> None:
        """Fold one batch's per-key partials of ``col`` (its non-null count, and sum/min/max
        as :meth:`_partials` names) into the accumulators at ``rows``."""
        acc = self.acc
        nn_key = "nn:" + col
        nn_before = self._ensure(nn_key, np.int64)[rows]
        acc[nn_key][rows] = nn_before + nn_part
        seen = nn_part > 0
        if "sum" in parts:
            target = self._ensure("sum:" + col, dtype)
            target[rows] += parts["sum"]
        for fn, combine in (("min", np.minimum), ("max", np.maximum)):
            if fn not in parts:
                continue
            target = self._ensure(f"{fn}:{col}", dtype)
            part, old = parts[fn], target[rows]
            merged = np.where(nn_before > 0, combine(old, part), part)
            target[rows] = np.where(seen, merged, old)

    def _rows_of(self, key_col: pa.Array) -> np.ndarray:
        """State row of every key of ``key_col`` (distinct keys), inserting the new ones."""
        keys: np.ndarray | None = None
        rows: np.ndarray | None = None
        hashes: np.ndarray | None = None
        if _varlen(key_col.type) and self.index.key_array is not None:
            hashes = key_hashes(key_col)
            rows = self.index.lookup_arrow(key_col, hashes)
        if rows is None:
            keys = keys_to_numpy(key_col)
            # integer keys are found without hashing; hashes are then computed for new keys
            hashes = None if self.index.by_sort and keys.dtype != object else key_hashes(key_col)
            rows = self.index.lookup(keys, hashes)
        new = rows < 0
        if new.any():
            new_keys = key_col.filter(pa.array(new))
            new_hashes = hashes[new] if hashes is not None else key_hashes(new_keys)
            rows[new] = self.index.insert(keys_to_numpy(new_keys) if keys is None else keys[new],
                                          new_hashes, new_keys)
            n = self.index.n
            self.key_group = _grow(self.key_group, n)
            self.key_group[rows[new]] = (new_hashes % np.uint32(self.max_parallelism)).astype(np.int32)
            for name, arr in self.acc.items():
                arr = _grow(arr, n)
                arr[rows[new]] = 0
                self.acc[name] = arr
        return rows

    def _fold_encoded(self, batch: pa.RecordBatch | pa.Table,
                      dtypes: dict[str, np.dtype]) -> tuple[pa.Array, np.ndarray]:
        """:meth:`fold` for integer, string and binary keys: the key column is dictionary
        encoded (one hash pass in Arrow, distinct keys in order of first appearance), the
        distinct keys are looked up in the index, and the per-key partial aggregates are
        computed in numpy from the dictionary indices (``bincount``, ``ufunc.at``): about
        twice as fast as Arrow's hash aggregation, which also builds the output table."""
        spec = self.spec
        encoded = pc.dictionary_encode(batch.column(spec.key), null_encoding="encode")
        if isinstance(encoded, pa.ChunkedArray):  # a Table: one dictionary for every chunk
            chunks = encoded.chunks
            key_col = chunks[-1].dictionary
            inv = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks])
        else:
            key_col = encoded.dictionary
            inv = encoded.indices.to_numpy(zero_copy_only=False)
        k = len(key_col)
        rows = self._rows_of(key_col)
        acc = self.acc
        if spec.ttl_ms is not None:
            self._expire(rows)
        acc["count"][rows] += np.bincount(inv, minlength=k)
        for col in spec.columns:
            dtype = dtypes[col]
            column = batch.column(col)
            if column.null_count:
                if isinstance(column, pa.ChunkedArray):
                    column = column.combine_chunks()
                valid = column.is_valid().to_numpy(zero_copy_only=False)
                at = inv[valid]
                column = column.filter(pa.array(valid))
            else:
                at = inv
            values = (column.to_numpy(zero_copy_only=False) if len(column)
                      else np.empty(0, dtype=dtype)).astype(dtype, copy=False)
            parts = {}
            for fn in self._partials(col):
                part = parts[fn] = np.zeros(k, dtype=dtype)
                if fn == "sum":
                    np.add.at(part, at, values)
                elif len(at):  # the first value of each key, then fold every value in
                    part[at[::-1]] = values[::-1]
                    (np.minimum if fn == "min" else np.maximum).at(part, at, values)
            self._merge_partials(rows, col, dtype, np.bincount(at, minlength=k), parts)
        return key_col, rows

    # -- TTL ------------------------------------------------------------------------------------
    def _expire(self, rows: np.ndarray) -> None:
        """Rows about to be updated: those whose key expired start from zero; every one's
        clock restarts now (the ``_last`` accumulator: ms of its last update)."""
        now = ttl.now_ms()
        last = self._ensure(LAST_UPDATE, np.int64)
        expired = rows[(now - last[rows] >= self.spec.ttl_ms) & (last[rows] > 0)]
        if len(expired):
            for name, arr in self.acc.items():
                if name != LAST_UPDATE:
                    arr[expired] = 0
        last[rows] = now

    def drop_expired(self) -> int:
        """Remove keys not updated within the TTL (before a snapshot); returns how many."""
        n = self.index.n
        if self.spec.ttl_ms is None or not n:
            return 0
        keep = ttl.now_ms() - self._ensure(LAST_UPDATE, np.int64)[:n] < self.spec.ttl_ms
        if keep.all():
            return 0
        index = KeyIndex()
        mirror = self.index.key_array
        index.insert(self.index.take_keys()[keep], self.index.hashes[:n][keep],
                     None if mirror is None else mirror.filter(pa.array(keep)))
        self.index = index
        self.key_group = self.key_group[:n][keep]
        self.acc = {name: arr[:n][keep] for name, arr in self.acc.items()}
        return int(n - keep.sum())

    def _check_key_type(self, arrow_type: pa.DataType) -> None:
        kind = _key_kind(arrow_type)
        if kind == "null":
            return
        if self._key_kind is None:
            self._key_kind = kind
        elif kind != self._key_kind:
            raise TypeError(f"aggregate {self.uid!r}: key column {self.spec.key!r} changed type "
                            f"from {self._key_kind} to {arrow_type}; keys of one operator must "
                            "have one type (cast the column before key_by)")

    def _ensure(self, name: str, dtype) -> np.ndarray:
        arr = self.acc.get(name)
        if arr is None:
            arr = np.zeros(max(len(self.acc["count"]), self.index.n), dtype=dtype)
            self.acc[name] = arr
        elif arr.dtype != dtype:
            arr = arr.astype(dtype)
            self.acc[name] = arr
        return arr

    def _output(self, key_col, rows: np.ndarray) -> pa.RecordBatch:
        arrays, names = [key_col.combine_chunks() if isinstance(key_col, pa.ChunkedArray)
                         else key_col], [self.spec.key]
        acc = self.acc
        for out, fn, col in self.spec.aggregations:
            if fn == "count":
                values = acc["count" if col is None else "nn:" + col][rows]
                arrays.append(pa.array(values, pa.int64()))
            else:
                assert col is not None  # sum/min/max/mean name their column
                nn = acc["nn:" + col][rows]
                if fn == "mean":
                    with np.errstate(invalid="ignore", divide="ignore"):
                        values = acc["sum:" + col][rows] / nn
                else:
                    values = acc[f"{fn}:{col}"][rows]
                arrays.append(pa.array(values, mask=nn == 0))
            names.append(out)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def warm_up(self) -> None:
        """Run one tiny update and snapshot (on a throw-away table): loads Arrow's compute
        kernels, codecs and the modules pyarrow imports lazily (pandas: ~1.5 s)."""
        for key in (pa.array(["x"]), pa.array([1])):
            table = AggregateTable(self.spec, self.key_groups, self.max_parallelism, self.uid)
            columns = {self.spec.key: key}
            columns.update({c: pa.array([1], pa.int64()) for c in self.spec.columns})
            table.update(pa.RecordBatch.from_pydict(columns))
            table.restore(table.serialize(table.copy())[0])

    # -- the KeyedStateBackend protocol (state/backend.py) ------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        """Copy every column now (memcpy speed); ``write`` encodes the Arrow IPC file."""
        self.drop_expired()
        columns = self.copy()

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            return write_state_file(chk_dir, stem, "arrow", self.serialize(columns)[0],
                                    {"type": "arrow"})

        return StateSnapshot({"aggregate": {"kind": "aggregate", "serializer": "arrow",
                                            "spec": self.spec.describe()}}, write)

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        if "window" in states:
            raise RestoreError(
                f"operator {self.uid!r}: the snapshot holds windowed aggregate state; an "
                "aggregate() without windows needs a new uid (restore with "
                "allow_non_restored_state=True)")
        spec = (states.get("aggregate") or {}).get("spec")
        for handle in handles:
            self.restore(read_state_file(directory, handle), spec)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every snapshot is one self-contained file."""

    def close(self) -> None:
        """Nothing to release."""

    # -- snapshot / restore ---------------------------------------------------------------
    def copy(self) -> dict[str, np.ndarray]:
        """Synchronous part of a snapshot: a private copy of every column (memcpy speed)."""
        n = self.index.n
        out = {"key_group": self.key_group[:n].copy(), "key": self.index.take_keys().copy()}
        for name, arr in self.acc.items():
            out[name] = arr[:n].copy()
        return out

    @staticmethod
    def serialize(columns: dict[str, np.ndarray]) -> tuple[bytes, list[int]]:
        """Asynchronous part: the Arrow IPC file of a :meth:`copy` (restore selects rows by
        their key group column, so rows are written in any order).

        Returns ``(file bytes, [min key group, max key group])``."""
        names = ["key_group", "key"] + sorted(k for k in columns if k not in ("key_group", "key"))
        arrays = [pa.array(columns[name]) for name in names]
        table = pa.Table.from_arrays(arrays, names=names)
        sink = pa.BufferOutputStream()
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        with pa.ipc.new_file(sink, table.schema, options=options) as writer:
            writer.write_table(table)
        kg = columns["key_group"]
        return sink.getvalue().to_pybytes(), ([int(kg.min()), int(kg.max())] if len(kg) else [])

    def required_accumulators(self) -> dict[str, str]:
        """Accumulator column -> the aggregation that needs it."""
        out = {"count": "count"}
        for name, fn, col in self.spec.aggregations:
            if col is None:
                continue
            out.setdefault("nn:" + col, name)
            if fn in ("sum", "mean"):
                out.setdefault("sum:" + col, name)
            elif fn in ("min", "max"):
                out.setdefault(f"{fn}:{col}", name)
        return out

    def restore(self, data: bytes, restored_spec: dict | None = None) -> int:
        """Add the rows of ``data`` whose key group this subtask owns; return how many.

        Raises :class:`StateMigrationError` when an aggregation needs an accumulator the
        snapshot does not have (its values for restored keys would be wrong)."""
        table = self.owned_rows(pa.ipc.open_file(pa.py_buffer(data)).read_all(), restored_spec)
        return len(self.restore_rows(table))

    def owned_rows(self, table: pa.Table, restored_spec: dict | None) -> pa.Table:
        """The rows of a snapshot table in this subtask's key groups, after checking that the
        table keeps every accumulator the aggregations need."""
        missing = {acc: agg for acc, agg in self.required_accumulators().items()
                   if acc not in table.column_names}
        if missing:
            acc, agg = sorted(missing.items())[0]
            fn, _, col = acc.partition(":")
            written = ", ".join(f"{o}={f}({c or '*'})" for o, f, c in
                                (restored_spec or {}).get("aggregations", [])) or "unknown"
            raise StateMigrationError(
                f"operator {self.uid!r}: aggregation {agg!r} needs the {fn!r} of column "
                f"{col!r}, which the restored state does not keep (it was written by "
                f"aggregations {written}); keep those aggregations, or give the operator a "
                "new uid and restore with allow_non_restored_state=True")
        kg = table.column("key_group")
        mine = pc.and_(pc.greater_equal(kg, self.key_groups.start),
                       pc.less_equal(kg, self.key_groups.end))
        return table.filter(mine)

    def restore_rows(self, table: pa.Table) -> np.ndarray:
        """Insert the rows of :meth:`owned_rows` (keys new to this table); return their rows."""
        if not table.num_rows:
            return np.empty(0, dtype=np.int64)
        key_col = table.column("key").combine_chunks()
        self._check_key_type(key_col.type)
        hashes = key_hashes(key_col)
        rows = self.index.insert(keys_to_numpy(key_col), hashes, key_col)
        n = self.index.n
        self.key_group = _grow(self.key_group, n)
        self.key_group[rows] = table.column("key_group").to_numpy()
        for name in table.column_names:
            if name in ("key_group", "key"):
                continue
            values = table.column(name).to_numpy()
            arr = self.acc.get(name)
            if arr is None or arr.dtype != values.dtype:
                arr = (np.zeros(0, dtype=values.dtype) if arr is None
                       else arr.astype(np.result_type(arr.dtype, values.dtype)))
            arr = _grow(arr, n)
            arr[rows] = values
            self.acc[name] = arr
            if ":" in name and name.split(":", 1)[0] in ("sum", "min", "max"):
                col = name.split(":", 1)[1]
                self._value_types[col] = arr.dtype
        for name, arr in list(self.acc.items()):
            if name not in table.column_names:  # an accumulator this snapshot did not have
                arr = _grow(arr, n)
                # restored keys without an update time count as updated now
                arr[rows] = ttl.now_ms() if name == LAST_UPDATE else 0
                self.acc[name] = arr
        return rows
