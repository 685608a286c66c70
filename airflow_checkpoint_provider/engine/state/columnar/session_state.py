"""Columnar state of ``window(SessionWindows(gap)).aggregate(...)``: the open sessions of a
subtask's keys as one Arrow table, merged a batch at a time (no Python per record).

A record at ``ts`` is the interval ``[ts, ts + gap)``; intervals of one key that overlap
merge into one session (records exactly ``gap`` apart do not: the same rule as
``window(SessionWindows).reduce``). A batch's records and the open sessions of the keys
it touches are sorted by (key, start); a new session begins where a start is at or past
the running maximum of the ends before it (in numpy, with the keys as offsets so the
running maximum restarts per key), and the accumulators of each merged session are
``ufunc.reduceat`` over its run. A session fires, is emitted and leaves the state when the
watermark reaches its ``end - 1``. A record is late, and dropped (or sent to the late
side output), when its own ``ts + gap - 1`` is at or before the watermark.

Accumulators, as for ``aggregate()``: ``count`` (rows) and per input column ``nn:`` (non-
null values), ``sum:``, ``min:``, ``max:``. Snapshot: one Arrow IPC file with
``key_group``; restore keeps the rows of its key groups (any parallelism).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import RestoreError, StateMigrationError
from ...snapshot.codec import read_state_file
from ..backend import StateSnapshot, write_state_file
from ..key_hashing import key_hashes
from ..keygroups import KeyGroupRange
from .windows import WindowSpec

__all__ = ["SessionAggregateTable"]

STATE = "session"
_OLD = "_old"


def _fill(values: np.ndarray, valid: np.ndarray, fill) -> np.ndarray:
    return np.where(valid, values, fill) if not valid.all() else values


class SessionAggregateTable:
    """Open sessions and their accumulators (the KeyedStateBackend protocol)."""

    def __init__(self, spec: WindowSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 operator_uid: str) -> None:
        self.spec = spec
        self.gap = int(spec.assigner.gap)  # type: ignore[attr-defined]
        self.key = spec.aggregate.key
        self.uid = operator_uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.sessions: pa.Table | None = None  # key, start, end, accumulators
        self.dropped_late = 0
        self.collect_late = False
        self.late: list[pa.RecordBatch] = []
        self._time_type: pa.DataType = pa.int64()

    def __len__(self) -> int:
        return 0 if self.sessions is None else self.sessions.num_rows

    # -- data ---------------------------------------------------------------------------------
    def _intervals(self, batch: pa.RecordBatch, ts: np.ndarray) -> pa.Table:
        """One session per record: its interval and its accumulators."""
        n = len(ts)
        cols = {self.key: batch.column(self.key), "start": pa.array(ts),
                "end": pa.array(ts + self.gap), "count": pa.array(np.ones(n, dtype=np.int64))}
        for col in self.spec.aggregate.columns:
            if col not in batch.schema.names:
                raise KeyError(f"window aggregate {self.uid!r}: column {col!r} is not in the "
                               f"input (columns: {', '.join(batch.schema.names)})")
            column = batch.column(col)
            t = column.type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)
                    or pa.types.is_boolean(t) or pa.types.is_decimal(t)):
                raise TypeError(f"window aggregate {self.uid!r}: column {col!r} has type {t}; "
                                "sum/min/max/mean need a numeric column")
            is_int = pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            dtype = np.int64 if is_int else np.float64
            valid = column.is_valid().to_numpy(zero_copy_only=False)
            values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype) \
                if column.null_count else column.to_numpy(zero_copy_only=False).astype(dtype)
            info = np.iinfo(np.int64) if is_int else None
            cols["nn:" + col] = pa.array(valid.astype(np.int64))
            cols["sum:" + col] = pa.array(_fill(values, valid, 0))
            cols["min:" + col] = pa.array(_fill(values, valid, info.max if info else np.inf))
            cols["max:" + col] = pa.array(_fill(values, valid, info.min if info else -np.inf))
        return pa.table(cols)

    def update(self, batch: pa.RecordBatch, watermark: int) -> list[pa.RecordBatch]:
        """Merge ``batch`` into the open sessions; nothing is emitted before they fire."""
        if not batch.num_rows:
            return []
        spec = self.spec
        if spec.timestamp.field is not None:
            t = batch.schema.field(spec.timestamp.field).type
            if pa.types.is_timestamp(t):
                self._time_type = pa.timestamp("ms", t.tz)
        ts = spec.timestamp.of_batch(batch, self.uid)
        alive = ts + (self.gap - 1) > watermark
        if not alive.all():
            late = np.flatnonzero(~alive)
            if self.collect_late:
                self.late.append(batch.take(pa.array(late)))
            else:
                self.dropped_late += len(late)
            keep = pa.array(alive)
            batch, ts = batch.filter(keep), ts[alive]
            if not batch.num_rows:
                return []
        new = self._intervals(batch, ts)
        new = new.append_column(_OLD, pa.array(np.zeros(new.num_rows, dtype=np.int8)))
        rest = None
        if self.sessions is not None and self.sessions.num_rows:
            touched = pc.is_in(self.sessions.column(self.key),
                               value_set=pc.unique(batch.column(self.key)))
            old = self.sessions.filter(touched)
            rest = self.sessions.filter(pc.invert(touched))
            old = old.append_column(_OLD, pa.array(np.ones(old.num_rows, dtype=np.int8)))
            try:
                new = new.cast(old.schema)
            except (pa.ArrowException, ValueError) as e:
                raise TypeError(f"window aggregate {self.uid!r}: the input's types changed "
                                f"({new.schema} vs {old.schema}); keep one schema") from e
            new = pa.concat_tables([old, new])
        merged = self._merge(new)
        self.sessions = merged if rest is None else pa.concat_tables(
            [rest, merged.cast(rest.schema)]).combine_chunks()
        return []

    def _merge(self, table: pa.Table) -> pa.Table:
        """Merge the overlapping sessions of each key (see the module doc)."""
        order = pc.sort_indices(table, sort_keys=[(self.key, "ascending"),
                                                  ("start", "ascending")])
        t = table.take(order).combine_chunks()
        # sorted by key: codes (in order of first appearance) ascend
        codes = pc.dictionary_encode(t.column(self.key).combine_chunks(),
                                     null_encoding="encode").indices
        codes = codes.to_numpy(zero_copy_only=False).astype(np.int64)
        start = t.column("start").to_numpy()
        end = t.column("end").to_numpy()
        n = len(start)
        lo = int(start.min())
        span = int(end.max()) - lo + 1
        if (int(codes.max()) + 1) * span < 2**62:
            offset = codes * span - lo
            reach = np.maximum.accumulate(end + offset)  # running max of ends, per key
            begins = np.empty(n, dtype=bool)
            begins[0] = True
            begins[1:] = (codes[1:] != codes[:-1]) | (start[1:] + offset[1:] >= reach[:-1])
        else:  # keys x time span too wide for int64 offsets: per row (rare)
            begins = np.ones(n, dtype=bool)
            best = end[0]
            for i in range(1, n):
                if codes[i] == codes[i - 1] and start[i] < best:
                    begins[i] = False
                    best = max(best, end[i])
                else:
                    best = end[i]
        at = np.flatnonzero(begins)
        cols = {self.key: t.column(self.key).take(pa.array(at)), "start": pa.array(start[at]),
                "end": pa.array(np.maximum.reduceat(end, at))}
        for name in t.column_names:
            if name in (self.key, "start", "end", _OLD):
                continue
            values = t.column(name).to_numpy()
            ufunc = (np.minimum if name.startswith("min:") else
                     np.maximum if name.startswith("max:") else np.add)
            cols[name] = pa.array(ufunc.reduceat(values, at))
        return pa.table(cols)

    def fire(self, watermark: int) -> list[pa.RecordBatch]:
        """Emit and drop every session whose ``end - 1`` the watermark reached."""
        s = self.sessions
        if s is None or not s.num_rows:
            return []
        due = s.column("end").to_numpy() - 1 <= watermark
        if not due.any():
            return []
        mask = pa.array(due)
        fired = s.filter(mask)
        self.sessions = s.filter(pc.invert(mask))
        return [self._emit(fired)]

    def _emit(self, s: pa.Table) -> pa.RecordBatch:
        bounds = [s.column("start").combine_chunks(), s.column("end").combine_chunks()]
        if self._time_type != pa.int64():
            bounds = [b.cast(self._time_type) for b in bounds]
        arrays, names = [s.column(self.key).combine_chunks(), *bounds], \
            [self.key, "window_start", "window_end"]
        for out, fn, col in self.spec.aggregate.aggregations:
            if fn == "count":
                arrays.append(s.column("count" if col is None else "nn:" + col).combine_chunks())
            else:
                nn = s.column("nn:" + col).to_numpy()
                if fn == "mean":
                    with np.errstate(invalid="ignore", divide="ignore"):
                        values = s.column("sum:" + col).to_numpy() / nn
                else:
                    values = s.column(f"{fn}:{col}").to_numpy()
                arrays.append(pa.array(values, mask=nn == 0))
            names.append(out)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    # -- the KeyedStateBackend protocol ---------------------------------------------------------
    def _meta(self) -> dict:
        return {STATE: {"kind": "session_aggregate", "serializer": "arrow",
                        "spec": self.spec.describe()}}

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        sessions = self.sessions  # immutable Arrow data: the synchronous part is a reference
        if sessions is None or not sessions.num_rows:
            return StateSnapshot(self._meta())

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            kg = key_hashes(sessions.column(self.key)) % np.uint32(self.max_parallelism)
            table = sessions.add_column(0, "key_group", pa.array(kg.astype(np.int32)))
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, table.schema,
                                 options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
                w.write_table(table)
            return write_state_file(chk_dir, stem, "arrow", sink.getvalue().to_pybytes(),
                                    {"type": "arrow"})

        return StateSnapshot(self._meta(), write)

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        meta = states.get(STATE)
        if meta is None:
            raise RestoreError(
                f"operator {self.uid!r}: the snapshot holds {', '.join(states) or 'no'} state, "
                "not session windows; give the operator a new uid and restore with "
                "allow_non_restored_state=True")
        if (meta.get("spec") or {}).get("window") != self.spec.assigner.describe():
            raise StateMigrationError(
                f"operator {self.uid!r}: the snapshot's sessions are "
                f"{(meta.get('spec') or {}).get('window')}, the operator now declares "
                f"{self.spec.assigner.describe()}; keep the gap, or give the operator a new uid")
        for handle in handles:
            self.restore(read_state_file(directory, handle))

    def restore(self, data: bytes) -> int:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        kg = table.column("key_group")
        mine = table.filter(pc.and_(pc.greater_equal(kg, self.key_groups.start),
                                    pc.less_equal(kg, self.key_groups.end)))
        mine = mine.drop_columns(["key_group"])
        missing = [n for n in self._columns() if n not in mine.column_names]
        if missing:
            raise StateMigrationError(
                f"operator {self.uid!r}: the restored sessions do not keep {missing[0]!r}, "
                "which the aggregations now need; keep them, or give the operator a new uid")
        if mine.num_rows:
            mine = mine.select([self.key, "start", "end", *self._columns()])
            self.sessions = mine if self.sessions is None else pa.concat_tables(
                [self.sessions, mine.cast(self.sessions.schema)]).combine_chunks()
        return mine.num_rows

    def _columns(self) -> list[str]:
        return ["count", *(f"{p}:{c}" for c in self.spec.aggregate.columns
                           for p in ("nn", "sum", "min", "max"))]

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every snapshot is one self-contained file."""

    def close(self) -> None:
        """Nothing to release."""
