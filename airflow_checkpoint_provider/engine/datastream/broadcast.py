"""Broadcast state: Flink's "rules + events" pattern.

    rules = p.source(..., uid="rules").broadcast("rules")           # a BroadcastStream
    (events.key_by("user").connect(rules)                              # keyed x broadcast
           .process(Alerts(), uid="alerts"))                           # KeyedBroadcastProcessFunction

* The keyed input (1) is hash-partitioned by its key as for ``process()``; the broadcast
  input (2) goes to every subtask (a ``broadcast`` edge): every subtask sees every rule.
* :meth:`KeyedBroadcastProcessFunction.process_broadcast_element` may change the broadcast
  state (``ctx.broadcast_state(name)``, a map) and, through
  ``ctx.apply_to_keyed_state(descriptor, fn)``, the keyed state of every key of the subtask;
  :meth:`~KeyedBroadcastProcessFunction.process_element` and ``on_timer`` read the broadcast
  state only, and have the keyed state and timers of the record's key.
* The broadcast state is operator state (:mod:`.state.operator_state`, mode ``broadcast``):
  every subtask holds and checkpoints its own copy; on restore every subtask takes its own
  old copy, more subtasks than before old subtask ``i % old count`` (as Flink does; in an
  unaligned checkpoint the copies differ, each goes with its subtask's in-flight records). The copies stay
  identical only if ``process_broadcast_element`` is deterministic and depends only on the
  broadcast state and the broadcast record (not on keyed state, the subtask or the order of
  broadcast records relative to keyed ones, which differs between subtasks).

The operator is :class:`~.runtime.operators.broadcast.BroadcastProcessOperator`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PipelineDefinitionError
from ..plan.functions import KeyedBroadcastProcessFunction
from ..plan.specs import BROADCAST_PROCESS, BroadcastProcessSpec
from ..state.descriptors import StateDescriptor

if TYPE_CHECKING:
    from .handles import DataStream

def _state_names(states: tuple) -> tuple[str, ...]:
    names = []
    for s in states:
        name = s.name if isinstance(s, StateDescriptor) else s
        if not isinstance(name, str) or not name:
            raise PipelineDefinitionError(
                f"broadcast({s!r}): name each broadcast state with a non-empty string or a "
                "MapStateDescriptor")
        if name in names:
            raise PipelineDefinitionError(f"broadcast: state {name!r} is declared twice")
        names.append(name)
    return tuple(names)


class BroadcastStream:
    """``stream.broadcast("state", ...)``: a stream every subtask of the operator it is
    connected to receives entirely, with the broadcast states it maintains."""

    def __init__(self, stream: DataStream, states: tuple) -> None:
        self.stream = stream
        self.state_names = _state_names(states)


class BroadcastConnectedStream:
    """``keyed.connect(broadcast_stream)``: :meth:`process` it with a
    :class:`KeyedBroadcastProcessFunction`."""

    def __init__(self, keyed: DataStream, broadcast: BroadcastStream) -> None:
        from .joins import _check_pair

        _check_pair("connect", keyed, broadcast.stream)
        self.keyed, self.broadcast = keyed, broadcast

    def process(self, fn: KeyedBroadcastProcessFunction, *, uid: str,
                parallelism: int | None = None, name: str | None = None) -> DataStream:
        from ..plan.graph import BROADCAST, HASH

        if not isinstance(fn, KeyedBroadcastProcessFunction):
            raise PipelineDefinitionError(
                f"broadcast process {uid!r}: {fn!r} must be a KeyedBroadcastProcessFunction "
                "instance")
        keyed, b = self.keyed, self.broadcast.stream
        if keyed._key_selector is None:
            raise PipelineDefinitionError(
                f"broadcast process {uid!r}: key the non-broadcast stream first: "
                "events.key_by(...).connect(rules.broadcast(...))")
        spec = BroadcastProcessSpec(fn, keyed._key_selector, (keyed._timestamp, b._timestamp),
                                    self.broadcast.state_names)
        return keyed._p._two_input(
            BROADCAST_PROCESS, name or f"BroadcastProcess: {type(fn).__name__}", uid,
            parallelism, spec, ((keyed, keyed._key_selector), (b, None)),
            partitionings=(HASH, BROADCAST), first_time_only=True)
