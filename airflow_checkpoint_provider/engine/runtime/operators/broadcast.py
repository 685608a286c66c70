"""``keyed.connect(stream.broadcast(...)).process(KeyedBroadcastProcessFunction)`` (the DSL
is :mod:`..broadcast`).

A keyed process operator with two inputs: input 1 is the keyed stream (hash-partitioned,
keyed state and timers as in ``process()``), input 2 the broadcast stream (a ``broadcast``
edge: every subtask gets every record). Barriers are aligned over the channels of both
inputs and the watermark is the minimum over both, as for every two-input operator
(:mod:`.joins`). A broadcast input without a watermark strategy holds event time back until
it ends (bounded) or goes idle.

State: the function's keyed state and timers in the keyed backend (heap or RocksDB), and the
broadcast states in the operator state (:class:`~..state.operator_state.OperatorStateStore`,
mode ``broadcast``): each subtask writes its copy into every checkpoint; on restore every
subtask takes its own old copy (more subtasks than before: old subtask ``i % old count``).
The copies differ in an unaligned checkpoint: each goes with its subtask's in-flight records. A function that is
also a :class:`~..functions.CheckpointedFunction` keeps its own operator states (list, union
list, broadcast) in the same store, next to the broadcast states: ``initialize_state(ctx)``
before ``open``, ``snapshot_state(checkpoint_id, ctx)`` at each checkpoint (a
``snapshot_state(checkpoint_id)`` without ``ctx`` is called as for any keyed function).
"""

from __future__ import annotations

import inspect
from typing import Any, cast

from ...plan.functions import (
    BroadcastContext,
    CheckpointedFunction,
    FunctionStateContext,
    RuntimeContext,
)
from ...plan.graph import Node
from ...plan.specs import BroadcastProcessSpec
from ...state.keygroups import KeyGroupRange
from ...state.operator_state import OperatorStateStore
from .base import ProcessOperator, _emitted


class BroadcastProcessOperator(ProcessOperator):
    """Runs a :class:`~..broadcast.KeyedBroadcastProcessFunction`."""

    two_input = True
    ctx: BroadcastContext

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int, state_backend: dict | None = None) -> None:
        spec = cast(BroadcastProcessSpec, node.payload)
        super().__init__(node, BroadcastContext(ctx, spec.state_names), key_groups,
                         max_parallelism, state_backend)
        self.ctx._backend = self.backend

    @property
    def spec(self) -> BroadcastProcessSpec:
        return cast(BroadcastProcessSpec, self.node.payload)

    @property
    def fn(self) -> Any:
        return self.spec.fn

    def open(self, restored_operator_state):
        self.store = OperatorStateStore(self.uid or self.node.name, self.ctx.subtask_index,
                                        self.ctx.parallelism, restored_operator_state)
        self.ctx._broadcast = {name: self.store.get_broadcast_state(name)
                               for name in self.spec.state_names}
        self.fn_state: FunctionStateContext | None = None
        if isinstance(self.fn, CheckpointedFunction):
            self.fn_state = FunctionStateContext(self.ctx, self.store)
            self.fn.initialize_state(self.fn_state)
        super().open(restored_operator_state)

    def process(self, records):  # pragma: no cover - the task calls process_input
        raise TypeError(f"operator {self.uid!r} has two inputs: use process_input")

    def process_input(self, input: int, records: list[dict]) -> list:
        spec = self.spec
        if input == 1:
            return self._run(records, spec.key_selector, spec.fn.process_element,
                             spec.timestamps[0])
        ctx, stamp, uid = self.ctx, spec.timestamps[1], self.uid or self.node.name
        process = spec.fn.process_broadcast_element
        out: list = []
        ctx.in_broadcast = True
        try:
            for r in records:
                ctx.timestamp = stamp.of_record(r, uid) if stamp is not None else None
                _emitted(process(r, ctx), out)
        finally:
            ctx.in_broadcast = False
            ctx.timestamp = None
        return out

    def broadcast_entries(self) -> dict[str, dict]:
        """This subtask's copy of every broadcast state (for tests and ``ckpt inspect``)."""
        return {name: dict(state.items()) for name, state in self.ctx._broadcast.items()}

    def snapshot(self, checkpoint_id):
        fn_state = self.fn_state
        if fn_state is not None and _takes_state_context(self.fn.snapshot_state):
            # CheckpointedFunction.snapshot_state(checkpoint_id, ctx), once, then the keyed
            # state as ProcessOperator.snapshot captures it (without its one-argument call)
            self.fn.snapshot_state(checkpoint_id, fn_state)
            snap = super(ProcessOperator, self).snapshot(checkpoint_id)
        else:
            snap = super().snapshot(checkpoint_id)
        # the store holds the broadcast states and the function's operator states; entries
        # the base operator returned are kept (merged, never overwritten)
        snap.operator_state = [*snap.operator_state, *self.store.snapshot()]
        return snap


def _takes_state_context(method) -> bool:
    """Whether ``method(checkpoint_id, ctx)`` binds (CheckpointedFunction's form) rather than
    only ``method(checkpoint_id)`` (the keyed functions' form)."""
    try:
        inspect.signature(method).bind(0, None)
    except (TypeError, ValueError):
        return False
    return True
