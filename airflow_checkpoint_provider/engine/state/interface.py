"""What a per-key state offers a user function, whichever backend keeps it.

``RuntimeContext.get_state(descriptor)`` returns one of these for the current key (the key
of the record or timer being processed); the heap backend (:mod:`.heap.states`) and the
RocksDB backend (:mod:`.rocksdb.states`) implement each kind, and mypy checks that their
classes satisfy these protocols (the assignments at the end of this module). The kinds are
Flink's, minus aggregating state (neither backend offers it: a reducing state whose reduce
function folds into an accumulator does the same):

* :class:`ValueState` -- one value per key (``ValueStateDescriptor``);
* :class:`ListState` -- a list per key (``ListStateDescriptor``);
* :class:`MapState` -- a map per key (``MapStateDescriptor``, with or without
  ``entry_layout``);
* :class:`ReducingState` -- one value per key that every ``add`` folds into
  (``ReducingStateDescriptor``).

Values (and map keys) obey the state value contract of :mod:`.contract`: what is stored
comes back from a checkpoint, a savepoint, a rescale or a backend switch as an equal value
of the same type.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

__all__ = ["ListState", "MapState", "ReducingState", "State", "ValueState"]


class State(Protocol):
    """Every per-key state: :meth:`clear` removes the current key's entry."""

    def clear(self) -> None: ...


class ValueState(State, Protocol):
    def value(self) -> Any:
        """The current key's value, or the descriptor's default when it has none."""
        ...

    def update(self, value: Any) -> None:
        """Store ``value`` for the current key (``None`` clears it)."""
        ...


class ListState(State, Protocol):
    def get(self) -> list:
        """A copy of the current key's list (empty when it has none)."""
        ...

    def add(self, value: Any) -> None: ...

    def add_all(self, values: Iterable[Any]) -> None: ...

    def update(self, values: Iterable[Any]) -> None:
        """Replace the current key's list (an empty one clears it)."""
        ...


class MapState(State, Protocol):
    def get(self, user_key: Any, default: Any = None) -> Any: ...

    def put(self, user_key: Any, value: Any) -> None: ...

    def remove(self, user_key: Any) -> None: ...

    def pop_all(self, user_keys: Any) -> list:
        """Remove ``user_keys`` and return their values (None for a missing one)."""
        ...

    def contains(self, user_key: Any) -> bool: ...

    def items(self) -> Any:
        """The current key's ``(user key, value)`` pairs."""
        ...

    def keys(self) -> Any:
        """The current key's user keys."""
        ...

    def is_empty(self) -> bool: ...


class ReducingState(State, Protocol):
    def get(self) -> Any:
        """The current key's reduced value, or ``None``."""
        ...

    def add(self, value: Any) -> None:
        """Fold ``value`` into the current key's value with the reduce function."""
        ...


if TYPE_CHECKING:  # mypy checks that each backend's classes satisfy the protocols
    from .heap import states as heap
    from .rocksdb import states as rocks

    _values: tuple[type[ValueState], ...] = (heap.ValueState, rocks.RocksValueState)
    _lists: tuple[type[ListState], ...] = (heap.ListState, rocks.RocksListState)
    _maps: tuple[type[MapState], ...] = (heap.MapState, rocks.RocksMapState,
                                         rocks.RocksEntryMapState)
    _reducing: tuple[type[ReducingState], ...] = (heap.ReducingState,
                                                  rocks.RocksReducingState)
