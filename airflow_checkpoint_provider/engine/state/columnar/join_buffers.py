"""Columnar state of the vectorized joins: each side's buffered rows as one Arrow table.

A :class:`SideBuffer` holds the rows of one input that can still match (interval join) or
whose window has not fired (window join): the rows themselves as a ``pyarrow.Table`` (the
input's own columns, appended batch by batch without copying), and per row in numpy its
key group, its time (the row's event time in an interval join, its window's start in a
window join: a row of a sliding window join is held once per window) and whether it
matched a row of the other side (for outer joins). Rows leave by a vectorized filter when
the watermark passes their bound. :class:`JoinState` is the two buffers of one operator
subtask and implements the keyed-state backend protocol (:mod:`..backend`), like the
tables of ``aggregate()``: the state is columnar in memory whichever state backend the job
names (``heap`` or ``rocksdb``) and every snapshot is one self-contained Arrow file.

Snapshot file (the ``arrow`` keyed-state handle): one Arrow IPC file, zstd-compressed, one
row per buffered row: ``key_group`` (int32), ``key``, ``side`` (int8: 0 left, 1 right),
``time`` (int64), ``matched`` (bool), and the row in ``left`` or ``right`` (a struct column
of that side's fields, null on the other side's rows). A restore keeps the rows of the key
groups the subtask owns, so the state rescales by key group like every keyed state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import BadRecordError, RestoreError, StateMigrationError
from ...snapshot.codec import read_state_file
from ..backend import StateSnapshot, write_state_file
from ..keygroups import KeyGroupRange

#: state name and kind in ``_metadata`` per join kind (the row path's names differ)
STATE_NAMES = {"interval_join": "interval-join.vectorized",
               "window_join": "window-join.vectorized"}
#: combine a buffer's chunks once it has this many (appends are zero-copy chunk lists)
MAX_CHUNKS = 64
SIDE_COLUMNS = ("left", "right")


def concat(tables: list[pa.Table], uid: str) -> pa.Table:
    """Tables of one side (or join output) as one: columns missing in some become null,
    compatible types are widened (``null`` -> any, ``int64`` -> ``double``)."""
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise BadRecordError(
            f"operator {uid!r}: the join's rows changed a column's type to one that cannot be "
            f"combined with the earlier rows ({exc}); cast the column in a map_batches() before "
            "the join") from None


class SideBuffer:
    """The buffered rows of one input of a vectorized join."""

    def __init__(self, key_field: str) -> None:
        self.key_field = key_field
        self.rows: pa.Table | None = None
        #: the side's columns once known (from rows or a restore), also while empty
        self.schema: pa.Schema | None = None
        self.key_group = np.empty(0, dtype=np.int32)
        self.time = np.empty(0, dtype=np.int64)
        self.matched = np.empty(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.time)

    def append(self, rows: pa.Table, key_group: np.ndarray, time: np.ndarray,
               matched: np.ndarray, uid: str) -> None:
        if not rows.num_rows:
            return
        self.rows = rows if self.rows is None or not len(self) else concat([self.rows, rows], uid)
        if self.rows.num_columns and self.rows.column(0).num_chunks > MAX_CHUNKS:
            self.rows = self.rows.combine_chunks()
        self.schema = self.rows.schema
        self.key_group = np.concatenate([self.key_group, key_group.astype(np.int32, copy=False)])
        self.time = np.concatenate([self.time, time])
        self.matched = np.concatenate([self.matched, matched])

    def keys(self) -> pa.ChunkedArray:
        assert self.rows is not None
        return self.rows.column(self.key_field)

    def take(self, rows: np.ndarray) -> pa.Table:
        assert self.rows is not None
        return self.rows.take(pa.array(rows, pa.int64()))

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where ``mask`` is true (a vectorized filter)."""
        if mask.all():
            return
        if self.rows is not None:
            self.rows = self.rows.filter(pa.array(mask))
        self.key_group, self.time = self.key_group[mask], self.time[mask]
        self.matched = self.matched[mask]

    def struct_type(self) -> pa.StructType:
        return pa.struct(list(self.schema)) if self.schema is not None else pa.struct([])


class JoinState:
    """Both sides' buffers of one vectorized join subtask (the KeyedStateBackend protocol)."""

    def __init__(self, kind: str, uid: str, key_groups: KeyGroupRange, max_parallelism: int,
                 key_fields: tuple[str, str], spec: dict) -> None:
        self.kind = kind
        self.state_name = STATE_NAMES[kind]
        self.uid = uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.spec = spec
        self.sides = (SideBuffer(key_fields[0]), SideBuffer(key_fields[1]))

    def size(self) -> int:
        return len(self.sides[0]) + len(self.sides[1])

    # -- snapshot -----------------------------------------------------------------------------
    def _meta(self) -> dict:
        return {self.state_name: {"kind": self.state_name, "serializer": "arrow",
                                  "spec": self.spec}}

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        """Synchronous part: the tables are immutable, the numpy columns are copied."""
        if not self.size():
            return StateSnapshot(self._meta())
        parts = [(s.rows, s.key_group.copy(), s.time.copy(), s.matched.copy())
                 if len(s) else None for s in self.sides]
        types = [s.struct_type() for s in self.sides]
        fields = [s.key_field for s in self.sides]

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            data = _serialize(parts, types, fields, self.uid)
            return write_state_file(chk_dir, stem, "arrow", data, {"type": "arrow"})

        return StateSnapshot(self._meta(), write)

    def restore_state(self, directory: str, handles: Sequence, states: dict[str, dict]) -> None:
        meta = states.get(self.state_name)
        if meta is None:
            held = ", ".join(sorted({str(m.get("kind", n)) for n, m in states.items()})) or "none"
            raise RestoreError(
                f"operator {self.uid!r}: the snapshot holds state of kind(s) {held}, not the "
                f"state of a vectorized {self.kind.replace('_', ' ')} ({self.state_name}): a "
                "vectorized join restores only its own savepoints; keep vectorized= as it was "
                "when the snapshot was taken, or give the operator a new uid and restore with "
                "allow_non_restored_state=True")
        restored = meta.get("spec") or {}
        if self.kind == "window_join" and restored.get("window") != self.spec.get("window"):
            raise StateMigrationError(
                f"operator {self.uid!r}: the snapshot's join windows are "
                f"{restored.get('window')}, the operator now declares {self.spec.get('window')};"
                " open windows cannot be re-cut: keep the window, or give the operator a new uid")
        for handle in handles:
            self._restore_file(read_state_file(directory, handle))

    def _restore_file(self, data: bytes) -> None:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        kg = table.column("key_group")
        table = table.filter(pc.and_(pc.greater_equal(kg, self.key_groups.start),
                                     pc.less_equal(kg, self.key_groups.end)))
        side_col = table.column("side").to_numpy()
        for i, (side, column) in enumerate(zip(self.sides, SIDE_COLUMNS, strict=True)):
            struct_type = table.schema.field(column).type
            if side.schema is None and struct_type.num_fields:
                side.schema = pa.schema(list(struct_type))
            sel = np.flatnonzero(side_col == i)
            if not len(sel):
                continue
            part = table.take(pa.array(sel))
            rows = pa.Table.from_batches(
                [pa.RecordBatch.from_struct_array(part.column(column).combine_chunks())])
            side.append(rows, part.column("key_group").to_numpy().astype(np.int32),
                        part.column("time").to_numpy().astype(np.int64),
                        part.column("matched").to_numpy(zero_copy_only=False).astype(bool),
                        self.uid)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every snapshot is one self-contained file."""

    def close(self) -> None:
        """Nothing to release."""


def _serialize(parts: list, types: list[pa.StructType], key_fields: list[str],
               uid: str) -> bytes:
    """Asynchronous part of a snapshot: the Arrow IPC file of both sides' rows."""
    tables = []
    for i, part in enumerate(parts):
        if part is None:
            continue
        rows, key_group, time, matched = part
        rows = rows.combine_chunks()
        n = rows.num_rows
        struct = pa.StructArray.from_arrays([c.combine_chunks() for c in rows.columns],
                                            fields=list(rows.schema))
        other = pa.nulls(n, types[1 - i])
        tables.append(pa.table({
            "key_group": pa.array(key_group, pa.int32()),
            "key": rows.column(key_fields[i]),
            "side": pa.array(np.full(n, i, dtype=np.int8)),
            "time": pa.array(time, pa.int64()),
            "matched": pa.array(matched, pa.bool_()),
            "left": struct if i == 0 else other,
            "right": other if i == 0 else struct}))
    table = concat(tables, uid)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
