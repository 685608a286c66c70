"""The latest row per key, vectorized (Nexmark q18: the last bid per bidder and auction).

``latest_by_key(stream.key_by(k), by="date_time", uid=...)`` (:mod:`.api`) keeps, per key,
the row with the highest ``by`` (ties: the later row, as a running ``reduce`` that keeps
``b if b.by >= a.by else a``); for every input batch it emits the rows that became their
key's latest, at most one per key, in input order: an upsert stream by key whose last row
per key is the result, and which never retracts. A null ``by`` never wins.

State (columnar in memory with either state backend): the keys in a
:class:`~..state.columnar.key_index.KeyIndex`, per key in numpy the kept row's ``by``, arrival number
and row id in a :class:`~.common.RowStore` of payloads (the input rows; compacted when
replaced rows outnumber the kept ones). Snapshot (an ``arrow`` keyed-state handle): one
Arrow IPC file of the kept rows with ``key_group`` and ``_seq``; a restore keeps the key
groups the subtask owns (rescale). A ``reduce()`` savepoint is refused, not converted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import pyarrow as pa

from ....plan.functions import RuntimeContext
from ....plan.graph import Node
from ....plan.vectorized_specs import LatestSpec
from ....state.backend import StateSnapshot
from ....state.columnar.key_index import KeyIndex
from ....state.keygroups import KeyGroupRange
from ..base import _KeyedStateOperator
from .common import (
    OneFileState,
    RowStore,
    arrow_snapshot,
    as_table,
    column,
    first_per_group,
    insert,
    key_array,
    lookup,
    with_key_groups,
)

STATE_NAME = "latest-by-key.vectorized"
SEQ = "_seq"


class LatestTable(OneFileState):
    """The latest row of every key of one subtask (the KeyedStateBackend protocol)."""

    STATE = (STATE_NAME, "latest_by_key operator", "keep key and by")

    COMPACT_MIN = 65_536

    def __init__(self, spec: LatestSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 uid: str) -> None:
        self.spec, self.key_groups, self.max_parallelism, self.uid = (
            spec, key_groups, max_parallelism, uid)
        self.index = KeyIndex()
        self.store = RowStore()
        self.by = np.empty(0, dtype=np.int64)
        self.seq = np.empty(0, dtype=np.int64)
        self.pid = np.empty(0, dtype=np.int64)
        self.next_seq = 0

    def __len__(self) -> int:
        return self.index.n

    def _grow(self, size: int) -> None:
        have = len(self.pid)
        if size > have:
            n = max(size, 2 * have, 16) - have
            self.by = np.r_[self.by, np.zeros(n, self.by.dtype)]
            self.seq = np.r_[self.seq, np.zeros(n, np.int64)]
            self.pid = np.r_[self.pid, np.full(n, -1, np.int64)]

    def update(self, batch: pa.RecordBatch | pa.Table,
               seq: np.ndarray | None = None) -> pa.Table:
        """Merge ``batch``; return its rows that became their key's latest (input order)."""
        spec = self.spec
        t = as_table(batch)
        if SEQ in t.column_names:
            raise KeyError(f"latest_by_key {self.uid!r}: the input has a column {SEQ!r}, "
                           "which the operator's snapshots use; rename it")
        by_col = column(t, spec.by, self.uid, "by")
        if by_col.null_count:
            keep = by_col.is_valid()
            t, by_col = t.filter(keep), by_col.filter(keep)
            if seq is not None:
                seq = seq[np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)]
        if not t.num_rows:
            return t
        by = by_col.to_numpy()
        by = by.astype(np.float64 if by.dtype.kind == "f" else np.int64, copy=False)
        if by.dtype != self.by.dtype:
            dtype = np.result_type(by.dtype, self.by.dtype) if len(self) else by.dtype
            self.by, by = self.by.astype(dtype), by.astype(dtype, copy=False)
        if seq is None:
            seq = np.arange(self.next_seq, self.next_seq + t.num_rows, dtype=np.int64)
            self.next_seq += t.num_rows
        keys = key_array(t, spec.key, self.uid)
        enc = keys.dictionary_encode()
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        distinct = enc.dictionary
        rows = lookup(self.index, distinct)
        new = rows < 0
        if new.any():
            rows[new] = insert(self.index, distinct.filter(pa.array(new)))
            self._grow(self.index.n)
        win = first_per_group(codes, -seq, -by)  # per key: the highest by, then the latest
        r = rows[codes[win]]
        fresh = self.pid[r] < 0
        better = fresh | (by[win] > self.by[r]) | ((by[win] == self.by[r]) & (seq[win] > self.seq[r]))
        win, r = np.sort(win[better]), None
        if not len(win):
            return t.schema.empty_table()
        out = t.take(pa.array(win))
        r = rows[codes[win]]
        self.pid[r] = self.store.append(out, self.uid)
        self.by[r], self.seq[r] = by[win], seq[win]
        self._compact()
        return out

    def _compact(self) -> None:
        n = self.index.n
        if len(self.store) <= 2 * n + self.COMPACT_MIN:
            return
        self.pid[:n] = self.store.compact(self.pid[:n])

    # -- the KeyedStateBackend protocol ----------------------------------------------------------
    def capture(self) -> pa.Table | None:
        n = self.index.n
        if not n:
            return None
        rows = self.store.take(self.pid[:n]).append_column(SEQ, pa.array(self.seq[:n]))
        return with_key_groups(rows, rows.column(self.spec.key), self.max_parallelism)

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        n = self.index.n
        if not n:
            return StateSnapshot(self._meta())
        # synchronous part: the slot columns copied, the payload store shared (immutable)
        store, pid, seq = self.store.clone(), self.pid[:n].copy(), self.seq[:n].copy()

        def capture() -> pa.Table:
            rows = store.take(pid).append_column(SEQ, pa.array(seq))
            return with_key_groups(rows, rows.column(self.spec.key), self.max_parallelism)

        return arrow_snapshot(self._meta(), capture)

    def restore_state(self, directory: str, handles: Sequence, states: dict[str, dict]) -> None:
        if not self.restorable(handles, states, self.spec.describe()):
            return
        for table in self.owned_tables(directory, handles):
            if table.num_rows:
                seq = table.column(SEQ).to_numpy()
                self.update(table.drop_columns([SEQ]), seq)
                self.next_seq = max(self.next_seq, int(seq.max()) + 1)


class LatestOperator(_KeyedStateOperator):
    """Merges each Arrow batch into the kept rows; emits the rows that became latest."""

    vectorized = True
    columnar = True
    accepts_table = True
    backend: LatestTable  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.backend = LatestTable(cast(LatestSpec, node.payload), key_groups, max_parallelism,
                                   cast(str, node.uid))

    def process(self, records: pa.RecordBatch | pa.Table) -> pa.RecordBatch | list:
        out = self.backend.update(records)
        return out.combine_chunks().to_batches()[0] if out.num_rows else []
