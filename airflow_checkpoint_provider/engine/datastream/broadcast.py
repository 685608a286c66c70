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
  every subtask holds and checkpoints its own copy; on restore at any parallelism every
  subtask takes the copy of the lowest old subtask (as Flink does). The copies stay
  identical only if ``process_broadcast_element`` is deterministic and depends only on the
  broadcast state and the broadcast record (not on keyed state, the subtask or the order of
  broadcast records relative to keyed ones, which differs between subtasks).

The operator is :class:`~.runtime.broadcast.BroadcastProcessOperator`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import PipelineDefinitionError
from ..eventtime import TimestampSpec
from ..plan.functions import RuntimeContext, _KeyedFunction
from ..state.descriptors import StateDescriptor
from ..state.operator_state import BroadcastState

if TYPE_CHECKING:
    from .api import DataStream

BROADCAST_PROCESS = "broadcast_process"


class KeyedBroadcastProcessFunction(_KeyedFunction):
    """Process a keyed stream connected to a broadcast stream
    (``events.key_by(k).connect(rules.broadcast("rules")).process(fn, uid=...)``).

    Override :meth:`process_element` (records of the keyed stream: keyed state and timers of
    the record's key, broadcast state read-only) and :meth:`process_broadcast_element`
    (records of the broadcast stream, on every subtask: broadcast state read-write, no
    current key; ``ctx.apply_to_keyed_state`` reaches every key's state). ``on_timer`` sees
    the broadcast state read-only. The other lifecycle methods are those of
    :class:`~.functions.KeyedProcessFunction`. Return (or yield) the records to emit.
    """

    def process_element(self, record: dict, ctx: BroadcastContext) -> Iterable[dict] | None:
        raise NotImplementedError

    def process_broadcast_element(self, record: dict,
                                  ctx: BroadcastContext) -> Iterable[dict] | None:
        raise NotImplementedError


class ReadOnlyBroadcastState:
    """The broadcast state as ``process_element`` and ``on_timer`` see it."""

    def __init__(self, state: BroadcastState, name: str) -> None:
        self._state, self._name = state, name

    def get(self, key, default=None):
        return self._state.get(key, default)

    def contains(self, key) -> bool:
        return self._state.contains(key)

    def items(self) -> list:
        return self._state.items()

    def keys(self) -> Iterator:
        return self._state.keys()

    def _refuse(self, *args, **kwargs):
        raise TypeError(
            f"broadcast state {self._name!r} is read-only in process_element and on_timer "
            "(subtasks would diverge): change it in process_broadcast_element")

    put = remove = clear = _refuse


class BroadcastContext(RuntimeContext):
    """The ``ctx`` of a :class:`KeyedBroadcastProcessFunction`: a :class:`RuntimeContext`
    (keyed state, ``timer_service``, ``timestamp``, ``current_key``) plus
    :meth:`broadcast_state` and :meth:`apply_to_keyed_state`."""

    def __init__(self, base: RuntimeContext, state_names: tuple[str, ...]) -> None:
        super().__init__(job_id=base.job_id, job_name=base.job_name,
                         operator_uid=base.operator_uid, subtask_index=base.subtask_index,
                         parallelism=base.parallelism, attempt=base.attempt,
                         backend=base._backend)
        self.state_names = state_names
        self._broadcast: dict[str, BroadcastState] = {}
        #: True while ``process_broadcast_element`` runs (set by the operator)
        self.in_broadcast = False

    @property
    def current_key(self) -> object:
        """The record's key; None in ``process_broadcast_element`` (a broadcast record has
        no key)."""
        return None if self.in_broadcast else super().current_key

    def broadcast_state(self, name: str | StateDescriptor) -> BroadcastState | ReadOnlyBroadcastState:
        """The broadcast state ``name`` (declared in ``broadcast(...)``): a map with ``get``,
        ``contains``, ``items``, ``keys`` and, in ``process_broadcast_element`` only,
        ``put``, ``remove`` and ``clear``."""
        key = name.name if isinstance(name, StateDescriptor) else name
        state = self._broadcast.get(key)  # type: ignore[arg-type]
        if state is None:
            raise KeyError(f"operator {self.operator_uid!r}: broadcast state {key!r} is not "
                           f"declared; declare it in broadcast(...) (declared: "
                           f"{', '.join(self.state_names)})")
        return state if self.in_broadcast else ReadOnlyBroadcastState(state, key)  # type: ignore[arg-type]

    get_broadcast_state = broadcast_state  # Flink's name

    def apply_to_keyed_state(self, descriptor: StateDescriptor,
                             fn: Callable[[object, object], None]) -> None:
        """``fn(key, state)`` for every key of this subtask that has state ``descriptor``
        (``process_broadcast_element`` only; each subtask reaches its own keys)."""
        if not self.in_broadcast:
            raise TypeError("apply_to_keyed_state is available in process_broadcast_element "
                            "only")
        if not isinstance(descriptor, StateDescriptor):
            raise TypeError(f"apply_to_keyed_state needs a state descriptor "
                            f"(ValueStateDescriptor(...), ...), got {descriptor!r}")
        backend = self._backend
        state = self.get_state(descriptor)
        self.in_broadcast = False  # the key is in scope while fn runs
        try:
            for key in list(backend.keys(descriptor.name)):
                backend.set_current_key(key)
                fn(key, state)
        finally:
            self.in_broadcast = True


@dataclass
class BroadcastProcessSpec:
    """``keyed.connect(broadcast_stream).process(fn)``."""

    fn: KeyedBroadcastProcessFunction
    key_selector: Callable
    timestamps: tuple[TimestampSpec | None, TimestampSpec | None]
    state_names: tuple[str, ...]


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
