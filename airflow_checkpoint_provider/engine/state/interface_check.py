"""What mypy checks of :mod:`.interface` in ``make lint`` (this module runs nothing and
nothing imports it; it is its own module so that the protocols import no backend): each
backend's state classes satisfy the protocols, and a descriptor types the state that
``get_state`` returns, on both backends."""

from __future__ import annotations

from typing import Any, assert_type

from .descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from .heap import states as heap
from .heap.backend import HeapKeyedStateBackend
from .interface import ListState, MapState, ReducingState, ValueState
from .rocksdb import RocksDBKeyedStateBackend
from .rocksdb import states as rocks

_values: tuple[type[ValueState], ...] = (heap.ValueState, rocks.RocksValueState)
_lists: tuple[type[ListState], ...] = (heap.ListState, rocks.RocksListState)
_maps: tuple[type[MapState], ...] = (heap.MapState, rocks.RocksMapState,
                                     rocks.RocksEntryMapState)
_reducing: tuple[type[ReducingState], ...] = (heap.ReducingState,
                                              rocks.RocksReducingState)



# what a user's type checker sees: the descriptor types the state
def _add(a: int, b: int) -> int:
    return a + b


def _typed(heap_backend: HeapKeyedStateBackend,
           rocks_backend: RocksDBKeyedStateBackend) -> None:
    for backend in (heap_backend, rocks_backend):
        assert_type(backend.get_state(ValueStateDescriptor("n", 0)), ValueState[int])
        assert_type(backend.get_state(ValueStateDescriptor("any")), ValueState[Any])
        assert_type(backend.get_state(ListStateDescriptor("l")), ListState[Any])
        assert_type(backend.get_state(MapStateDescriptor("m")), MapState[Any, Any])
        assert_type(backend.get_state(ReducingStateDescriptor("s", _add)),
                    ReducingState[int])
