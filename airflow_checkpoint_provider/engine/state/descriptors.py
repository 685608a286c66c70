"""State descriptors: how a user declares a named keyed state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import StateMigrationError
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


def check_compatible(operator_uid: str, descriptor: StateDescriptor,
                     existing: StateDescriptor | None, restored_meta: dict | None) -> None:
    """Refuse a state declaration that contradicts an earlier registration or the restored
    snapshot's (kind, serializer): decoding it would produce garbage."""
    if existing is not None:
        if existing.meta != descriptor.meta:
            raise StateMigrationError(
                f"operator {operator_uid!r}: state {descriptor.name!r} is already "
                f"registered as {existing.meta}, cannot register it as {descriptor.meta}")
        return
    if restored_meta is not None and restored_meta != descriptor.meta:
        raise StateMigrationError(
            f"operator {operator_uid!r}: state {descriptor.name!r} was snapshotted as "
            f"{restored_meta['kind']} state with serializer {restored_meta['serializer']!r} but is "
            f"declared as {descriptor.kind} state with serializer "
            f"{descriptor.serializer.name!r}; restore with the original declaration or "
            "drop the state (allow_non_restored_state)")
