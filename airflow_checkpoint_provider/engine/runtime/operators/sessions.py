"""``window(SessionWindows(gap)).aggregate(...)``: session windows, vectorized
(:mod:`..state.columnar.session_state`)."""

from __future__ import annotations

from typing import cast

from ...plan.functions import RuntimeContext
from ...plan.graph import Node
from ...state.columnar.session_state import SessionAggregateTable
from ...state.columnar.windows import WindowSpec
from ...state.keygroups import KeyGroupRange
from .windowing import WindowAggregateOperator


class SessionAggregateOperator(WindowAggregateOperator):
    """Merges each Arrow batch into its keys' open sessions; emits a session's key,
    ``window_start``, ``window_end`` and aggregations when the watermark passes its end.
    Processing, firing and late-row handling are :class:`WindowAggregateOperator`'s; only
    the state table differs."""

    backend: SessionAggregateTable  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        # the bases after WindowAggregateOperator: not its WindowAggregateTable
        super(WindowAggregateOperator, self).__init__(node, ctx)
        self.backend = SessionAggregateTable(cast(WindowSpec, node.payload), key_groups,
                                             max_parallelism, cast(str, node.uid))

    def open(self, restored_operator_state):
        self._restore_watermark(restored_operator_state)
