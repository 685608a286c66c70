"""Columnar keyed state for the built-in aggregations: one row per key, numpy columns.

An :class:`AggregateTable` keeps the accumulators of an :class:`AggregateSpec` (count,
non-null count, sum, min, max per input column) as numpy columns, one row per key; its
:class:`~.key_index.KeyIndex` gives each key its row. A batch is folded in with vectorized
kernels (Arrow's dictionary encoding or hash aggregation, then numpy per-key partials).

Snapshot file (the ``arrow`` keyed-state handle): one Arrow IPC stream, zstd-compressed,
columns ``key_group`` (int32), ``key`` and one column per accumulator, a record batch per
``2**snapshot_parts.PART_SHIFT`` rows; restore reads the rows of the key groups the subtask owns (any
parallelism). A part whose rows did not change since the last snapshot is not encoded
again: its message is copied (:mod:`.snapshot_parts`), so a checkpoint costs about the keys
updated since the last one. Files of earlier commits (one IPC file) restore as before.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import RestoreError, StateMigrationError
from ...snapshot.codec import read_state_file
from .. import ttl
from ..backend import StateSnapshot, write_state_file
from ..key_hashing import key_hashes
from ..keygroups import KeyGroupRange
from .key_index import KeyIndex, _grow, _varlen, keys_to_numpy
from .snapshot_parts import RowParts, read_table

__all__ = ["LAST_UPDATE", "AggregateSpec", "AggregateTable", "KeyIndex", "keys_to_numpy"]

#: accumulator of aggregate(ttl=...): processing time (ms) of each key's last update
LAST_UPDATE = "_last"


def _numpy_filled(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The column as numpy with nulls as 0 (``fill_null`` only when there are nulls)."""
    if column.null_count:
        column = column.fill_null(0)
    return column.to_numpy(zero_copy_only=False)


def _key_kind(arrow_type: pa.DataType) -> str:
    for kind, test in (("null", pa.types.is_null), ("integer", pa.types.is_integer),
                       ("string", pa.types.is_string), ("string", pa.types.is_large_string),
                       ("binary", pa.types.is_binary), ("binary", pa.types.is_large_binary),
                       ("floating", pa.types.is_floating), ("boolean", pa.types.is_boolean)):
        if test(arrow_type):
            return kind
    return str(arrow_type)


def _encodable(arrow_type: pa.DataType) -> bool:
    """Key types :meth:`AggregateTable._fold_encoded` handles (dictionary_encode, then the
    same index as the group_by path)."""
    return pa.types.is_integer(arrow_type) or _varlen(arrow_type)


def _counts(at: np.ndarray, k: int, sign: np.ndarray | None) -> np.ndarray:
    """Rows per dictionary index (``sign``: each row counts +1 or -1)."""
    if sign is None:
        return np.bincount(at, minlength=k)
    return np.bincount(at, weights=sign, minlength=k).round().astype(np.int64)


class AggregateSpec:
    """The aggregations of one ``aggregate()`` operator: ``[(output, function, column)]``.

    Functions: ``count`` (rows, or non-null values of ``column``), ``sum``, ``min``, ``max``,
    ``mean`` (of non-null values; null while a key has none).
    """

    FUNCTIONS = ("count", "sum", "min", "max", "mean")
    #: what ``aggregate(emit=...)`` accepts (``None``: by the input)
    EMIT_MODES = ("update", "changelog", "upsert")

    def __init__(self, key: str, aggregations: list[tuple[str, str, str | None]],
                 ttl_ms: int | None = None) -> None:
        self.key = key
        self.aggregations = aggregations
        self.columns = sorted({c for _, _, c in aggregations if c is not None})
        #: a key not updated for this long (processing time) starts over, and leaves the
        #: next checkpoint
        self.ttl_ms = ttl_ms
        #: the output: None (update rows; a changelog for changelog input), "update",
        #: "changelog" or "upsert" (runtime/operators/changelog_agg.py)
        self.emit: str | None = None

    def describe(self) -> dict:
        out: dict[str, object] = {"key": self.key,
                                  "aggregations": [list(a) for a in self.aggregations]}
        if self.ttl_ms is not None:
            out["ttl_ms"] = self.ttl_ms
        if self.emit is not None:
            out["emit"] = self.emit
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
        self._parts = RowParts()  # snapshots from parts (.snapshot_parts)

    def __len__(self) -> int:
        return self.index.n

    def _touch(self, rows: np.ndarray) -> None:
        """Rows whose key or accumulators changed: their parts are encoded again at the next
        snapshot."""
        self._parts.touch(self.index.n, rows)

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

    def fold(self, batch: pa.RecordBatch | pa.Table,
             sign: np.ndarray | None = None) -> tuple[pa.Array, np.ndarray]:
        """Fold ``batch`` into the accumulators; return the distinct keys it touched and
        their rows. ``sign`` (int64, +1/-1 per row; changelog input, see
        :mod:`...runtime.operators.changelog_agg`) weighs each row: -1 retracts it from count,
        non-null count and sum (min/max cannot retract: the caller refuses those)."""
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
        self.check_key_type(batch.schema.field(spec.key).type)
        if sign is not None or _encodable(batch.schema.field(spec.key).type):
            return self._fold_encoded(batch, dtypes, sign)
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
        self._touch(rows)
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
            # every value retracted: drop the float rounding residue, so a key that comes
            # back starts from 0 whether or not a snapshot (drop_retracted) came between
            target[rows] = np.where(acc[nn_key][rows] == 0, 0, target[rows])
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
            self._touch(rows[new])
        return rows

    def _fold_encoded(self, batch: pa.RecordBatch | pa.Table, dtypes: dict[str, np.dtype],
                      sign: np.ndarray | None = None) -> tuple[pa.Array, np.ndarray]:
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
        acc["count"][rows] += _counts(inv, k, sign)
        for col in spec.columns:
            dtype = dtypes[col]
            column = batch.column(col)
            weights = sign
            if column.null_count:
                if isinstance(column, pa.ChunkedArray):
                    column = column.combine_chunks()
                valid = column.is_valid().to_numpy(zero_copy_only=False)
                at = inv[valid]
                column = column.filter(pa.array(valid))
                weights = None if sign is None else sign[valid]
            else:
                at = inv
            values = (column.to_numpy(zero_copy_only=False) if len(column)
                      else np.empty(0, dtype=dtype)).astype(dtype, copy=False)
            if weights is not None:
                values = values * weights.astype(dtype, copy=False)
            parts = {}
            for fn in self._partials(col):
                part = parts[fn] = np.zeros(k, dtype=dtype)
                if fn == "sum":
                    np.add.at(part, at, values)
                elif len(at):  # the first value of each key, then fold every value in
                    part[at[::-1]] = values[::-1]
                    (np.minimum if fn == "min" else np.maximum).at(part, at, values)
            self._merge_partials(rows, col, dtype, _counts(at, k, weights), parts)
        if sign is not None:
            # a key with no rows left is gone (drop_retracted removes it at the next
            # snapshot): if it comes back first, it starts from zero all the same
            gone = rows[acc["count"][rows] == 0]
            for name, arr in acc.items():
                if name != LAST_UPDATE:
                    arr[gone] = 0
        self._touch(rows)
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
        return self._keep(keep)

    def drop_retracted(self) -> int:
        """Remove keys whose rows were all retracted (count 0: changelog input) before a
        snapshot; returns how many."""
        n = self.index.n
        return self._keep(self.acc["count"][:n] != 0) if n else 0

    def _keep(self, keep: np.ndarray) -> int:
        """Keep the rows where ``keep`` is true (one bool per key); returns how many went."""
        n = self.index.n
        if keep.all():
            return 0
        index = KeyIndex()
        mirror = self.index.key_array
        index.insert(self.index.take_keys()[keep], self.index.hashes[:n][keep],
                     None if mirror is None else mirror.filter(pa.array(keep)))
        self.index = index
        self.key_group = self.key_group[:n][keep]
        self.acc = {name: arr[:n][keep] for name, arr in self.acc.items()}
        self._parts.renumbered(self.index.n)
        return int(n - keep.sum())

    def check_key_type(self, arrow_type: pa.DataType) -> None:
        """The key-type rule of an update and of a restore (the pre-flight check runs it
        too, ``ckpt verify-restore``): one key type per operator."""
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
            table.restore(table.write_parts(table.capture_parts()))

    # -- the KeyedStateBackend protocol (state/backend.py) ------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        """Copy the rows of the parts that changed since their message was made (memcpy
        speed); ``write`` encodes those and copies the others' messages (one IPC stream)."""
        self.drop_expired()
        self.drop_retracted()
        captured = self.capture_parts()

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            pieces, digest = self.write_pieces(captured)
            return write_state_file(chk_dir, stem, "arrow", pieces, {"type": "arrow"},
                                    digest=digest)

        return StateSnapshot({"aggregate": {"kind": "aggregate", "serializer": "arrow",
                                            "spec": self.spec.describe()}}, write)

    def capture_parts(self) -> tuple[pa.Schema, list[tuple]]:
        """Synchronous part of a snapshot: per part of ``2**snapshot_parts.PART_SHIFT`` rows, its cached
        message when none of its rows changed since it was made, else a copy of its rows."""
        schema = self._snapshot_schema()
        return schema, self._parts.capture(self.index.n, schema, self._part_columns)

    def write_parts(self, captured: tuple[pa.Schema, list[tuple]]) -> bytes:
        """Asynchronous part: the snapshot file (an IPC stream) of a :meth:`capture_parts`."""
        return b"".join(self.write_pieces(captured)[0])

    def write_pieces(self, captured: tuple[pa.Schema, list[tuple]]) -> tuple[list[bytes], str]:
        """:meth:`write_parts` as the file's pieces, and its SHA-256
        (:meth:`.snapshot_parts.PartCache.pieces`)."""
        schema, parts = captured
        return self._parts.cache.pieces(schema, [
            (key, version, part if isinstance(part, bytes) else self._part_table(part, schema))
            for key, version, part in parts])

    def _part_columns(self, lo: int, hi: int) -> dict:
        """A copy of rows ``lo:hi`` (the keys as Arrow data when the index mirrors them)."""
        mirror = self.index.key_array
        out: dict = {"key_group": self.key_group[lo:hi].copy(),
                     "key": (mirror.slice(lo, hi - lo) if mirror is not None
                             else self.index.take_keys()[lo:hi].copy())}
        for name, arr in self.acc.items():
            out[name] = arr[lo:hi].copy()
        return out

    def _part_table(self, columns: dict, schema: pa.Schema) -> pa.Table:
        """The table of a part captured by :meth:`_part_columns`."""
        return pa.Table.from_arrays(
            [columns[f.name] if isinstance(columns[f.name], pa.Array)
             else pa.array(columns[f.name]) for f in schema], schema=schema)

    def _snapshot_schema(self) -> pa.Schema:
        """The columns of the snapshot file: ``key_group``, ``key``, the accumulators."""
        keys, mirror = self.index.take_keys(), self.index.key_array
        if mirror is not None:
            key_type = mirror.type
        elif keys.dtype != object:
            key_type = pa.from_numpy_dtype(keys.dtype)
        else:  # Python objects (keys with nulls): Arrow infers the type from them all
            key_type = pa.array(keys).type if len(keys) else pa.null()
        names = sorted(self.acc)
        return pa.schema([("key_group", pa.int32()), ("key", key_type)]
                         + [(name, pa.from_numpy_dtype(self.acc[name].dtype)) for name in names])

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
        table = self.owned_rows(read_table(data), restored_spec)
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
        self.check_key_type(key_col.type)
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
        self._touch(rows)
        for name, arr in list(self.acc.items()):
            if name not in table.column_names:  # an accumulator this snapshot did not have
                arr = _grow(arr, n)
                # restored keys without an update time count as updated now
                arr[rows] = ttl.now_ms() if name == LAST_UPDATE else 0
                self.acc[name] = arr
        return rows
