"""``window(SessionWindows(gap)).aggregate(...)``: session windows, vectorized
(:mod:`..state.session_state`)."""

from __future__ import annotations

from typing import cast

import pyarrow as pa

from ..functions import RuntimeContext
from ..graph import Node
from ..state.keygroups import KeyGroupRange
from ..state.session_state import SessionAggregateTable
from ..state.windows import WindowSpec
from .operators import _KeyedStateOperator
from .windowing import _CheckpointedWatermark, _one_batch


class SessionAggregateOperator(_CheckpointedWatermark, _KeyedStateOperator):
    """Merges each Arrow batch into its keys' open sessions; emits a session's key,
    ``window_start``, ``window_end`` and aggregations when the watermark passes its end."""

    vectorized = True
    columnar = True
    backend: SessionAggregateTable  # type: ignore[assignment]

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.backend = SessionAggregateTable(cast(WindowSpec, node.payload), key_groups,
                                             max_parallelism, cast(str, node.uid))

    def open(self, restored_operator_state):
        self._restore_watermark(restored_operator_state)

    def process(self, records: pa.RecordBatch):
        return _one_batch(self.backend.update(records, self.watermark))

    def on_watermark(self, watermark):
        return self.backend.fire(self._advance(watermark))

    @property
    def dropped_late(self) -> int:
        return self.backend.dropped_late

    @property
    def collect_late(self) -> bool:
        return self.backend.collect_late

    @collect_late.setter
    def collect_late(self, value: bool) -> None:
        self.backend.collect_late = value

    def take_late(self):
        late, self.backend.late = self.backend.late, []
        return _one_batch(late) if late else None
