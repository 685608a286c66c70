"""The heap keyed-state backend: state in Python dicts, one table per key group, snapshots
copy-on-write (:mod:`.backend`), value/list/map/reducing state over those tables
(:mod:`.states`)."""

from .backend import HeapCapture, HeapKeyedStateBackend, decode_chunk
from .states import ListState, MapState, ReducingState, ValueState

__all__ = ["HeapCapture", "HeapKeyedStateBackend", "ListState", "MapState", "ReducingState",
           "ValueState", "decode_chunk"]
