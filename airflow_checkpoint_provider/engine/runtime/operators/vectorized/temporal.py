"""The event-time temporal (versioned table) join, vectorized: Flink's ``FOR SYSTEM_TIME AS
OF`` on Arrow batches (Nexmark q13's bounded side input, the stream-static join).

``temporal_table_join(probe.key_by(k), table.key_by(k), uid=...)`` (:mod:`.api`) has the
semantics of the per-record :meth:`~..datastream.api.KeyedStream.temporal_join` with its
default output (:mod:`..datastream.temporal`): each table row is a version of its key's row,
valid from its event time until the key's next version (``_op`` ``-D``/``-U``: the row is
deleted then); a table without event time is a static table (every row valid since the
beginning, the last of a key wins), and its watermark holds the probes back until its
bounded source ended. A probe row joins the version of its key valid at its event time once
the watermark reaches that time: output the probe's columns, then the table columns it lacks
(without ``_op``); ``how="left"`` keeps a probe without a version, the table columns null.
Rows at or behind the watermark are late: dropped and counted (``dropped_late``).

Per watermark, no Python per row: the due probes and the versions are merged by one
``lexsort`` on (key row, time, versions first, arrival), and a running maximum gives every
probe the latest version at or before it; then the versions at or before the watermark but
each key's latest leave (and that one too if a delete), as in the per-record operator. A
static table whose input ended (the operator's watermark left the minimum: a table input
without event time holds it there until its source ends) holds one final row per key, the
row any probe time would see: probes then join at once, not at the watermark (the same rows,
emitted earlier, nothing buffered).

State (columnar in memory with either state backend): the waiting probes (a table and numpy
columns), the versions in a :class:`~.common.RowStore`, their keys in a
:class:`~..state.columnar.key_index.KeyIndex`. Snapshot (an ``arrow`` keyed-state handle): one Arrow
IPC file, columns ``key_group``, ``side`` (0 a probe, 1 a version), ``seq`` (arrival) and the
row as a ``probe`` or ``table`` struct (times are read again from the rows); a restore keeps
the key groups the subtask owns (rescale). The per-record temporal join keeps other state
(map states per key): a savepoint of one is refused by the other, name a new uid to switch.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....changelog import OP_FIELD
from ....eventtime import MIN_WATERMARK
from ....plan.functions import RuntimeContext
from ....plan.graph import Node
from ....plan.vectorized_specs import TemporalTableJoinSpec
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

STATE_NAME = "temporal-table-join.vectorized"
PROBE, VERSION = 0, 1
_EMPTY = pa.table({"key_group": pa.array([], pa.int32()), "side": pa.array([], pa.int8()),
                   "seq": pa.array([], pa.int64())})
#: the ``_op`` values that end a row (changelog.RETRACT)
_DELETES = pa.array(["-D", "-U"])


def _keep(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table if mask.all() else table.filter(pa.array(mask))


class TemporalTableJoinState(OneFileState):
    """The waiting probes and the versions of one subtask (the KeyedStateBackend protocol)."""

    STATE = (STATE_NAME, "vectorized temporal table join", "keep the keys and times")

    def __init__(self, spec: TemporalTableJoinSpec, key_groups: KeyGroupRange,
                 max_parallelism: int, uid: str) -> None:
        self.spec, self.key_groups, self.max_parallelism, self.uid = (
            spec, key_groups, max_parallelism, uid)
        self.index = KeyIndex()
        self.probes: pa.Table | None = None
        self.p_row = self.p_ts = self.p_seq = np.empty(0, dtype=np.int64)
        self._reset_versions()
        self.next_seq = 0

    def _reset_versions(self) -> None:
        self.versions = RowStore()
        self.v_row = self.v_ts = self.v_seq = self.v_pid = np.empty(0, dtype=np.int64)
        self.v_del = np.empty(0, dtype=bool)

    def __len__(self) -> int:
        """Waiting probes and kept versions."""
        return len(self.p_seq) + len(self.v_seq)

    def _seq(self, n: int, seq: np.ndarray | None) -> np.ndarray:
        if seq is None:
            seq = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        self.next_seq = max(self.next_seq, int(seq.max()) + 1) if n else self.next_seq
        return seq

    def _rows(self, keys: pa.Array) -> np.ndarray:
        rows = lookup(self.index, keys)
        new = rows < 0
        if new.any():
            fresh = keys.filter(pa.array(new))
            codes = fresh.dictionary_encode()
            first = np.sort(first_per_group(
                codes.indices.to_numpy(zero_copy_only=False), np.arange(len(fresh))))
            insert(self.index, fresh.take(pa.array(first)))
            rows[new] = lookup(self.index, fresh)
        return rows

    # -- input ---------------------------------------------------------------------------------
    def _on_time(self, t: pa.Table, ts: np.ndarray, on_time: np.ndarray,
                 seq: np.ndarray | None, key: str):
        """The rows ``on_time`` of ``t``: (rows, times, arrival numbers, key rows), or None."""
        if not on_time.any():
            return None
        t, ts = _keep(t, on_time), ts[on_time]
        seq = self._seq(len(ts), None if seq is None else seq[on_time])
        return t, ts, seq, self._rows(key_array(t, key, self.uid))

    def add_probes(self, batch: pa.RecordBatch | pa.Table, watermark: int,
                   seq: np.ndarray | None = None) -> int:
        """Buffer the probe rows after ``watermark``; return how many were late."""
        spec, t = self.spec, as_table(batch)
        ts = times_ms(column(t, spec.probe_time, self.uid, "probe time"), self.uid,
                      spec.probe_time)
        kept = self._on_time(t, ts, ts > watermark, seq, spec.probe_key)
        if kept is None:
            return len(ts)
        t, ts, seq, rows = kept
        self.p_row, self.p_ts, self.p_seq = (np.r_[self.p_row, rows], np.r_[self.p_ts, ts],
                                             np.r_[self.p_seq, seq])
        if self.probes is None or self.probes.num_rows == 0:
            self.probes = t
        else:
            self.probes = pa.concat_tables([self.probes, t], promote_options="permissive")
            if self.probes.column(0).num_chunks > 64:
                self.probes = self.probes.combine_chunks()
        return len(batch) - len(ts)

    def add_versions(self, batch: pa.RecordBatch | pa.Table, watermark: int,
                     seq: np.ndarray | None = None) -> int:
        """Keep the table rows as versions (those at or behind ``watermark`` are late: a
        table without time has none); return how many were late."""
        spec, t = self.spec, as_table(batch)
        if spec.table_time is None:
            ts = np.full(t.num_rows, MIN_WATERMARK, dtype=np.int64)
            on_time = np.ones(t.num_rows, dtype=bool)
        else:
            ts = times_ms(column(t, spec.table_time, self.uid, "table time"), self.uid,
                          spec.table_time)
            on_time = ts > watermark
        kept = self._on_time(t, ts, on_time, seq, spec.table_key)
        if kept is None:
            return len(ts)
        t, ts, seq, rows = kept
        deleted = np.zeros(len(ts), dtype=bool)
        if OP_FIELD in t.column_names:
            deleted = pc.fill_null(pc.is_in(t.column(OP_FIELD), _DELETES), False).to_numpy(
                zero_copy_only=False)
        self.v_row, self.v_ts, self.v_seq = (np.r_[self.v_row, rows], np.r_[self.v_ts, ts],
                                             np.r_[self.v_seq, seq])
        self.v_del = np.r_[self.v_del, deleted]
        self.v_pid = np.r_[self.v_pid, self.versions.append(t, self.uid)]
        if spec.table_time is None:  # one version per key: the last one
            self._clean(MIN_WATERMARK)
        return len(batch) - len(ts)

    # -- the watermark ---------------------------------------------------------------------------
    def advance(self, watermark: int) -> pa.Table | None:
        """Join the probes the watermark reached; drop the versions no probe can reach."""
        out = None
        due = self.p_ts <= watermark
        if due.any():
            assert self.probes is not None
            out = self._join(np.flatnonzero(due))
            stay = ~due
            self.probes = _keep(self.probes, stay) if stay.any() else None
            self.p_row, self.p_ts, self.p_seq = self.p_row[stay], self.p_ts[stay], \
                self.p_seq[stay]
        self._clean(watermark)
        return out

    def _join(self, due: np.ndarray) -> pa.Table | None:
        """The output rows of the probes ``due`` (positions in the waiting ones), in (time,
        arrival) order."""
        due = due[np.lexsort((self.p_seq[due], self.p_ts[due]))]
        nv, npr = len(self.v_row), len(due)
        version = np.full(npr, -1, dtype=np.int64)
        if nv:
            rows = np.r_[self.v_row, self.p_row[due]]
            ts = np.r_[self.v_ts, self.p_ts[due]]
            kind = np.r_[np.zeros(nv, np.int8), np.ones(npr, np.int8)]
            seq = np.r_[self.v_seq, np.zeros(npr, np.int64)]
            order = np.lexsort((seq, kind, ts, rows))
            is_v = order < nv
            latest = np.maximum.accumulate(np.where(is_v, np.arange(len(order)), -1))
            probe_at = np.flatnonzero(~is_v)
            cand = latest[probe_at]
            v = np.where(cand >= 0, order[np.maximum(cand, 0)], -1)
            ok = (v >= 0) & (self.v_row[np.maximum(v, 0)] == rows[order[probe_at]])
            version[order[probe_at] - nv] = np.where(ok, v, -1)
        hit = version >= 0
        hit[hit] = ~self.v_del[version[hit]]
        if self.spec.how != "left":
            due, version = due[hit], version[hit]
            hit = hit[hit]
        if not len(due):
            return None
        assert self.probes is not None
        if self.probes.column(0).num_chunks > 1:
            self.probes = self.probes.combine_chunks()
        return self._output(self.probes.take(pa.array(due)), version, hit)

    def join_static(self, batch: pa.RecordBatch | pa.Table, watermark: int
                    ) -> tuple[pa.Table | None, int]:
        """Probe rows joined at once: a table without time whose input ended (the operator's
        watermark left the minimum) holds one final row per key, the row any probe time
        would see. Returns (the joined rows, how many were late)."""
        spec, t = self.spec, as_table(batch)
        ts = times_ms(column(t, spec.probe_time, self.uid, "probe time"), self.uid,
                      spec.probe_time)
        on_time = ts > watermark
        late = len(ts) - int(on_time.sum())
        if not on_time.any():
            return None, late
        t = _keep(t, on_time)
        rows = lookup(self.index, key_array(t, spec.probe_key, self.uid))
        of_row = np.full(self.index.n + 1, -1, dtype=np.int64)  # one version per key
        of_row[self.v_row] = np.arange(len(self.v_row))
        version = of_row[rows]  # rows -1 (an unknown key): of_row[-1] is -1
        hit = version >= 0
        if spec.how != "left" and not hit.all():
            t, version, hit = _keep(t, hit), version[hit], hit[hit]
        return (self._output(t, version, hit) if t.num_rows else None), late

    def _output(self, probes: pa.Table, version: np.ndarray, hit: np.ndarray) -> pa.Table:
        """``probes`` with the table columns they lack of their ``version`` (null where
        not ``hit``)."""
        if self.versions.schema is None:  # no table row yet: nothing to add
            return probes
        table = self.versions.take(self.v_pid[version[hit]])
        if not hit.all():  # a left join's probes without a version: null table columns
            at = np.cumsum(hit) - 1
            table = table.take(pa.array(np.maximum(at, 0), mask=~hit))
        out = probes
        for name in table.column_names:
            if name not in out.column_names and name != OP_FIELD:
                out = out.append_column(name, table.column(name))
        return out

    def _clean(self, watermark: int) -> None:
        """Drop the versions at or before ``watermark`` but each key's latest (that one too
        if it is a delete): no probe to come is at or before the watermark."""
        old = np.flatnonzero(self.v_ts <= watermark)
        if len(old) < 2 and not (len(old) and self.v_del[old].any()):
            return
        last = old[first_per_group(self.v_row[old], -self.v_seq[old], -self.v_ts[old])]
        keep = self.v_ts > watermark
        keep[last[~self.v_del[last]]] = True
        if keep.all():
            return
        self.v_row, self.v_ts, self.v_seq = self.v_row[keep], self.v_ts[keep], self.v_seq[keep]
        self.v_del, self.v_pid = self.v_del[keep], self.v_pid[keep]
        if len(self.versions) > 2 * len(self.v_pid) + 4096:
            self.v_pid = self.versions.compact(self.v_pid)

    # -- the KeyedStateBackend protocol ----------------------------------------------------------
    def capture(self) -> pa.Table:
        parts = []
        if self.probes is not None and len(self.p_seq):
            parts.append(self._part(PROBE, "probe", self.probes, self.spec.probe_key,
                                    self.p_seq))
        if len(self.v_pid):
            parts.append(self._part(VERSION, "table", self.versions.take(self.v_pid),
                                    self.spec.table_key, self.v_seq))
        return pa.concat_tables(parts, promote_options="permissive") if parts else _EMPTY

    def _part(self, side: int, name: str, rows: pa.Table, key: str,
              seq: np.ndarray) -> pa.Table:
        n = len(seq)
        return with_key_groups(pa.table({"side": pa.array(np.full(n, side, np.int8)),
                                         "seq": pa.array(seq, pa.int64()),
                                         name: struct_of(rows)}),
                               rows.column(key), self.max_parallelism)

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        if not len(self):
            return StateSnapshot(self._meta())
        frozen = cast(TemporalTableJoinState, object.__new__(TemporalTableJoinState))
        frozen.__dict__.update(self.__dict__)  # numpy columns are replaced, never changed
        frozen.versions = self.versions.clone()
        return arrow_snapshot(self._meta(), frozen.capture)

    def spec_for_restore(self, spec: dict) -> dict:
        return {k: v for k, v in spec.items() if k != "how"}

    def load(self, table: pa.Table) -> None:
        """Rows of :meth:`capture` (this subtask's key groups) into the state."""
        for kind, rows, seq in snapshot_sides(table, (PROBE, "probe"), (VERSION, "table")):
            add = self.add_probes if kind == PROBE else self.add_versions
            add(rows, MIN_WATERMARK, seq)


class TemporalTableJoinOperator(_CheckpointedWatermark, TwoInputOperator):
    """Input 1: the probe rows, input 2: the table rows (versions); Arrow batches."""

    backend: TemporalTableJoinState  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.backend = TemporalTableJoinState(cast(TemporalTableJoinSpec, node.payload),
                                              key_groups, max_parallelism, cast(str, node.uid))
        self.dropped_late = 0

    def open(self, restored_operator_state):
        self._restore_watermark(restored_operator_state)

    def process_input(self, input: int, batch: pa.RecordBatch) -> list:
        if not len(batch):
            return []
        b = self.backend
        if input == 1 and b.spec.table_time is None and self.watermark > MIN_WATERMARK:
            # a static table whose input ended: nothing can change, join without waiting
            out, late = b.join_static(batch, self.watermark)
            self.dropped_late += late
            return [] if out is None else to_record_batch(out, f"temporal table join {self.uid!r}")
        add = b.add_probes if input == 1 else b.add_versions
        self.dropped_late += add(batch, self.watermark)
        return []

    def on_watermark(self, watermark):
        out = self.backend.advance(self._advance(watermark))
        if out is None or not out.num_rows:
            return []
        return [to_record_batch(out, f"temporal table join {self.uid!r}")]
