"""State time-to-live for value, list, map and reducing state (Flink's ``StateTtlConfig``).

A state declared with ``ttl`` stores each value with the processing time (epoch ms) it was
last written, or also read with ``ttl_update="on_read_and_write"``: value and reducing state
as ``[value, ts]``, list state element by element, map state entry by entry. A value older
than the TTL is never returned (it reads as absent and is removed), and expired values are
dropped when a checkpoint is taken: the heap backend while it captures the tables, RocksDB
incrementally (a bounded number of entries per checkpoint), so checkpoints stop growing.

The wrappers sit on top of either backend's state objects, which store the wrapped values
without knowing about TTL; :func:`purge` is the one place that decides what expired.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator

from ..serialization import Serializer
from .descriptors import LIST, MAP, ON_READ_AND_WRITE, REDUCING, VALUE, StateDescriptor

_clock = threading.local()


def now_ms() -> int:
    """Processing time (epoch ms) of TTL decisions and ``current_processing_time()``: the
    wall clock, or the time :func:`processing_time_at` set for this thread."""
    at = getattr(_clock, "at", None)
    return at if at is not None else wall_ms()


def wall_ms() -> int:
    return int(time.time() * 1000)


@contextlib.contextmanager
def processing_time_at(ms: int | None) -> Iterator[None]:
    """In this thread, processing time stands still at ``ms`` (``None``: the wall clock).

    A task restored from an unaligned checkpoint replays the records that were in flight
    at the checkpoint as of the checkpoint's time: in a run without the failure they were
    processed right after it. On the wall clock, the downtime in between would expire the
    restored state they belong to (TTL) and count them from zero (Nexmark q12: windows by
    processing time, the window's state with a TTL, lower totals per bidder)."""
    before = getattr(_clock, "at", None)
    _clock.at = ms
    try:
        yield
    finally:
        _clock.at = before


def _alive(entry, now: int, ttl: int) -> bool:
    return now - entry[1] < ttl


def purge(kind: str, stored, now: int, ttl: int):
    """``stored`` without its expired values; ``None`` when nothing is left."""
    if kind in (VALUE, REDUCING):
        return stored if _alive(stored, now, ttl) else None
    kept: list | dict
    if kind == LIST:
        kept = [e for e in stored if _alive(e, now, ttl)]
    else:
        kept = {k: e for k, e in stored.items() if _alive(e, now, ttl)}
    if len(kept) == len(stored):
        return stored
    return kept or None


def inner_descriptor(d: StateDescriptor) -> StateDescriptor:
    """The descriptor the backend stores: same name and meta, values wrapped with their
    timestamp (a custom serializer of value/reducing state sees only the value)."""
    ser = d.serializer
    if ser.name != "msgpack" and d.kind in (VALUE, REDUCING):
        dumps, loads = ser.dumps, ser.loads

        def wrapped_dumps(w):
            return [dumps(w[0]), w[1]]

        def wrapped_loads(w):
            return [loads(w[0]), w[1]]

        ser = Serializer(ser.name, wrapped_dumps, wrapped_loads)
    reduce_fn = None
    if d.kind == REDUCING:
        fn = d.reduce_fn

        def reduce_fn(acc, new, fn=fn):
            return [fn(acc[0], new[0]), new[1]]
    return dataclasses.replace(d, default=None, serializer=ser, reduce_fn=reduce_fn)


class _Ttl:
    __slots__ = ("inner", "ttl", "on_read", "default")

    def __init__(self, inner, d: StateDescriptor) -> None:
        assert d.ttl_ms is not None
        self.inner = inner
        self.ttl: int = d.ttl_ms
        self.on_read = d.ttl_update == ON_READ_AND_WRITE
        self.default = d.default

    def clear(self) -> None:
        self.inner.clear()


class TtlValueState(_Ttl):
    __slots__ = ()

    def value(self):
        stored = self.inner.value()
        if stored is None:
            return self.default
        now = now_ms()
        if not _alive(stored, now, self.ttl):
            self.inner.clear()
            return self.default
        if self.on_read:
            self.inner.update([stored[0], now])
        return stored[0]

    def update(self, value) -> None:
        if value is None:
            self.inner.clear()
        else:
            self.inner.update([value, now_ms()])


class TtlReducingState(_Ttl):
    __slots__ = ()

    def get(self):
        stored = self.inner.get()
        if stored is None:
            return None
        now = now_ms()
        if not _alive(stored, now, self.ttl):
            self.inner.clear()
            return None
        if self.on_read:
            self.inner.clear()
            self.inner.add([stored[0], now])
        return stored[0]

    def add(self, value) -> None:
        stored = self.inner.get()
        if stored is not None and not _alive(stored, now_ms(), self.ttl):
            self.inner.clear()  # an expired accumulator does not take part
        self.inner.add([value, now_ms()])


class TtlListState(_Ttl):
    __slots__ = ()

    def _live(self) -> list:
        stored = self.inner.get()
        if not stored:
            return []
        now = now_ms()
        kept = purge(LIST, stored, now, self.ttl) or []
        if self.on_read and kept:
            kept = [[v, now] for v, _ in kept]
        if kept is not stored:
            self.inner.update(kept)
        return kept

    def get(self) -> list:
        return [v for v, _ in self._live()]

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        now = now_ms()
        self.inner.update([*self._live(), *([v, now] for v in values)])

    def update(self, values) -> None:
        now = now_ms()
        self.inner.update([[v, now] for v in values])


class TtlMapState(_Ttl):
    __slots__ = ()

    def _entry(self, user_key):
        stored = self.inner.get(user_key)
        if stored is None:
            return None
        now = now_ms()
        if not _alive(stored, now, self.ttl):
            self.inner.remove(user_key)
            return None
        if self.on_read:
            self.inner.put(user_key, [stored[0], now])
        return stored

    def get(self, user_key, default=None):
        entry = self._entry(user_key)
        return default if entry is None else entry[0]

    def put(self, user_key, value) -> None:
        self.inner.put(user_key, [value, now_ms()])

    def remove(self, user_key) -> None:
        self.inner.remove(user_key)

    def contains(self, user_key) -> bool:
        return self._entry(user_key) is not None

    def _live(self) -> dict:
        stored = dict(self.inner.items())
        now = now_ms()
        kept = purge(MAP, stored, now, self.ttl) or {}
        for k in stored.keys() - kept.keys():
            self.inner.remove(k)
        if self.on_read:
            for k, (v, _) in kept.items():
                self.inner.put(k, [v, now])
        return kept

    def items(self):
        return [(k, e[0]) for k, e in self._live().items()]

    def keys(self):
        return list(self._live())

    def is_empty(self) -> bool:
        return not self._live()


_WRAPPERS = {VALUE: TtlValueState, LIST: TtlListState, MAP: TtlMapState,
             REDUCING: TtlReducingState}


def ttl_state(backend, descriptor: StateDescriptor):
    """The state ``descriptor`` declares (it has a TTL), on ``backend``."""
    return _WRAPPERS[descriptor.kind](backend.get_state(inner_descriptor(descriptor)), descriptor)
