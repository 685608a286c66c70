"""The ``aggregate()`` operator when its aggregations include ``count_distinct``
(:mod:`..state.columnar.distinct_state`): the same operator with the distinct-set table."""

from __future__ import annotations

from ...plan.functions import RuntimeContext
from ...plan.graph import Node
from ...state.columnar.distinct_state import DistinctAggregateTable
from ...state.keygroups import KeyGroupRange
from .base import AggregateOperator


class DistinctAggregateOperator(AggregateOperator):
    """``KeyedStream.aggregate`` with ``count_distinct``: vectorized like every aggregate();
    its state adds an exact set of (key, value) pairs per distinct column."""

    backend: DistinctAggregateTable  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx, key_groups, max_parallelism)
        self.backend = DistinctAggregateTable(self.spec, key_groups, max_parallelism,
                                              self.uid or node.name)

    def open(self, restored_operator_state):
        # warm up Arrow's kernels on a throw-away table (see AggregateOperator.open)
        DistinctAggregateTable(self.spec, self.backend.key_groups, self.backend.max_parallelism,
                               self.backend.uid).warm_up()
