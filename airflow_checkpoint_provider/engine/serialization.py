"""Serialization of records and state without pickle.

Records on the wire are msgpack arrays of maps (one frame per batch) or Arrow IPC streams
when the batch is a ``pyarrow.RecordBatch``. State values are msgpack unless a state
declares an explicit :class:`Serializer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgpack


def packb(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpackb(data: bytes) -> object:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


@dataclass(frozen=True)
class Serializer:
    """A named value serializer. The name is recorded in snapshots: restoring a state whose
    serializer name changed fails with :class:`StateMigrationError` instead of decoding garbage.
    """

    name: str
    dumps: Callable[[object], object]
    loads: Callable[[object], object]


MSGPACK = Serializer("msgpack", lambda v: v, lambda v: v)
