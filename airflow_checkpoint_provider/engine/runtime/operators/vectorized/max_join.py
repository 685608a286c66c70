"""The expiring max-by join, vectorized: Nexmark's winning bid (q4, q6, q9) on Arrow batches.

``max_by_join(auctions.key_by("id"), bids.key_by("auction"), ...)`` (:mod:`.api`): a left
row (unique per key) is open from its ``start`` to its ``end`` time (inclusive); of the
right rows of its key whose ``right_time`` lies in that range it keeps the one with the
highest ``by`` (ties: the earlier ``right_time``, then the earlier arrival). When the
watermark passes ``end`` it emits the left row's columns and the kept right row's
``right_columns`` (renamed), once, and closes the key: later right rows match nothing. A
left row whose range saw no right row emits nothing (an inner join). Right rows that come
before their left row wait until it comes (it then takes the best of them in range), or
until the watermark passes their time (their left row would be late). The semantics of the
per-record ``WinningBid`` co-process function of the Nexmark benchmark (and of the original
Nexmark's "closed auctions"), without a Python call per record.

State (columnar in memory with either state backend, as ``aggregate()`` and ``top_n``):
the open left rows in a :class:`~.common.RowStore`, their keys in a
:class:`~..state.columnar.key_index.KeyIndex` (closed keys stay until a compaction), per key in numpy
its range and the kept right row's ``by``, time and arrival number; the kept right rows in a
second store; the waiting right rows as a third. Snapshot (an ``arrow`` keyed-state
handle): one Arrow IPC file, columns ``key_group``, ``side`` (0 an open left row, 1 a kept
right row, 2 a waiting right row), ``seq`` (arrival number) and the row as a ``left`` or
``right`` struct; a restore keeps the key groups the subtask owns (rescale). The per-record
co-process keeps other state (value and map state per key): a savepoint of one is refused
by the other (:func:`~...registry.open_operator`), name a new uid to switch.
"""

from __future__ import annotations

import copy
from typing import cast

import numpy as np
import pyarrow as pa

from ....plan.functions import RuntimeContext
from ....plan.graph import Node
from ....plan.vectorized_specs import MaxJoinSpec
from ....state.backend import StateSnapshot
from ....state.columnar.key_index import KeyIndex
from ....state.keygroups import KeyGroupRange
from ...batches import to_record_batch
from ..windowing import _CheckpointedWatermark
from .common import (
    OneFileState,
    RowStore,
    TwoInputOperator,
    arrow_snapshot,
    as_table,
    best_per_group,
    column,
    first_per_group,
    insert,
    key_array,
    lookup,
    snapshot_sides,
    struct_of,
    times_ms,
    with_key_groups,
)

STATE_NAME = "max-by-join.vectorized"
_EMPTY = pa.table({"key_group": pa.array([], pa.int32()), "side": pa.array([], pa.int8()),
                   "seq": pa.array([], pa.int64())})
OPEN, BEST, WAITING = 0, 1, 2


class MaxJoinState(OneFileState):
    """The open left rows, kept right rows and waiting right rows of one subtask (the
    KeyedStateBackend protocol)."""

    STATE = (STATE_NAME, "vectorized max-by join", "keep the keys, times and by column")

    #: closed keys tolerated beyond the open ones before a compaction
    COMPACT_MIN = 65_536

    def __init__(self, spec: MaxJoinSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 uid: str) -> None:
        self.spec, self.key_groups, self.max_parallelism, self.uid = (
            spec, key_groups, max_parallelism, uid)
        self._reset()
        self.waiting = RowStore()
        self.w_rows: pa.Table | None = None  # waiting right rows (spec.right_needed)
        self.w_time = np.empty(0, dtype=np.int64)
        self.w_seq = np.empty(0, dtype=np.int64)
        self.next_seq = 0
        self.by_dtype: np.dtype | None = None

    def _reset(self) -> None:
        self.index = KeyIndex()
        self.left = RowStore()
        self.best = RowStore()
        self.lpid = np.empty(0, dtype=np.int64)
        self.start = np.empty(0, dtype=np.int64)
        self.end = np.empty(0, dtype=np.int64)
        self.open = np.empty(0, dtype=bool)
        self.best_by = np.empty(0, dtype=np.float64)
        self.best_time = np.empty(0, dtype=np.int64)
        self.best_seq = np.empty(0, dtype=np.int64)
        self.best_pid = np.empty(0, dtype=np.int64)
        self.closed = 0

    def __len__(self) -> int:
        """Open left rows and waiting right rows."""
        return int(self.open.sum()) + len(self.w_time)

    def _grow(self, size: int) -> None:
        have = len(self.open)
        if size <= have:
            return
        n = max(size, 2 * have, 16) - have
        self.lpid = np.r_[self.lpid, np.full(n, -1, np.int64)]
        self.start = np.r_[self.start, np.zeros(n, np.int64)]
        self.end = np.r_[self.end, np.zeros(n, np.int64)]
        self.open = np.r_[self.open, np.zeros(n, bool)]
        self.best_by = np.r_[self.best_by, np.zeros(n, self.best_by.dtype)]
        self.best_time = np.r_[self.best_time, np.zeros(n, np.int64)]
        self.best_seq = np.r_[self.best_seq, np.zeros(n, np.int64)]
        self.best_pid = np.r_[self.best_pid, np.full(n, -1, np.int64)]

    def _by(self, table: pa.Table) -> np.ndarray:
        by = column(table, self.spec.by, self.uid, "by")
        values = by.to_numpy()
        values = values.astype(np.float64 if values.dtype.kind == "f" else np.int64, copy=False)
        if self.by_dtype is None or values.dtype != self.by_dtype:
            self.by_dtype = np.result_type(values.dtype, *(
                () if self.by_dtype is None else (self.by_dtype,)))
            self.best_by = self.best_by.astype(self.by_dtype)
            values = values.astype(self.by_dtype, copy=False)
        return values

    # -- input ---------------------------------------------------------------------------------
    def add_right(self, batch: pa.RecordBatch | pa.Table, seq: np.ndarray | None = None) -> None:
        spec = self.spec
        t = as_table(batch)
        for name in spec.right_needed:
            column(t, name, self.uid, "right")
        t = t.select(spec.right_needed)
        by_col = t.column(spec.by)
        if by_col.null_count:  # a null never wins
            t = t.filter(by_col.is_valid())
        if not t.num_rows:
            return
        keys = key_array(t, spec.right_key, self.uid)
        time = times_ms(t.column(spec.right_time), self.uid, spec.right_time)
        by = self._by(t)
        if seq is None:
            seq = np.arange(self.next_seq, self.next_seq + t.num_rows, dtype=np.int64)
            self.next_seq += t.num_rows
        rows = lookup(self.index, keys)
        early = rows < 0
        if early.any():
            self._wait(t.filter(pa.array(early)) if not early.all() else t,
                       time[early], seq[early])
        known = np.flatnonzero(~early)
        if len(known):
            r = rows[known]
            hit = self.open[r] & (time[known] >= self.start[r]) & (time[known] <= self.end[r])
            self._offer(t, known[hit], r[hit], by, time, seq)

    def _wait(self, rows: pa.Table, time: np.ndarray, seq: np.ndarray) -> None:
        self.w_rows = rows if self.w_rows is None or not len(self.w_time) else \
            pa.concat_tables([self.w_rows, rows.cast(self.w_rows.schema)])
        if self.w_rows.column(0).num_chunks > 64:
            self.w_rows = self.w_rows.combine_chunks()
        self.w_time = np.r_[self.w_time, time]
        self.w_seq = np.r_[self.w_seq, seq]

    def _offer(self, t: pa.Table, pos: np.ndarray, rows: np.ndarray, by: np.ndarray,
               time: np.ndarray, seq: np.ndarray) -> None:
        """Right rows ``pos`` of ``t`` for key rows ``rows``: the best per key replaces the
        kept one if better."""
        if not len(pos):
            return
        win = best_per_group(rows, by[pos], time[pos], seq[pos])
        pos, rows = pos[win], rows[win]
        b, tm = by[pos], time[pos]
        kept_b, kept_t = self.best_by[rows], self.best_time[rows]
        better = (self.best_pid[rows] < 0) | (b > kept_b) | ((b == kept_b) & (tm < kept_t))
        pos, rows = pos[better], rows[better]
        if not len(pos):
            return
        self.best_pid[rows] = self.best.append(t.take(pa.array(pos)), self.uid)
        self.best_by[rows], self.best_time[rows] = by[pos], time[pos]
        self.best_seq[rows] = seq[pos]

    def add_left(self, batch: pa.RecordBatch | pa.Table) -> None:
        spec = self.spec
        t = as_table(batch)
        if not t.num_rows:
            return
        keys = key_array(t, spec.left_key, self.uid)
        enc = keys.dictionary_encode()
        codes = enc.indices.to_numpy(zero_copy_only=False)
        if len(enc.dictionary) < len(keys):  # a key twice in the batch: its last row counts
            last = first_per_group(codes, -np.arange(len(codes)))
            last.sort()
            t, keys = t.take(pa.array(last)), keys.take(pa.array(last))
        start = times_ms(column(t, spec.start, self.uid, "start"), self.uid, spec.start)
        end = times_ms(column(t, spec.end, self.uid, "end"), self.uid, spec.end)
        rows = lookup(self.index, keys)
        new = rows < 0
        if new.any():
            rows[new] = insert(self.index, keys.filter(pa.array(new)))
            self._grow(self.index.n)
        self.lpid[rows] = self.left.append(t, self.uid)
        self.start[rows], self.end[rows] = start, end
        self.closed -= int((~self.open[rows][~new]).sum())
        self.open[rows] = True
        if self.w_rows is not None and len(self.w_time):
            self._take_waiting()

    def _take_waiting(self) -> None:
        """Waiting right rows whose key came: the best in range is kept, all leave."""
        assert self.w_rows is not None
        keys = key_array(self.w_rows, self.spec.right_key, self.uid)
        rows = lookup(self.index, keys)
        came = rows >= 0
        if not came.any():
            return
        pos = np.flatnonzero(came)
        self.w_rows = self.w_rows.combine_chunks()  # a take over chunks is slow (common.py)
        r, tm = rows[pos], self.w_time[pos]
        hit = self.open[r] & (tm >= self.start[r]) & (tm <= self.end[r])
        self._offer(self.w_rows, pos[hit], r[hit], self._by(self.w_rows), self.w_time,
                    self.w_seq)
        self._keep_waiting(~came)

    def _keep_waiting(self, mask: np.ndarray) -> None:
        if mask.all():
            return
        assert self.w_rows is not None
        self.w_rows = self.w_rows.filter(pa.array(mask))
        self.w_time, self.w_seq = self.w_time[mask], self.w_seq[mask]

    def advance(self, watermark: int) -> pa.Table | None:
        """Close the keys whose end the watermark passed; return their joined rows."""
        if len(self.w_time):  # a left row to come for these would be late
            self._keep_waiting(self.w_time + 1 > watermark)
        due = np.flatnonzero(self.open & (self.end <= watermark))
        if not len(due):
            return None
        self.open[due] = False
        self.closed += len(due)
        won = due[self.best_pid[due] >= 0]
        out = None
        if len(won):
            won = won[np.lexsort((won, self.end[won]))]
            out = self.left.take(self.lpid[won])
            right = self.best.take(self.best_pid[won])
            for src, name in self.spec.right_columns.items():
                out = _set(out, name, right.column(src))
        self._compact()
        return out

    def _compact(self) -> None:
        live = int(self.open.sum())
        if self.closed <= max(self.COMPACT_MIN, live) and \
                len(self.best) <= 2 * live + self.COMPACT_MIN:
            return
        keep = np.flatnonzero(self.open[: self.index.n])
        left = self.left.take(self.lpid[keep])
        arrays = {n: getattr(self, n)[keep] for n in
                  ("start", "end", "best_by", "best_time", "best_seq", "best_pid")}
        best_ids = arrays["best_pid"]
        has = best_ids >= 0
        best = self.best.take(best_ids[has]) if has.any() else None
        self._reset()
        self.best_by = self.best_by.astype(arrays["best_by"].dtype)
        if not len(keep):
            return
        rows = insert(self.index, key_array(left, self.spec.left_key, self.uid))
        self._grow(self.index.n)
        self.lpid[rows] = self.left.append(left, self.uid)
        for n, values in arrays.items():
            getattr(self, n)[rows] = values
        self.open[rows] = True
        self.best_pid[rows] = -1
        if best is not None:
            self.best_pid[rows[has]] = self.best.append(best, self.uid)

    # -- the KeyedStateBackend protocol ----------------------------------------------------------
    def frozen(self) -> MaxJoinState:
        """Synchronous part of a snapshot: a copy of what :meth:`capture` reads (the numpy
        columns copied, the Arrow stores shared: they are immutable)."""
        other = copy.copy(self)
        other.open, other.lpid = self.open.copy(), self.lpid.copy()
        other.best_pid, other.best_seq = self.best_pid.copy(), self.best_seq.copy()
        other.left, other.best = self.left.clone(), self.best.clone()
        other.w_seq = self.w_seq.copy()
        return other

    def capture(self) -> pa.Table | None:
        """The state as one table (the rows of a snapshot file)."""
        keep = np.flatnonzero(self.open)
        parts = []
        if len(keep):
            left = self.left.take(self.lpid[keep])
            parts.append(self._part(OPEN, left.column(self.spec.left_key), left=left,
                                    seq=np.zeros(len(keep), np.int64)))
            has = keep[self.best_pid[keep] >= 0]
            if len(has):
                best = self.best.take(self.best_pid[has])
                parts.append(self._part(BEST, best.column(self.spec.right_key), right=best,
                                        seq=self.best_seq[has]))
        if self.w_rows is not None and len(self.w_time):
            parts.append(self._part(WAITING, self.w_rows.column(self.spec.right_key),
                                    right=self.w_rows, seq=self.w_seq))
        if not parts:
            return None
        return pa.concat_tables(parts, promote_options="permissive")

    def _part(self, side: int, keys, *, seq: np.ndarray, left: pa.Table | None = None,
              right: pa.Table | None = None) -> pa.Table:
        n = len(seq)
        columns = {"side": pa.array(np.full(n, side, np.int8)), "seq": pa.array(seq, pa.int64())}
        if left is not None:
            columns["left"] = struct_of(left)
        if right is not None:
            columns["right"] = struct_of(right)
        return with_key_groups(pa.table(columns), keys, self.max_parallelism)

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        if not len(self):
            return StateSnapshot(self._meta())
        frozen = self.frozen()

        def capture() -> pa.Table:
            table = frozen.capture()
            return table if table is not None else _EMPTY

        return arrow_snapshot(self._meta(), capture)

    def spec_for_restore(self, spec: dict) -> dict:
        return {k: v for k, v in spec.items() if k != "right_columns"}

    def load(self, table: pa.Table) -> None:
        """Rows of :meth:`capture` (this subtask's key groups) into the state."""
        for kind, rows, seq in snapshot_sides(table, (OPEN, "left"), (BEST, "right"),
                                              (WAITING, "right")):
            if kind == OPEN:
                self.add_left(rows)
                continue
            right = rows.select(self.spec.right_needed)
            if kind == BEST:
                self.add_right(right, seq)
            else:
                self._wait(right, times_ms(right.column(self.spec.right_time), self.uid,
                                           self.spec.right_time), seq)
            self.next_seq = max(self.next_seq, int(seq.max()) + 1)


def _set(table: pa.Table, name: str, values) -> pa.Table:
    at = table.schema.get_field_index(name)
    return table.set_column(at, name, values) if at >= 0 else table.append_column(name, values)


class MaxJoinOperator(_CheckpointedWatermark, TwoInputOperator):
    """Input 1: the left rows (unique per key), input 2: the right rows; Arrow batches."""

    backend: MaxJoinState  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.spec = cast(MaxJoinSpec, node.payload)
        self.backend = MaxJoinState(self.spec, key_groups, max_parallelism, cast(str, node.uid))

    def open(self, restored_operator_state):
        self._restore_watermark(restored_operator_state)

    def process_input(self, input: int, batch: pa.RecordBatch) -> list:
        if len(batch):
            (self.backend.add_left if input == 1 else self.backend.add_right)(batch)
        return []

    def on_watermark(self, watermark):
        out = self.backend.advance(self._advance(watermark))
        if out is None or not out.num_rows:
            return []
        return [to_record_batch(out, f"max-by join {self.uid!r}")]
