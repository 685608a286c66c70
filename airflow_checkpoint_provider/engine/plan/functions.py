"""User function interfaces and the runtime context they see."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from ..state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from ..state.operator_state import BroadcastState

if TYPE_CHECKING:
    from ..state.interface import ListState, MapState, ReducingState, ValueState

S = TypeVar("S")
T = TypeVar("T")


class RuntimeContext:
    """Where an operator subtask runs, and (for keyed operators) its keyed state."""

    def __init__(self, *, job_id: str, job_name: str, operator_uid: str, subtask_index: int,
                 parallelism: int, attempt: int, backend=None,
                 fence_sinks: bool = False) -> None:
        self.job_id = job_id
        #: the job's sinks hold their commits (a blue-green validation run)
        self.fence_sinks = fence_sinks
        self.job_name = job_name
        self.operator_uid = operator_uid
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.attempt = attempt
        self._backend = backend
        #: event time of the record being processed (ms), or of the timer firing; None
        #: without a watermark strategy upstream
        self.timestamp: int | None = None
        #: in ``on_timer``: ``"event"`` or ``"processing"``
        self.time_domain: str | None = None
        self._timers = None

    @property
    def timer_service(self):
        """Timers of the current key (keyed ``process()`` only): ``register_event_time_timer``,
        ``register_processing_time_timer``, ``delete_*``, ``current_watermark()``,
        ``current_processing_time()``."""
        if self._timers is None:
            raise TypeError(f"operator {self.operator_uid!r}: timers exist only in a keyed "
                            "process() function")
        return self._timers

    @property
    def current_key(self) -> object:
        return self._backend.current_key if self._backend is not None else None

    def get_state(self, descriptor: StateDescriptor[S]) -> S:
        """The current key's state that ``descriptor`` declares: a
        :class:`~..state.interface.ValueState`, ``ListState``, ``MapState`` or
        ``ReducingState``, typed by the descriptor (``ValueStateDescriptor("n", 0)`` gives a
        ``ValueState[int]``)."""
        if self._backend is None:
            raise TypeError(
                f"operator {self.operator_uid!r} is not keyed: keyed state needs key_by(...) first"
            )
        if descriptor.ttl_ms is not None:
            from ..state.ttl import ttl_state

            return cast(S, ttl_state(self._backend, descriptor))
        return cast(S, self._backend.get_state(descriptor))

    # ``ttl``: a timedelta or ms of processing time after which a value is gone (never
    # returned, and dropped from the next checkpoint); ``ttl_update``: "on_create_and_write"
    # (default) or "on_read_and_write" (reads restart the clock too)
    def value_state(self, name: str, default: Any = None, *, ttl: Any = None,
                    ttl_update: str = "on_create_and_write") -> ValueState[Any]:
        return self.get_state(ValueStateDescriptor(name, default, ttl=ttl, ttl_update=ttl_update))

    def list_state(self, name: str, *, ttl: Any = None,
                   ttl_update: str = "on_create_and_write") -> ListState[Any]:
        return self.get_state(ListStateDescriptor(name, ttl=ttl, ttl_update=ttl_update))

    def map_state(self, name: str, *, ttl: Any = None,
                  ttl_update: str = "on_create_and_write") -> MapState[Any, Any]:
        return self.get_state(MapStateDescriptor(name, ttl=ttl, ttl_update=ttl_update))

    def reducing_state(self, name: str, reduce_fn: Callable[[T, T], T], *,
                       ttl: Any = None,
                       ttl_update: str = "on_create_and_write") -> ReducingState[T]:
        return self.get_state(ReducingStateDescriptor(name, reduce_fn, ttl=ttl,
                                                      ttl_update=ttl_update))


class _KeyedFunction:
    """The lifecycle shared by :class:`KeyedProcessFunction` and
    :class:`KeyedCoProcessFunction` (state and timers scoped to the current key)."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record (after state was restored)."""

    def on_timer(self, timestamp: int, ctx: RuntimeContext) -> Iterable[dict] | None:
        """A timer registered through ``ctx.timer_service`` fired; the key's state is in
        scope (``ctx.current_key``), ``ctx.time_domain`` says which kind. May emit records."""
        return None

    def end_input(self, ctx: RuntimeContext) -> Iterable[dict] | None:
        """Called once when every input reached its end (bounded jobs); may emit records."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> None:
        """Called in the synchronous part of each checkpoint, before state is captured."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Called when checkpoint ``checkpoint_id`` completed."""

    def close(self) -> None:
        """Called once when the subtask ends."""


class KeyedProcessFunction(_KeyedFunction):
    """Process records of a keyed stream one by one, with state scoped to the current key.

    Override :meth:`process_element`; return (or yield) the records to emit. Also
    :meth:`open`, :meth:`on_timer`, :meth:`end_input`, :meth:`snapshot_state`,
    :meth:`notify_checkpoint_complete` and :meth:`close` where needed.
    """

    def process_element(self, record: dict, ctx: RuntimeContext) -> Iterable[dict] | None:
        raise NotImplementedError


class KeyedCoProcessFunction(_KeyedFunction):
    """Process the records of two connected keyed streams (``a.connect(b).key_by(ka, kb)
    .process(fn)``), with state and timers scoped to the current key and shared by both
    inputs: a record of ``a`` and one of ``b`` with the same key see the same state.

    Override :meth:`process_element1` (records of the first stream) and
    :meth:`process_element2` (the second); return (or yield) the records to emit. The
    lifecycle methods are those of :class:`KeyedProcessFunction`.
    """

    def process_element1(self, record: dict, ctx: RuntimeContext) -> Iterable[dict] | None:
        raise NotImplementedError

    def process_element2(self, record: dict, ctx: RuntimeContext) -> Iterable[dict] | None:
        raise NotImplementedError


class ProcessJoinFunction:
    """Called for each pair a join emits (``interval_join(...).process(fn)``,
    ``join(...).apply(fn)``): ``left`` from the first stream, ``right`` from the second;
    one of them is ``None`` for the unmatched rows of an outer join. ``ctx.timestamp`` is
    the larger event time of the two, ``ctx.current_key`` the join key. Return (or yield)
    the records to emit. A plain function ``fn(left, right)`` does as well."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record."""

    def process_element(self, left: dict | None, right: dict | None,
                        ctx: RuntimeContext) -> Iterable[dict] | None:
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the subtask ends."""


class Window(NamedTuple):
    """An event-time window ``[start, end)`` in epoch milliseconds."""

    start: int
    end: int


class ProcessWindowFunction:
    """Called once per key and window when the window fires, with the window's records
    (``key_by(...).window(...).process(fn)``). Return (or yield) the records to emit."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record."""

    def process(self, key: object, window: Window, elements: list[dict],
                ctx: RuntimeContext) -> Iterable[dict] | None:
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the subtask ends."""


class CheckpointedFunction:
    """Mix into a ``map`` / ``flat_map`` / ``filter`` / ``map_batches`` function to keep
    operator (non-keyed) state in checkpoints (Flink's ``CheckpointedFunction``)::

        class Buffering(CheckpointedFunction):
            def initialize_state(self, ctx):
                self.buffer = ctx.state.get_list_state("buffer")   # restored, if any

            def snapshot_state(self, checkpoint_id, ctx):
                pass  # the state objects are captured as they are now

            def __call__(self, record): ...

    ``ctx.state`` is the subtask's :class:`~.state.operator_state.OperatorStateStore`:
    ``get_list_state`` (split evenly over the new subtasks on rescale),
    ``get_union_list_state`` (every subtask gets all items) and ``get_broadcast_state`` (a
    map every subtask holds the same copy of). The operator needs a ``uid``.
    """

    def initialize_state(self, ctx: FunctionStateContext) -> None:
        """Called once per subtask before any record, after the state was restored."""

    def snapshot_state(self, checkpoint_id: int, ctx: FunctionStateContext) -> None:
        """Called in the synchronous part of each checkpoint, before the state is captured."""


class FunctionStateContext:
    """What a :class:`CheckpointedFunction` sees: its operator state and where it runs."""

    def __init__(self, runtime: RuntimeContext, state) -> None:
        self.runtime = runtime
        self.state = state

    @property
    def is_restored(self) -> bool:
        return self.state.is_restored

    @property
    def subtask_index(self) -> int:
        return self.runtime.subtask_index

    @property
    def parallelism(self) -> int:
        return self.runtime.parallelism


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
