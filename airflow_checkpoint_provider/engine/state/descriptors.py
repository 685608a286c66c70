"""State descriptors: how a user declares a named keyed state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from ..errors import StateMigrationError
from ..eventtime import duration_ms
from ..serialization import MSGPACK, Serializer

if TYPE_CHECKING:
    from .interface import ListState, MapState, ReducingState, ValueState

#: the state a descriptor declares (``ValueState[int]`` ...): what ``get_state`` returns
S = TypeVar("S")
T = TypeVar("T")

VALUE, LIST, MAP, REDUCING = "value", "list", "map", "reducing"
#: map state kept entry by entry: in RocksDB one row per user key (a write writes one entry,
#: not the whole map as ``MAP`` does); on heap the same dict as ``MAP``. No TTL.
ENTRY_MAP = "entry_map"


#: TTL update types (Flink's ``StateTtlConfig.UpdateType``): when a value's clock restarts
ON_CREATE_AND_WRITE, ON_READ_AND_WRITE = "on_create_and_write", "on_read_and_write"


@dataclass(frozen=True)
class StateDescriptor(Generic[S]):
    """A named keyed state's declaration; ``S`` is the state protocol (of
    :mod:`.interface`) that ``RuntimeContext.get_state`` returns for it. Build one with the
    functions below."""

    name: str
    kind: str
    default: object = None
    reduce_fn: Callable[[Any, Any], Any] | None = None
    serializer: Serializer = field(default=MSGPACK)
    #: time to live in ms of processing time (``None``: forever); see :mod:`.ttl`
    ttl_ms: int | None = None
    ttl_update: str = ON_CREATE_AND_WRITE

    def __post_init__(self) -> None:
        if self.ttl_ms is not None:
            if not isinstance(self.ttl_ms, int) or isinstance(self.ttl_ms, bool) or self.ttl_ms <= 0:
                raise ValueError(f"state {self.name!r}: ttl must be a positive duration, "
                                 f"got {self.ttl_ms!r} ms")
            if self.ttl_update not in (ON_CREATE_AND_WRITE, ON_READ_AND_WRITE):
                raise ValueError(f"state {self.name!r}: ttl_update must be "
                                 f"{ON_CREATE_AND_WRITE!r} or {ON_READ_AND_WRITE!r}, "
                                 f"got {self.ttl_update!r}")
            if self.kind == ENTRY_MAP:
                raise ValueError(f"state {self.name!r}: entry map state takes no TTL")
            if self.kind in (LIST, MAP) and self.serializer.name != "msgpack":
                raise ValueError(f"state {self.name!r}: TTL on {self.kind} state needs the "
                                 "default msgpack serializer")

    @property
    def meta(self) -> dict:
        """What a snapshot records of the declaration. TTL state stores each value with a
        timestamp, so whether a state has a TTL is part of its format (its duration is not)."""
        meta: dict[str, object] = {"kind": self.kind, "serializer": self.serializer.name}
        if self.ttl_ms is not None:
            meta["ttl"] = True
        return meta


def _ttl(ttl) -> int | None:
    return None if ttl is None else duration_ms(ttl, "ttl")


@overload
def ValueStateDescriptor(name: str, default: None = None, serializer: Serializer = MSGPACK,
                         *, ttl: Any = None,
                         ttl_update: str = ON_CREATE_AND_WRITE) -> StateDescriptor[ValueState[Any]]:
    ...


@overload
def ValueStateDescriptor(name: str, default: T, serializer: Serializer = MSGPACK,
                         *, ttl: Any = None,
                         ttl_update: str = ON_CREATE_AND_WRITE) -> StateDescriptor[ValueState[T]]:
    ...


def ValueStateDescriptor(name: str, default: Any = None, serializer: Serializer = MSGPACK,
                         *, ttl: Any = None,
                         ttl_update: str = ON_CREATE_AND_WRITE) -> StateDescriptor[ValueState[Any]]:
    """One value per key; ``default`` (its type is the state's) when a key has none."""
    return StateDescriptor(name, VALUE, default=default, serializer=serializer,
                           ttl_ms=_ttl(ttl), ttl_update=ttl_update)


def ListStateDescriptor(name: str, serializer: Serializer = MSGPACK, *, ttl: Any = None,
                        ttl_update: str = ON_CREATE_AND_WRITE) -> StateDescriptor[ListState[Any]]:
    return StateDescriptor(name, LIST, serializer=serializer, ttl_ms=_ttl(ttl),
                           ttl_update=ttl_update)


def MapStateDescriptor(name: str, serializer: Serializer = MSGPACK, *, ttl: Any = None,
                       ttl_update: str = ON_CREATE_AND_WRITE
                       ) -> StateDescriptor[MapState[Any, Any]]:
    return StateDescriptor(name, MAP, serializer=serializer, ttl_ms=_ttl(ttl),
                           ttl_update=ttl_update)


def EntryMapStateDescriptor(name: str, serializer: Serializer = MSGPACK
                            ) -> StateDescriptor[MapState[Any, Any]]:
    """Map state whose entries are stored one by one (RocksDB: a ``put`` writes one row),
    for maps that grow by many small writes (the join buffers). Same API as map state."""
    return StateDescriptor(name, ENTRY_MAP, serializer=serializer)


def ReducingStateDescriptor(
    name: str, reduce_fn: Callable[[T, T], T], serializer: Serializer = MSGPACK,
    *, ttl: Any = None, ttl_update: str = ON_CREATE_AND_WRITE,
) -> StateDescriptor[ReducingState[T]]:
    return StateDescriptor(name, REDUCING, reduce_fn=reduce_fn, serializer=serializer,
                           ttl_ms=_ttl(ttl), ttl_update=ttl_update)


def check_compatible(operator_uid: str, descriptor: StateDescriptor[Any],
                     existing: StateDescriptor[Any] | None, restored_meta: dict | None) -> None:
    """Refuse a state declaration that contradicts an earlier registration or the restored
    snapshot's (kind, serializer): decoding it would produce garbage."""
    if existing is not None:
        if existing.meta != descriptor.meta:
            raise StateMigrationError(
                f"operator {operator_uid!r}: state {descriptor.name!r} is already "
                f"registered as {existing.meta}, cannot register it as {descriptor.meta}")
        return
    if restored_meta is not None and bool(restored_meta.get("ttl")) != bool(descriptor.ttl_ms) \
            and {k: v for k, v in restored_meta.items() if k != "ttl"} == \
            {k: v for k, v in descriptor.meta.items() if k != "ttl"}:
        had = "with" if restored_meta.get("ttl") else "without"
        raise StateMigrationError(
            f"operator {operator_uid!r}: state {descriptor.name!r} was snapshotted {had} a TTL "
            f"and is now declared {'with' if descriptor.ttl_ms else 'without'} one; adding or "
            "removing a TTL changes how values are stored: keep the declaration, or use a new "
            "state name")
    if restored_meta is not None and restored_meta != descriptor.meta:
        raise StateMigrationError(
            f"operator {operator_uid!r}: state {descriptor.name!r} was snapshotted as "
            f"{restored_meta['kind']} state with serializer {restored_meta['serializer']!r} but is "
            f"declared as {descriptor.kind} state with serializer "
            f"{descriptor.serializer.name!r}; restore with the original declaration or "
            "drop the state (allow_non_restored_state)")
