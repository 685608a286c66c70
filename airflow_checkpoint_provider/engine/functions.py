"""User function interfaces and the runtime context they see."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)


class RuntimeContext:
    """Where an operator subtask runs, and (for keyed operators) its keyed state."""

    def __init__(self, *, job_id: str, job_name: str, operator_uid: str, subtask_index: int,
                 parallelism: int, attempt: int, backend=None) -> None:
        self.job_id = job_id
        self.job_name = job_name
        self.operator_uid = operator_uid
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.attempt = attempt
        self._backend = backend

    @property
    def current_key(self) -> object:
        return self._backend.current_key if self._backend is not None else None

    def get_state(self, descriptor: StateDescriptor):
        if self._backend is None:
            raise TypeError(
                f"operator {self.operator_uid!r} is not keyed: keyed state needs key_by(...) first"
            )
        return self._backend.get_state(descriptor)

    def value_state(self, name: str, default: object = None):
        return self.get_state(ValueStateDescriptor(name, default))

    def list_state(self, name: str):
        return self.get_state(ListStateDescriptor(name))

    def map_state(self, name: str):
        return self.get_state(MapStateDescriptor(name))

    def reducing_state(self, name: str, reduce_fn: Callable[[object, object], object]):
        return self.get_state(ReducingStateDescriptor(name, reduce_fn))


class KeyedProcessFunction:
    """Process records of a keyed stream one by one, with state scoped to the current key.

    Override :meth:`process_element`; return (or yield) the records to emit.
    """

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record (after state was restored)."""

    def process_element(self, record: dict, ctx: RuntimeContext) -> Iterable[dict] | None:
        raise NotImplementedError

    def end_input(self, ctx: RuntimeContext) -> Iterable[dict] | None:
        """Called once when every input reached its end (bounded jobs); may emit records."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> None:
        """Called in the synchronous part of each checkpoint, before state is captured."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Called when checkpoint ``checkpoint_id`` completed."""

    def close(self) -> None:
        """Called once when the subtask ends."""
