"""State descriptors: how a user declares a named keyed state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..serialization import MSGPACK, Serializer

VALUE, LIST, MAP, REDUCING = "value", "list", "map", "reducing"


@dataclass(frozen=True)
class StateDescriptor:
    name: str
    kind: str
    default: object = None
    reduce_fn: Callable[[object, object], object] | None = None
    serializer: Serializer = field(default=MSGPACK)

    @property
    def meta(self) -> dict:
        return {"kind": self.kind, "serializer": self.serializer.name}


def ValueStateDescriptor(name: str, default: object = None, serializer: Serializer = MSGPACK):
    return StateDescriptor(name, VALUE, default=default, serializer=serializer)


def ListStateDescriptor(name: str, serializer: Serializer = MSGPACK):
    return StateDescriptor(name, LIST, serializer=serializer)


def MapStateDescriptor(name: str, serializer: Serializer = MSGPACK):
    return StateDescriptor(name, MAP, serializer=serializer)


def ReducingStateDescriptor(
    name: str, reduce_fn: Callable[[object, object], object], serializer: Serializer = MSGPACK
):
    return StateDescriptor(name, REDUCING, reduce_fn=reduce_fn, serializer=serializer)
