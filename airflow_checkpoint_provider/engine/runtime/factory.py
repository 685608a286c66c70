"""Which operator class runs each kind of node."""

from __future__ import annotations

from typing import cast

from ..plan.functions import RuntimeContext
from ..plan.graph import VECTORIZED_OPS_KINDS, Node
from ..state.columnar import AggregateSpec
from ..state.distinct_state import has_distinct
from ..state.keygroups import KeyGroupRange
from .broadcast import BroadcastProcessOperator
from .distinct import DistinctAggregateOperator
from .edge_operators import SinkOperator, SourceOperator
from .joins import CoProcessOperator, IntervalJoinOperator, WindowJoinOperator
from .operators import (
    AggregateOperator,
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    Operator,
    ProcessOperator,
    ReduceOperator,
)
from .regular_join import RegularJoinOperator
from .sessions import SessionAggregateOperator
from .temporal_join import TemporalJoinOperator
from .topn import TopNOperator
from .upsert_materializer import UpsertMaterializerOperator
from .vector_joins import VectorIntervalJoinOperator, VectorWindowJoinOperator
from .windowing import WindowAggregateOperator, WindowFunctionOperator

_SIMPLE = {"map": MapOperator, "flat_map": FlatMapOperator, "filter": FilterOperator,
           "map_batches": MapBatchesOperator, "source": SourceOperator, "sink": SinkOperator}
_KEYED = {"process": ProcessOperator, "reduce": ReduceOperator, "window": WindowFunctionOperator,
          "co_process": CoProcessOperator, "interval_join": IntervalJoinOperator,
          "window_join": WindowJoinOperator, "broadcast_process": BroadcastProcessOperator,
          "temporal_join": TemporalJoinOperator, "regular_join": RegularJoinOperator,
          "upsert_materializer": UpsertMaterializerOperator}
#: joins declared with vectorized=True (their spec says so): columnar state too
_VECTOR_JOINS = {"interval_join": VectorIntervalJoinOperator,
                 "window_join": VectorWindowJoinOperator}
_COLUMNAR = {"aggregate": AggregateOperator, "window_aggregate": WindowAggregateOperator,
             "top_n": TopNOperator, "session_aggregate": SessionAggregateOperator}


def _vectorized_ops() -> dict:
    """The operators of :mod:`.vectorized_ops` (imported here: it builds on this package)."""
    from .vectorized_ops.latest import LatestOperator
    from .vectorized_ops.max_join import MaxJoinOperator
    from .vectorized_ops.temporal import TemporalTableJoinOperator
    from .vectorized_ops.unique_join import UniqueJoinOperator

    return {"max_by_join": MaxJoinOperator, "latest_by_key": LatestOperator,
            "unique_key_join": UniqueJoinOperator,
            "temporal_table_join": TemporalTableJoinOperator}


def create_operator(node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                    max_parallelism: int, state_backend: dict | None = None) -> Operator:
    if node.kind in _VECTOR_JOINS and getattr(node.payload, "vectorized", False):
        return _VECTOR_JOINS[node.kind](node, ctx, key_groups, max_parallelism)
    if node.kind == "aggregate" and has_distinct(cast(AggregateSpec, node.payload)):
        return DistinctAggregateOperator(node, ctx, key_groups, max_parallelism)
    if node.kind in VECTORIZED_OPS_KINDS:
        return _vectorized_ops()[node.kind](node, ctx, key_groups, max_parallelism)
    if node.kind in _COLUMNAR:
        return _COLUMNAR[node.kind](node, ctx, key_groups, max_parallelism)
    if node.kind in _KEYED:
        return _KEYED[node.kind](node, ctx, key_groups, max_parallelism, state_backend)
    return _SIMPLE[node.kind](node, ctx)
