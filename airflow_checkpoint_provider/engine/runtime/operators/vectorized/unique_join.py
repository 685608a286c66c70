"""The insert-only join with a unique-key side, vectorized (Nexmark q3 and q20).

``unique_key_join(stream.key_by(k), table.key_by(id), uid=...)`` (:mod:`.api`): ``table``
holds one row per key (its first row of a key is kept, later ones are ignored: an id
occurs once, as a person or an auction in Nexmark). A stream row whose key's table row is
there joins it at once; one that comes first waits in state, and joins and leaves when the
table row comes (nothing else can match it). Output (inner, insert-only, no retractions):
the stream row's columns, then the table row's columns the stream row lacks; a batch's
joined rows in input order. This is the regular join ``stream JOIN table ON stream.k =
table.id`` when ``table.id`` is a primary key and both inputs are insert-only; the
retracting :func:`~..regular_join` (per record) stays for the other cases.

Per batch: the keys are looked up in a :class:`~..state.columnar.key_index.KeyIndex` (numpy, no
Python per row), the matched table rows taken from a :class:`~.common.RowStore`. State
(columnar in memory with either state backend): the table rows and the waiting stream rows.
Snapshot (an ``arrow`` keyed-state handle): one Arrow IPC file, columns ``key_group``,
``side`` (0 a table row, 1 a waiting stream row), ``seq`` and the row as a ``table`` or
``stream`` struct; a restore keeps the key groups the subtask owns (rescale).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa

from ....plan.functions import RuntimeContext
from ....plan.graph import Node
from ....plan.vectorized_specs import UniqueJoinSpec
from ....state.backend import StateSnapshot
from ....state.columnar.key_index import KeyIndex
from ....state.keygroups import KeyGroupRange
from ...batches import to_record_batch
from .common import (
    OneFileState,
    RowStore,
    TwoInputOperator,
    arrow_snapshot,
    as_table,
    first_per_group,
    insert,
    key_array,
    lookup,
    snapshot_sides,
    struct_of,
    with_key_groups,
)

STATE_NAME = "unique-key-join.vectorized"
TABLE, WAITING = 0, 1


def merge(stream: pa.Table, table: pa.Table) -> pa.Table:
    names, columns = list(stream.column_names), list(stream.columns)
    for name in table.column_names:
        if name not in names:
            names.append(name)
            columns.append(table.column(name))
    return pa.Table.from_arrays(columns, names=names)


class UniqueJoinState(OneFileState):
    """Table rows by key and waiting stream rows of one subtask (KeyedStateBackend)."""

    STATE = (STATE_NAME, "vectorized unique-key join", "keep the keys")

    def __init__(self, spec: UniqueJoinSpec, key_groups: KeyGroupRange, max_parallelism: int,
                 uid: str) -> None:
        self.spec, self.key_groups, self.max_parallelism, self.uid = (
            spec, key_groups, max_parallelism, uid)
        self.index = KeyIndex()
        self.table = RowStore()
        self.pid = np.empty(0, dtype=np.int64)
        self.waiting: pa.Table | None = None
        self.w_seq = np.empty(0, dtype=np.int64)
        self.next_seq = 0

    def __len__(self) -> int:
        return self.index.n + len(self.w_seq)

    def add_stream(self, batch: pa.RecordBatch | pa.Table,
                   seq: np.ndarray | None = None) -> pa.Table | None:
        t = as_table(batch)
        if not t.num_rows:
            return None
        keys = key_array(t, self.spec.stream_key, self.uid)
        if seq is None:
            seq = np.arange(self.next_seq, self.next_seq + t.num_rows, dtype=np.int64)
            self.next_seq += t.num_rows
        rows = lookup(self.index, keys)
        hit = rows >= 0
        if not hit.all():
            miss = ~hit
            self._wait(t.filter(pa.array(miss)) if hit.any() else t, seq[miss])
        if not hit.any():
            return None
        pos = np.flatnonzero(hit)
        return merge(t.take(pa.array(pos)) if len(pos) < t.num_rows else t,
                     self.table.take(self.pid[rows[pos]]))

    def _wait(self, rows: pa.Table, seq: np.ndarray) -> None:
        if self.waiting is None or not len(self.w_seq):
            self.waiting = rows
        else:
            self.waiting = pa.concat_tables([self.waiting, rows], promote_options="permissive")
            if self.waiting.column(0).num_chunks > 64:
                self.waiting = self.waiting.combine_chunks()
        self.w_seq = np.r_[self.w_seq, seq]

    def add_table(self, batch: pa.RecordBatch | pa.Table) -> pa.Table | None:
        t = as_table(batch)
        if not t.num_rows:
            return None
        keys = key_array(t, self.spec.table_key, self.uid)
        enc = keys.dictionary_encode()
        if len(enc.dictionary) < len(keys):  # a key twice in the batch: the first row counts
            codes = enc.indices.to_numpy(zero_copy_only=False)
            first = np.sort(first_per_group(codes, np.arange(len(codes))))
            t, keys = t.take(pa.array(first)), keys.take(pa.array(first))
        new = lookup(self.index, keys) < 0
        if not new.any():
            return None
        if not new.all():
            mask = pa.array(new)
            t, keys = t.filter(mask), keys.filter(mask)
        rows = insert(self.index, keys)
        if self.index.n > len(self.pid):
            grow = max(self.index.n, 2 * len(self.pid), 16) - len(self.pid)
            self.pid = np.r_[self.pid, np.full(grow, -1, np.int64)]
        self.pid[rows] = self.table.append(t, self.uid)
        if self.waiting is None or not len(self.w_seq):
            return None
        wrows = lookup(self.index, key_array(self.waiting, self.spec.stream_key, self.uid))
        came = np.flatnonzero(wrows >= 0)
        if not len(came):
            return None
        came = came[np.argsort(self.w_seq[came], kind="stable")]
        self.waiting = self.waiting.combine_chunks()  # a take over chunks is slow (common.py)
        out = merge(self.waiting.take(pa.array(came)), self.table.take(self.pid[wrows[came]]))
        stay = wrows < 0
        self.waiting = self.waiting.filter(pa.array(stay))
        self.w_seq = self.w_seq[stay]
        return out

    # -- the KeyedStateBackend protocol ----------------------------------------------------------
    def capture(self) -> pa.Table | None:
        parts = []
        n = self.index.n
        if n:
            rows = self.table.take(self.pid[:n])
            parts.append(with_key_groups(pa.table({
                "side": pa.array(np.full(n, TABLE, np.int8)),
                "seq": pa.array(np.zeros(n, np.int64)), "table": struct_of(rows)}),
                rows.column(self.spec.table_key), self.max_parallelism))
        if self.waiting is not None and len(self.w_seq):
            m = len(self.w_seq)
            parts.append(with_key_groups(pa.table({
                "side": pa.array(np.full(m, WAITING, np.int8)),
                "seq": pa.array(self.w_seq), "stream": struct_of(self.waiting)}),
                self.waiting.column(self.spec.stream_key), self.max_parallelism))
        return pa.concat_tables(parts, promote_options="permissive") if parts else None

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        table = self.capture()
        if table is None:
            return StateSnapshot(self._meta())

        return arrow_snapshot(self._meta(), lambda: table)

    def load(self, table: pa.Table) -> None:
        for kind, rows, seq in snapshot_sides(table, (TABLE, "table"), (WAITING, "stream")):
            if kind == TABLE:
                self.add_table(rows)
            else:
                self._wait(rows, seq)
                self.next_seq = max(self.next_seq, int(seq.max()) + 1)


class UniqueJoinOperator(TwoInputOperator):
    """Input 1: the stream, input 2: the table (unique keys); Arrow batches."""

    backend: UniqueJoinState  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.backend = UniqueJoinState(cast(UniqueJoinSpec, node.payload), key_groups,
                                       max_parallelism, cast(str, node.uid))

    def process_input(self, input: int, batch: pa.RecordBatch) -> pa.RecordBatch | list:
        b = self.backend
        out = b.add_stream(batch) if input == 1 else b.add_table(batch)
        if out is None or not out.num_rows:
            return []
        return to_record_batch(out, f"unique-key join {self.uid!r}")
