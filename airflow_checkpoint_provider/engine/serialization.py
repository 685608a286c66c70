"""Serialization of records and state without pickle.

Records on the wire are msgpack arrays of maps (one frame per batch) in the typed encoding
of :mod:`.typed_codec`, or Arrow IPC streams when the batch is a ``pyarrow.RecordBatch``.
State values use the same typed encoding (through an explicit :class:`Serializer` if a
state declares one). :func:`packb`/:func:`unpackb` are plain msgpack, for the protocol's
own frames (barriers, control messages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgpack

from .errors import BadRecordError
from .typed_codec import UnsupportedValueError, pack_value, unpack_value


def pack_records(records: list) -> bytes:
    """A batch of dict records for the data path (channels, in-flight records of unaligned
    checkpoints): the typed encoding, so a record's fields have the same types whether an
    edge is chained (objects passed as they are) or crosses a process -- tuples stay tuples,
    sets sets, datetimes keep their time zone, Decimals stay Decimals. A field of a type
    that cannot cross a process that way is a :class:`~.errors.BadRecordError` naming the
    type (the same on every edge, chained ones aside)."""
    try:
        return pack_value(records)
    except UnsupportedValueError as exc:
        raise BadRecordError(
            f"a record holds {exc}: records that leave a task are encoded, and that type "
            "would not arrive as it was sent") from None


def unpack_records(data: bytes) -> list:
    """Inverse of :func:`pack_records`; reads batches of earlier versions (plain msgpack)."""
    return unpack_value(data)  # type: ignore[return-value]


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
