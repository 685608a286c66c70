"""``KeyedStream.top_n``: the ``n`` best rows per key, vectorized (:mod:`..state.columnar.topn_state`)."""

from __future__ import annotations

from typing import cast

import pyarrow as pa

from ...plan.functions import RuntimeContext
from ...plan.graph import Node
from ...state.columnar.topn_state import TopNSpec, TopNTable
from ...state.keygroups import KeyGroupRange
from .base import _KeyedStateOperator


class TopNOperator(_KeyedStateOperator):
    """Merges each Arrow batch into the kept rows of its keys; emits the rows whose rank is
    new or changed, with their rank. Columnar state in memory with either state backend."""

    vectorized = True
    columnar = True
    accepts_table = True

    backend: TopNTable  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.spec = cast(TopNSpec, node.payload)
        self.backend = TopNTable(self.spec, key_groups, max_parallelism, cast(str, node.uid))

    def open(self, restored_operator_state):
        # warm up the sort and IPC kernels before the task reports RUNNING
        spec = self.spec
        table = TopNTable(spec, self.backend.key_groups, self.backend.max_parallelism, self.uid)
        table.update(pa.RecordBatch.from_pydict({spec.key: [1, 1], spec.by: [1, 2]}))
        table.restore(table.serialize(table.rows))

    def process(self, records: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        return self.backend.update(records)
