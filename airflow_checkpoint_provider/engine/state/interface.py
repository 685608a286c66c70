"""What a per-key state offers a user function, whichever backend keeps it.

``RuntimeContext.get_state(descriptor)`` returns one of these for the current key (the key
of the record or timer being processed); the heap backend (:mod:`.heap.states`) and the
RocksDB backend (:mod:`.rocksdb.states`) implement each kind, and mypy checks that their
classes satisfy these protocols (:mod:`.interface_check`, in ``make lint``). The kinds are
Flink's, minus aggregating state (neither backend offers it: a reducing state whose reduce
function folds into an accumulator does the same):

* :class:`ValueState` -- one value per key (``ValueStateDescriptor``);
* :class:`ListState` -- a list per key (``ListStateDescriptor``);
* :class:`MapState` -- a map per key (``MapStateDescriptor``, with or without
  ``entry_layout``);
* :class:`ReducingState` -- one value per key that every ``add`` folds into
  (``ReducingStateDescriptor``).

Each protocol is generic in its values (``ValueState[int]``, ``MapState[str, float]``): the
descriptor carries the type (``ValueStateDescriptor("count", 0)`` is a
``StateDescriptor[ValueState[int]]``) and ``get_state`` returns the matching protocol, so a
user's type checker sees what ``value()`` returns. Without a typed default or reduce
function the values are ``Any``.

Values (and map keys) obey the state value contract of :mod:`.contract`: what is stored
comes back from a checkpoint, a savepoint, a rescale or a backend switch as an equal value
of the same type.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

__all__ = ["ListState", "MapState", "ReducingState", "State", "ValueState"]


T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class State(Protocol):
    """Every per-key state: :meth:`clear` removes the current key's entry."""

    def clear(self) -> None: ...


class ValueState(State, Protocol[T]):
    def value(self) -> T:
        """The current key's value, or the descriptor's default when it has none."""
        ...

    def update(self, value: T | None) -> None:
        """Store ``value`` for the current key (``None`` clears it)."""
        ...


class ListState(State, Protocol[T]):
    def get(self) -> list[T]:
        """A copy of the current key's list (empty when it has none)."""
        ...

    def add(self, value: T) -> None: ...

    def add_all(self, values: Iterable[T]) -> None: ...

    def update(self, values: Iterable[T]) -> None:
        """Replace the current key's list (an empty one clears it)."""
        ...


class MapState(State, Protocol[K, V]):
    def get(self, user_key: K, default: V | None = None) -> V | None: ...

    def put(self, user_key: K, value: V) -> None: ...

    def remove(self, user_key: K) -> None: ...

    def pop_all(self, user_keys: Iterable[K]) -> list[V | None]:
        """Remove ``user_keys`` and return their values (None for a missing one)."""
        ...

    def contains(self, user_key: K) -> bool: ...

    def items(self) -> Iterable[tuple[K, V]]:
        """The current key's ``(user key, value)`` pairs."""
        ...

    def keys(self) -> Iterable[K]:
        """The current key's user keys."""
        ...

    def is_empty(self) -> bool: ...


class ReducingState(State, Protocol[T]):
    def get(self) -> T | None:
        """The current key's reduced value, or ``None``."""
        ...

    def add(self, value: T) -> None:
        """Fold ``value`` into the current key's value with the reduce function."""
        ...
