"""Exact ``count_distinct`` for the built-in keyed aggregations, vectorized.

``aggregate(bidders=("count_distinct", "bidder"))`` keeps, per key, the exact set of the
column's distinct non-null values (SQL's ``COUNT(DISTINCT x)``; a filtered count, SQL's
``COUNT(DISTINCT x) FILTER (WHERE p)``, is the count of a column that is null where ``p``
is false). Every distinct column of an operator is one :class:`PairSet`: the set of
``(key row, value)`` pairs seen, probed a batch at a time in numpy (no Python per record):

* integer values in ``[0, 2**40)`` with fewer than ``2**23`` keys: the pair packs into one
  int64 (``row << 40 | value``), found by binary search in sorted runs (``IntSet``);
* anything else (strings, binary, other integers): the pair is the bytes ``row`` (8 bytes)
  ``+ value``, found by hash probing with the key comparison in Arrow (``KeyIndex``).

Snapshot: the aggregate's Arrow IPC file (:mod:`.aggregates`) gets, per distinct column,
``nd:<col>`` (the count, int64) and ``distinct:<col>`` (values of the key, a list column),
with the key group on every row, so a restore at any parallelism reads the keys of the key
groups it owns with their sets. The file is written from parts (:mod:`.snapshot_parts`):
first the pairs, a part per run of pairs of every distinct column (:class:`PairRuns`): a row
per key with pairs in the run (``_pairs`` true, its values of each column in that column's
list, the accumulators 0); then the key rows (accumulators, empty lists) a part per
``2**snapshot_parts.PART_SHIFT`` rows. A run of pairs never changes (a set only grows), so a
snapshot encodes the pairs added since the last one, not every set (grouping and
compressing every pair at every checkpoint was Nexmark q16's checkpoint cost). :func:`classic_table` merges
the runs into one row per key with all its values: the layout files of earlier commits
have (no ``_pairs`` column), which restore as before. The state is columnar in memory with
either state backend, like the rest of ``aggregate()``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import CorruptCheckpointError, PipelineDefinitionError
from ..backend import StateSnapshot
from ..key_hashing import key_hashes
from ..keygroups import KeyGroupRange
from .aggregates import AggregateSpec, AggregateTable
from .key_index import IntSet, KeyIndex, _grow, _varlen, keys_to_numpy
from .snapshot_parts import PART_SHIFT, read_table

__all__ = ["DISTINCT", "DistinctAggregateTable", "PairRuns", "PairSet", "classic_table",
           "has_distinct", "read_aggregate_table"]

#: the aggregation function name
DISTINCT = "count_distinct"
PACK_BITS = 40
MAX_PACKED_ROWS = 1 << (63 - PACK_BITS)
#: pairs of a sealed run at least (a part of the snapshot file: :class:`PairRuns`); twice
#: the rows of an aggregate's part when the ``COLUMNAR_PART_ROWS`` setting sets those
PAIR_ROWS = 2 << PART_SHIFT
#: the column that tells rows of pairs (true) from the rows of the keys
PAIRS = "_pairs"


def has_distinct(spec: AggregateSpec) -> bool:
    return any(fn == DISTINCT for _, fn, _ in spec.aggregations)


def _value_kind(arrow_type: pa.DataType) -> str | None:
    if pa.types.is_integer(arrow_type):
        return "integer"
    if _varlen(arrow_type):
        return "bytes"
    if pa.types.is_null(arrow_type):
        return None
    raise TypeError(f"has type {arrow_type}; count_distinct takes integer, string or binary "
                    "columns (cast others, e.g. a timestamp to int64, first)")


def _fixed_bytes(values: np.ndarray) -> pa.Array:
    """int64 values as 8-byte little-endian binary strings."""
    data = np.ascontiguousarray(values.astype("<i8", copy=False))
    fixed = pa.Array.from_buffers(pa.binary(8), len(values), [None, pa.py_buffer(data)])
    return fixed.cast(pa.binary())


class PairSet:
    """The exact set of ``(row, value)`` pairs of one distinct column (see module doc)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.kind: str | None = None  # "integer" or "bytes": values of one column, one type
        self.packed = True
        self.members = IntSet()  # the packed pairs
        self.index = KeyIndex()  # the byte pairs
        self.n = 0
        self.rows = np.empty(0, dtype=np.int64)  # row of every pair, insertion order
        self._chunks: list[pa.Array] = []  # their values, insertion order
        #: changes when the pairs are renumbered (_unpack): every run of them is new
        self.generation = 0

    def __len__(self) -> int:
        return self.n

    def values(self) -> pa.Array:
        if len(self._chunks) != 1:
            typ = pa.int64() if self.kind == "integer" else pa.binary()
            self._chunks = [pa.concat_arrays(self._chunks) if self._chunks
                            else pa.array([], typ)]
        return self._chunks[0]

    def add(self, rows: np.ndarray, values: pa.Array) -> np.ndarray:
        """Add the pairs ``(rows[i], values[i])`` (no nulls); return the row of every pair
        that was new (once per pair)."""
        if not len(values):
            return np.empty(0, dtype=np.int64)
        try:
            kind = _value_kind(values.type)
        except TypeError as e:
            raise TypeError(f"{self.what}: {e}") from None
        if kind is None:
            return np.empty(0, dtype=np.int64)
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TypeError(f"{self.what}: the column changed type from {self.kind} to "
                            f"{values.type}; cast it to one type before aggregate()")
        if kind == "integer":
            values = values.cast(pa.int64())
            ints = values.to_numpy(zero_copy_only=False)
            if self.packed and not (len(rows) and rows.max() < MAX_PACKED_ROWS
                                    and ints.min() >= 0 and ints.max() < (1 << PACK_BITS)):
                self._unpack()
            if self.packed:
                return self._add_packed(rows, ints, values)
        else:
            values = values.cast(pa.large_binary() if pa.types.is_large_string(values.type)
                                 or pa.types.is_large_binary(values.type) else pa.binary())
        return self._add_bytes(rows, values)

    def _record(self, rows: np.ndarray, values: pa.Array) -> None:
        k = len(rows)
        self.rows = _grow(self.rows, self.n + k)
        self.rows[self.n:self.n + k] = rows
        self.n += k
        if k:
            if self.kind == "bytes" and values.type != pa.binary():
                values = values.cast(pa.binary())
            self._chunks.append(values)

    def _add_packed(self, rows: np.ndarray, ints: np.ndarray, values: pa.Array) -> np.ndarray:
        keys = (rows.astype(np.int64) << PACK_BITS) | ints
        uniq, first = np.unique(keys, return_index=True)
        new = self.members.add(uniq)
        if not new.any():
            return np.empty(0, dtype=np.int64)
        at = first[new]
        self._record(rows[at], values.take(pa.array(at)))
        return rows[at]

    def _pair_keys(self, rows: np.ndarray, values: pa.Array) -> pa.Array:
        vb = (_fixed_bytes(values.to_numpy(zero_copy_only=False)) if self.kind == "integer"
              else values)
        rb = _fixed_bytes(rows)
        if pa.types.is_large_binary(vb.type):
            rb = rb.cast(pa.large_binary())
        return pc.binary_join_element_wise(rb, vb, pa.scalar(b"", rb.type))

    def _add_bytes(self, rows: np.ndarray, values: pa.Array) -> np.ndarray:
        keys = self._pair_keys(rows, values)
        encoded = pc.dictionary_encode(keys)
        uniq = encoded.dictionary
        _, first = np.unique(encoded.indices.to_numpy(zero_copy_only=False), return_index=True)
        hashes = key_hashes(uniq)
        found = self.index.lookup_arrow(uniq, hashes)
        if found is None:
            found = self.index.lookup(keys_to_numpy(uniq), hashes)
        new = found < 0
        if not new.any():
            return np.empty(0, dtype=np.int64)
        fresh = uniq.filter(pa.array(new))
        self.index.insert(keys_to_numpy(fresh), hashes[new], fresh)
        at = first[new]
        self._record(rows[at], values.take(pa.array(at)))
        return rows[at]

    def _unpack(self) -> None:
        """From packed int64 pairs to byte pairs (a value outside the packed range came)."""
        rows, values = self.rows[:self.n].copy(), self.values()
        self.packed = False
        self.generation += 1
        self.members = IntSet()
        self.index, self.n, self.rows, self._chunks = KeyIndex(), 0, np.empty(0, np.int64), []
        if len(rows):
            self._add_bytes(rows, values)

    def snapshot(self) -> tuple[np.ndarray, pa.Array]:
        """The pairs now (rows copied; the Arrow values are immutable)."""
        return self.rows[:self.n].copy(), self.values()

    def value_type(self) -> pa.DataType:
        return pa.int64() if self.kind == "integer" else pa.binary()

    def run(self, lo: int, hi: int) -> tuple[np.ndarray, pa.Array]:
        """Pairs ``lo:hi`` (rows copied; the Arrow values are immutable), from the chunks
        that hold them (not a concatenation of every value: that is O(pairs))."""
        parts, start = [], 0
        for chunk in self._chunks:
            end = start + len(chunk)
            if end > lo and start < hi:
                parts.append(chunk.slice(max(lo - start, 0), min(hi, end) - max(lo, start)))
            if end >= hi:
                break
            start = end
        values = (parts[0] if len(parts) == 1 else pa.concat_arrays(parts) if parts
                  else pa.array([], self.value_type()))
        return self.rows[lo:hi].copy(), values


Bound = tuple[int, ...]  # pairs of each distinct column, in the column order


class PairRuns:
    """How the pairs of an aggregate's distinct columns are cut into the runs of its
    snapshots (a part each, :mod:`.snapshot_parts`): a run is encoded once, and copied as
    bytes by every later snapshot while it is unchanged. A run holds, per column, a range of
    its pairs (``start[i]:end[i]``), in one table: a row per key with pairs in the run,
    whichever columns they are of (a run per column repeated each key's row and its
    accumulators once per column: Nexmark q16's 8 columns over 10,000 keys).

    Each snapshot puts the pairs added since the last one in a run of their own, so no pair
    is encoded again at every checkpoint (runs of a fixed :data:`PAIR_ROWS` encoded their
    last, partly filled run at every checkpoint: 1.6x the pairs on Nexmark q16 at 1 s).
    Runs of fewer than ``size`` pairs stay *open*: the last two merge while the older one
    is at most twice the newer (a binary counter), so there are a few of them however
    small each checkpoint's pairs are, and a pair is encoded again about log2(``size`` /
    pairs per checkpoint) times at most; an open run of ``size`` pairs or more is
    *sealed*, never encoded again, and comes before the open ones, in the order the runs
    were sealed. More than ``SPLIT_RUNS`` runs' worth of new pairs of a column (a restore)
    are cut into sealed runs of ``size`` of that column."""

    SPLIT_RUNS = 16

    def __init__(self) -> None:
        self.sealed: list[tuple[Bound, Bound]] = []
        self.open: list[tuple[Bound, Bound]] = []
        self.end: Bound = ()
        self.generation: object = None

    def cut(self, counts: Bound, generation: object, size: int
            ) -> list[tuple[Bound, Bound]]:
        """The runs ``(start, end)`` of ``counts`` pairs per column, the sealed first;
        ``generation`` changes when pairs are renumbered (every run is new)."""
        if (generation != self.generation or len(counts) != len(self.end)
                or any(n < e for n, e in zip(counts, self.end, strict=True))):
            self.sealed, self.open = [], []
            self.end, self.generation = (0,) * len(counts), generation
        for i, n in enumerate(counts):
            while n - self.end[i] > self.SPLIT_RUNS * size:
                start = self.end
                self.end = (*start[:i], start[i] + size, *start[i + 1:])
                self.sealed.append((start, self.end))
        if counts != self.end:
            self.open.append((self.end, counts))
            self.end = counts
        runs = self.open
        while len(runs) > 1 and _pairs_in(runs[-2]) <= 2 * _pairs_in(runs[-1]):
            end = runs.pop()[1]
            runs[-1] = (runs[-1][0], end)
        while runs and _pairs_in(runs[0]) >= size:
            self.sealed.append(runs.pop(0))
        return self.sealed + runs


def _pairs_in(run: tuple[Bound, Bound]) -> int:
    return sum(e - s for s, e in zip(*run, strict=True))


def _grouped(rows: np.ndarray, values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Pairs ordered by row (packed pairs: by row, then value, which compresses to about a
    tenth of the bytes in a third of the time of values in their order of arrival)."""
    ints = values.to_numpy(zero_copy_only=False) if pa.types.is_int64(values.type) else None
    if (ints is not None and len(rows) and rows.max() < MAX_PACKED_ROWS
            and ints.min() >= 0 and ints.max() < (1 << PACK_BITS)):
        packed = np.sort((rows << PACK_BITS) | ints)
        return packed >> PACK_BITS, pa.array(packed & ((1 << PACK_BITS) - 1))
    order = np.argsort(rows, kind="stable")
    return rows[order], values.take(pa.array(order))


def _as_lists(rows: np.ndarray, values: pa.Array, n: int) -> pa.ListArray:
    """Per key row ``0..n-1`` the list of its values (the pairs grouped by row)."""
    order = np.argsort(rows, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return pa.LargeListArray.from_arrays(pa.array(offsets), values.take(pa.array(order)))


class DistinctAggregateTable(AggregateTable):
    """An :class:`AggregateTable` whose spec has ``count_distinct`` aggregations: the other
    aggregations run as they do without it; the distinct ones add a :class:`PairSet` per
    column and the ``nd:<col>`` count per key."""

    def __init__(self, spec: AggregateSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 operator_uid: str) -> None:
        if spec.ttl_ms is not None:
            raise PipelineDefinitionError(
                f"aggregate {operator_uid!r}: count_distinct does not support ttl yet "
                "(drop ttl=, or count distinct values in another aggregate())")
        self.full_spec = spec
        self.distinct_columns = sorted({c for _, fn, c in spec.aggregations
                                        if fn == DISTINCT and c is not None})
        base = AggregateSpec(spec.key, [a for a in spec.aggregations if a[1] != DISTINCT])
        super().__init__(base, key_groups, max_parallelism, operator_uid)
        self.sets = {c: PairSet(f"aggregate {operator_uid!r}: count_distinct of {c!r}")
                     for c in self.distinct_columns}
        self._runs = PairRuns()
        for c in self.distinct_columns:
            self.acc["nd:" + c] = np.empty(0, dtype=np.int64)

    def _record_rows(self, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        """The state row of every record's key (every key is in the index already)."""
        encoded = pc.dictionary_encode(batch.column(self.spec.key), null_encoding="encode")
        if isinstance(encoded, pa.ChunkedArray):
            chunks = encoded.chunks
            if not chunks:
                return np.empty(0, dtype=np.int64)
            dictionary = chunks[-1].dictionary
            inv = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks])
        else:
            dictionary = encoded.dictionary
            inv = encoded.indices.to_numpy(zero_copy_only=False)
        return self._rows_of(dictionary)[inv]

    def fold(self, batch: pa.RecordBatch | pa.Table) -> tuple[pa.Array, np.ndarray]:
        for c in self.distinct_columns:
            if c not in batch.schema.names:
                raise KeyError(f"aggregate {self.uid!r}: column {c!r} is not in the input "
                               f"(columns: {', '.join(batch.schema.names)})")
        key_col, rows = super().fold(batch)
        if batch.num_rows:
            record_rows = self._record_rows(batch)
            for c in self.distinct_columns:
                column = batch.column(c)
                if isinstance(column, pa.ChunkedArray):
                    column = column.combine_chunks()
                at = record_rows
                if column.null_count:
                    valid = column.is_valid()
                    at, column = record_rows[valid.to_numpy(zero_copy_only=False)], column.filter(valid)
                new_rows = self.sets[c].add(at, column)
                nd = self.acc["nd:" + c]
                nd[:len(nd)] += np.bincount(new_rows, minlength=len(nd))[:len(nd)]
        return key_col, rows

    def _output(self, key_col, rows: np.ndarray) -> pa.RecordBatch:
        base = super()._output(key_col, rows)
        arrays, names = [base.column(0)], [self.spec.key]
        for out, fn, col in self.full_spec.aggregations:
            arrays.append(pa.array(self.acc["nd:" + col][rows], pa.int64()) if fn == DISTINCT
                          else base.column(out))
            names.append(out)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def required_accumulators(self) -> dict[str, str]:
        out = super().required_accumulators()
        for name, fn, col in self.full_spec.aggregations:
            if fn == DISTINCT:
                out.setdefault("nd:" + col, name)
                out.setdefault("distinct:" + col, name)
        return out

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        snap = super().snapshot_state(checkpoint_id)
        snap.states["aggregate"]["spec"] = self.full_spec.describe()
        return snap

    # -- snapshot from parts (module doc) ---------------------------------------------------
    def _snapshot_schema(self) -> pa.Schema:
        schema = super()._snapshot_schema()
        # (the base class keeps a placeholder accumulator per required column, these too)
        schema = pa.schema([f for f in schema if not f.name.startswith("distinct:")])
        for c in self.distinct_columns:
            schema = schema.append(pa.field("distinct:" + c,
                                            pa.large_list(self.sets[c].value_type())))
        return schema.append(pa.field(PAIRS, pa.bool_()))

    def capture_parts(self) -> tuple[pa.Schema, list[tuple]]:
        """A part per run of pairs (:class:`PairRuns`, the sealed first): its cached message
        when the run is as it was, else its pairs (the keys' columns by reference: their
        existing rows never change in place); then the key rows' parts
        (:meth:`AggregateTable.capture_parts`). The file then begins as the last one did,
        and is hashed on from there (:class:`.snapshot_parts._PrefixDigest`)."""
        schema, key_parts = super().capture_parts()
        size = 2 << self._parts.shift  # PAIR_ROWS, unless the COLUMNAR_PART_ROWS setting says so
        mirror = self.index.key_array
        keys = mirror if mirror is not None else self.index.keys
        sets = [self.sets[c] for c in self.distinct_columns]
        generation = (self._parts.generation, *(pairs.generation for pairs in sets))
        parts = []
        for start, end in self._runs.cut(tuple(pairs.n for pairs in sets), generation, size):
            key = ("pairs", *generation, start)
            message = self._parts.cache.get(key, end, schema)
            parts.append((key, end, message if message is not None else (
                [(c, *pairs.run(lo, hi)) for c, pairs, lo, hi
                 in zip(self.distinct_columns, sets, start, end, strict=True) if hi > lo],
                self.key_group, keys)))
        return schema, parts + key_parts

    def _part_table(self, part, schema: pa.Schema) -> pa.Table:
        if isinstance(part, tuple):
            return self._run_table(*part, schema=schema)
        k = len(part["key_group"])
        columns = dict(part)
        for f in schema:
            if f.name.startswith("distinct:"):
                columns[f.name] = _empty_lists(k, f.type)
        columns[PAIRS] = pa.array(np.zeros(k, dtype=bool))
        return super()._part_table(columns, schema)

    def _run_table(self, runs: list[tuple[str, np.ndarray, pa.Array]], key_group: np.ndarray,
                   keys, *, schema: pa.Schema) -> pa.Table:
        """A run of pairs, ``[(column, rows, values)]``: a row per key with pairs in it, its
        values of each column in that column's list."""
        grouped = {column: _grouped(rows, values) for column, rows, values in runs}
        uniq = np.unique(np.concatenate([rows for rows, _ in grouped.values()]))
        k = len(uniq)
        arrays = []
        for f in schema:
            if f.name == "key_group":
                arrays.append(pa.array(key_group[uniq].astype(np.int32)))
            elif f.name == "key":
                arrays.append(keys.take(pa.array(uniq)) if isinstance(keys, pa.Array)
                              else pa.array(keys[uniq]).cast(f.type))
            elif f.name.startswith("distinct:") and f.name[len("distinct:"):] in grouped:
                rows, values = grouped[f.name[len("distinct:"):]]
                offsets = np.zeros(k + 1, dtype=np.int64)
                np.cumsum(np.bincount(np.searchsorted(uniq, rows), minlength=k),
                          out=offsets[1:])
                arrays.append(pa.LargeListArray.from_arrays(
                    pa.array(offsets), values.cast(f.type.value_type)))
            elif f.name.startswith("distinct:"):
                arrays.append(_empty_lists(k, f.type))
            elif f.name == PAIRS:
                arrays.append(pa.array(np.ones(k, dtype=bool)))
            else:
                arrays.append(pa.array(np.zeros(k, dtype=f.type.to_pandas_dtype())))
        return pa.Table.from_arrays(arrays, schema=schema)

    def copy(self) -> dict:
        out: dict = super().copy()
        for c in self.distinct_columns:
            out["distinct:" + c] = self.sets[c].snapshot()
        return out

    def serialize(self, columns: dict) -> tuple[bytes, list[int]]:  # type: ignore[override]
        """One row per key with all its values, as one IPC file (the layout before parts)."""
        n = len(columns["key_group"])
        plain = {k: (_as_lists(*v, n) if k.startswith("distinct:") else v)
                 for k, v in columns.items()}
        return AggregateTable.serialize(plain)

    def restore_rows(self, table: pa.Table) -> np.ndarray:
        table = classic_table(table)
        names = [n for n in table.column_names if n.startswith("distinct:")]
        lists = {n: table.column(n).combine_chunks() for n in names}
        rows = super().restore_rows(table.drop_columns(names))
        for name, lst in lists.items():
            col = name.split(":", 1)[1]
            if col not in self.sets or not len(lst):
                continue
            parents = pc.list_parent_indices(lst).to_numpy(zero_copy_only=False)
            self.sets[col].add(rows[parents], pc.list_flatten(lst))
        return rows


def _empty_lists(k: int, list_type: pa.DataType) -> pa.Array:
    return pa.LargeListArray.from_arrays(pa.array(np.zeros(k + 1, dtype=np.int64)),
                                         pa.array([], list_type.value_type))


def classic_table(table: pa.Table) -> pa.Table:
    """A distinct aggregate's snapshot table with one row per key, each with all its values
    (the runs of pairs, rows with ``_pairs`` true, merged into their key's row in order); a
    table without ``_pairs`` (earlier commits, or no distinct column) as it is."""
    if PAIRS not in table.column_names:
        return table
    flag = table.column(PAIRS)
    own = table.filter(pc.invert(flag)).drop_columns([PAIRS])
    runs = table.filter(flag)
    if not runs.num_rows:
        return own
    keys = own.column("key").combine_chunks()
    at = pc.index_in(runs.column("key").combine_chunks(), value_set=keys)
    if at.null_count:
        raise CorruptCheckpointError(
            "a distinct aggregate's snapshot has values of a key it has no row for")
    at = at.to_numpy(zero_copy_only=False).astype(np.int64)
    n = own.num_rows
    for name in [c for c in own.column_names if c.startswith("distinct:")]:
        mine, theirs = own.column(name).combine_chunks(), runs.column(name).combine_chunks()
        parents = np.concatenate([
            pc.list_parent_indices(mine).to_numpy(zero_copy_only=False).astype(np.int64),
            at[pc.list_parent_indices(theirs).to_numpy(zero_copy_only=False)]])
        values = pa.concat_arrays([pc.list_flatten(mine), pc.list_flatten(theirs)])
        order = np.argsort(parents, kind="stable")
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(parents, minlength=n), out=offsets[1:])
        lists = pa.LargeListArray.from_arrays(pa.array(offsets), values.take(pa.array(order)))
        own = own.set_column(own.column_names.index(name), name, lists)
    return own


def read_aggregate_table(data: bytes | memoryview) -> pa.Table:
    """The table of an ``aggregate()`` snapshot file, one row per key (:func:`classic_table`)."""
    return classic_table(read_table(data))
