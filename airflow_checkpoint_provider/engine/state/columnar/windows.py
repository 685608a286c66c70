"""Columnar state of windowed aggregations: one :class:`AggregateTable` per open window.

A window ``[start, start + size)`` fires when the watermark reaches ``start + size - 1``:
the operator emits one row per key of the window (key, ``window_start``, ``window_end``, the
aggregations). Its state is kept until the watermark passes ``start + size - 1 +
allowed_lateness``; a late record that still falls in that time updates the window and its
new result is emitted at once. Records later than that are dropped and counted.

Which keys still owe a result is a per-row ``pending`` flag, so a window that fired at some
subtasks and not at others (their watermarks differ at a barrier) restores correctly at any
parallelism.

Snapshot file (the ``arrow`` keyed-state handle): one Arrow IPC file, the columns of
:mod:`.aggregates` plus ``window`` (start, int64 ms) and ``pending`` (bool).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...errors import RestoreError, StateMigrationError
from ...eventtime import TimestampSpec, WindowAssigner
from ...snapshot.codec import read_state_file
from ..backend import StateSnapshot, write_state_file
from ..keygroups import KeyGroupRange
from .aggregates import AggregateSpec, AggregateTable
from .key_index import _grow


class WindowSpec:
    """What ``window(...).aggregate(...)`` declared."""

    def __init__(self, aggregate: AggregateSpec, assigner: WindowAssigner,
                 allowed_lateness_ms: int, timestamp: TimestampSpec) -> None:
        self.aggregate = aggregate
        self.assigner = assigner
        self.allowed_lateness_ms = allowed_lateness_ms
        self.timestamp = timestamp

    def describe(self) -> dict:
        return {**self.aggregate.describe(), "window": self.assigner.describe(),
                "allowed_lateness_ms": self.allowed_lateness_ms}


class WindowFunctionSpec:
    """What ``window(...).reduce(fn)`` or ``window(...).process(fn)`` declared."""

    def __init__(self, fn, mode: str, assigner: WindowAssigner, allowed_lateness_ms: int,
                 timestamp: TimestampSpec) -> None:
        self.fn = fn
        self.mode = mode  # "reduce" | "process"
        self.assigner = assigner
        self.allowed_lateness_ms = allowed_lateness_ms
        self.timestamp = timestamp


class WindowAggregateTable:
    """Per-(key, window) accumulators of one subtask (the KeyedStateBackend protocol)."""

    STATE = "window"

    def __init__(self, spec: WindowSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 operator_uid: str) -> None:
        self.spec = spec
        self.uid = operator_uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.windows: dict[int, AggregateTable] = {}
        self.pending: dict[int, np.ndarray] = {}
        self.dropped_late = 0
        #: keep late records for the late-data side output instead of dropping them
        self.collect_late = False
        self.late: list[pa.RecordBatch] = []
        self._time_type: pa.DataType = pa.int64()

    def _table(self, start: int) -> AggregateTable:
        table = self.windows.get(start)
        if table is None:
            table = self.windows[start] = AggregateTable(
                self.spec.aggregate, self.key_groups, self.max_parallelism, self.uid)
            self.pending[start] = np.zeros(0, dtype=bool)
        return table

    def _mark(self, start: int, rows: np.ndarray, value: bool) -> None:
        pending = self.pending[start] = _grow(self.pending[start], self.windows[start].index.n)
        pending[rows] = value

    # -- data -------------------------------------------------------------------------------
    def update(self, batch: pa.RecordBatch, watermark: int) -> list[pa.RecordBatch]:
        """Fold ``batch`` into its windows; return the updated results of windows that
        already fired (late records within the allowed lateness)."""
        spec = self.spec
        ts = spec.timestamp.of_batch(batch, self.uid)
        if spec.timestamp.field is not None:
            t = batch.schema.field(spec.timestamp.field).type
            if pa.types.is_timestamp(t):
                self._time_type = pa.timestamp("ms", t.tz)
        rows, starts = spec.assigner.assign(ts)
        last = starts + (spec.assigner.size - 1)
        alive = last + spec.allowed_lateness_ms > watermark
        if not alive.all():
            # a record is late when every window it belongs to is past its lateness
            late = np.setdiff1d(rows[~alive], rows[alive])
            if len(late):
                if self.collect_late:
                    self.late.append(batch.take(pa.array(late)))
                else:
                    self.dropped_late += len(late)
            rows, starts, last = rows[alive], starts[alive], last[alive]
        out = []
        whole = len(rows) == len(batch)
        for start in np.unique(starts):
            start = int(start)
            sel = rows[starts == start]
            part = batch if whole and len(sel) == len(batch) else batch.take(pa.array(sel))
            key_col, trows = self._table(start).fold(part)
            fired = start + spec.assigner.size - 1 <= watermark
            self._mark(start, trows, not fired)
            if fired:
                out.append(self._emit(start, key_col, trows))
        return out

    def fire(self, watermark: int) -> list[pa.RecordBatch]:
        """Emit the pending keys of every window the watermark reached; drop the state of
        windows past their allowed lateness."""
        size, lateness = self.spec.assigner.size, self.spec.allowed_lateness_ms
        out = []
        for start in sorted(self.windows):
            last = start + size - 1
            if last > watermark:
                break
            table = self.windows[start]
            rows = np.flatnonzero(self.pending[start][:table.index.n])
            if len(rows):
                out.append(self._emit(start, pa.array(table.index.take_keys()[rows]), rows))
                self.pending[start][rows] = False
            if last + lateness <= watermark:
                del self.windows[start], self.pending[start]
        return out

    def _emit(self, start: int, key_col, rows: np.ndarray) -> pa.RecordBatch:
        result = self.windows[start]._output(key_col, rows)
        n = len(rows)
        bounds = [pa.array(np.full(n, start, dtype=np.int64)),
                  pa.array(np.full(n, start + self.spec.assigner.size, dtype=np.int64))]
        if self._time_type != pa.int64():
            bounds = [b.cast(self._time_type) for b in bounds]
        arrays = [result.column(0), *bounds, *result.columns[1:]]
        names = [result.schema.names[0], "window_start", "window_end", *result.schema.names[1:]]
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def size(self) -> int:
        return sum(t.index.n for t in self.windows.values())

    # -- the KeyedStateBackend protocol ---------------------------------------------------------
    def _meta(self) -> dict:
        return {self.STATE: {"kind": "window_aggregate", "serializer": "arrow",
                             "spec": self.spec.describe()}}

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        parts = []
        for start, table in self.windows.items():
            cols = table.copy()
            n = len(cols["key"])
            if not n:
                continue
            cols["window"] = np.full(n, start, dtype=np.int64)
            cols["pending"] = self.pending[start][:n].copy()
            parts.append(cols)
        if not parts:
            return StateSnapshot(self._meta())
        columns = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            return write_state_file(chk_dir, stem, "arrow", AggregateTable.serialize(columns)[0],
                                    {"type": "arrow"})

        return StateSnapshot(self._meta(), write)

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        meta = states.get(self.STATE)
        if meta is None:
            raise RestoreError(
                f"operator {self.uid!r}: the snapshot holds aggregate() state without windows; "
                "a windowed aggregation needs a new uid (restore with allow_non_restored_state=True)")
        restored = meta.get("spec") or {}
        if restored.get("window") != self.spec.assigner.describe():
            raise StateMigrationError(
                f"operator {self.uid!r}: the snapshot's windows are {restored.get('window')}, "
                f"the operator now declares {self.spec.assigner.describe()}; open windows "
                "cannot be re-cut: keep the window, or give the operator a new uid")
        probe = AggregateTable(self.spec.aggregate, self.key_groups, self.max_parallelism, self.uid)
        for handle in handles:
            data = read_state_file(directory, handle)
            table = probe.owned_rows(pa.ipc.open_file(pa.py_buffer(data)).read_all(), restored)
            if not table.num_rows:
                continue
            window = table.column("window").to_numpy()
            pending = table.column("pending").to_numpy(zero_copy_only=False)
            body = table.drop_columns(["window", "pending"])
            for start in np.unique(window):
                sel = np.flatnonzero(window == start)
                rows = self._table(int(start)).restore_rows(body.take(pa.array(sel)))
                self._mark(int(start), rows, False)
                self.pending[int(start)][rows] = pending[sel]

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every snapshot is one self-contained file."""

    def close(self) -> None:
        """Nothing to release."""
