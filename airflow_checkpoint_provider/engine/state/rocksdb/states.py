"""The state objects of the RocksDB backend (value, list, map, entry map, reducing): each
reads and writes its rows through the backend's row cache (:mod:`.`), keyed by the current
key's prefix and the state's name."""

from __future__ import annotations

from typing import Any, Protocol

from rocksdict import WriteBatch

from ...typed_codec import UnsupportedValueError, pack_key, pack_value, unpack_key, unpack_value
from ..contract import SCALARS, checker, refusal
from ..descriptors import ENTRY_MAP, LIST, MAP, REDUCING, VALUE, StateDescriptor


class RowStore(Protocol):
    """What a state object uses of :class:`~.RocksDBKeyedStateBackend` (a protocol: this
    module never imports the backend's)."""

    operator_uid: str
    db: Any
    _prefix: bytes       # the current key's row prefix: key group, then (after the
    _key_bytes: bytes    # state's name) the msgpack of the key: see _db_key

    def _db_key(self, suffix: bytes) -> bytes: ...

    def _read(self, key: bytes) -> bytes | None: ...

    def _write(self, key: bytes, value: bytes | None) -> None: ...


def _untuple(k):
    return tuple(k) if isinstance(k, list) else k


def _msgpack_append(raw: bytes, tail: list[bytes]) -> bytes | None:
    """The msgpack array ``raw`` with the packed elements ``tail`` appended, its elements
    left encoded (what ``packb([*unpackb(raw), *elements])`` gives, without decoding or
    re-encoding the stored ones); ``None`` when ``raw`` is not an array."""
    head = raw[0]
    if 0x90 <= head <= 0x9F:
        n, at = head & 0x0F, 1
    elif head == 0xDC:
        n, at = int.from_bytes(raw[1:3], "big"), 3
    elif head == 0xDD:
        n, at = int.from_bytes(raw[1:5], "big"), 5
    else:
        return None
    n += len(tail)
    header = (bytes((0x90 | n,)) if n <= 15 else b"\xdc" + n.to_bytes(2, "big") if n <= 0xFFFF
              else b"\xdd" + n.to_bytes(4, "big"))
    return b"".join((header, memoryview(raw)[at:], *tail))


class _RocksState:
    __slots__ = ("backend", "descriptor", "name_bytes", "dumps", "loads", "custom", "check")

    def __init__(self, backend: RowStore, descriptor: StateDescriptor) -> None:
        self.backend = backend
        self.descriptor = descriptor
        self.name_bytes = descriptor.name.encode() + b"\x00"
        ser = descriptor.serializer
        custom = self.custom = ser.name != "msgpack"
        check = self.check = checker(backend.operator_uid, descriptor)
        uid, name = backend.operator_uid, descriptor.name

        def dumps(v):
            if custom:
                v = ser.dumps(v)
            elif type(v) not in SCALARS:
                check(v)
            try:
                return pack_value(v)
            except UnsupportedValueError as exc:  # a custom serializer's output
                raise refusal(uid, name, exc) from None

        self.dumps = dumps
        self.loads = (lambda b: ser.loads(unpack_value(b))) if custom else unpack_value

    # the row's key is built inline (``backend._db_key``): these run per record
    def _get(self, default=None):
        b = self.backend
        raw = b._read(b._prefix + self.name_bytes + b._key_bytes)
        return default if raw is None else self.loads(raw)

    def _put(self, value) -> None:
        b = self.backend
        b._write(b._prefix + self.name_bytes + b._key_bytes, self.dumps(value))

    def clear(self) -> None:
        self.backend._write(self.backend._db_key(self.name_bytes), None)


class RocksValueState(_RocksState):
    __slots__ = ()

    def value(self):  # _get, inlined (per record)
        b = self.backend
        raw = b._read(b._prefix + self.name_bytes + b._key_bytes)
        return self.descriptor.default if raw is None else self.loads(raw)

    def update(self, value) -> None:  # _put, inlined (per record)
        b = self.backend
        b._write(b._prefix + self.name_bytes + b._key_bytes,
                 None if value is None else self.dumps(value))


class RocksListState(_RocksState):
    __slots__ = ()

    def get(self) -> list:
        return list(self._get([]))

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        """Append: the stored elements stay encoded (a read and a write of bytes per call,
        not a decode and re-encode of the whole list, which made appends to a long list
        quadratic in Python)."""
        values = list(values)
        if self.custom or not values:
            self._put([*self._get([]), *values])
            return
        key = self.backend._db_key(self.name_bytes)
        raw = self.backend._read(key)
        dumps = self.dumps
        new = None if raw is None else _msgpack_append(raw, [dumps(v) for v in values])
        if new is None:
            old: list = [] if raw is None else list(unpack_value(raw))  # type: ignore[call-overload]
            new = dumps([*old, *values])
        self.backend._write(key, new)

    def update(self, values) -> None:
        values = list(values)
        if values:
            self._put(values)
        else:
            self.clear()


class RocksMapState(_RocksState):
    __slots__ = ()

    def _map(self) -> dict:
        return self._get({}) or {}

    def get(self, user_key, default=None):
        return self._map().get(user_key, default)

    def put(self, user_key, value) -> None:
        if type(user_key) not in SCALARS:
            self.check(user_key, "a map key:")
        m = self._map()
        m[user_key] = value
        self._put(m)

    def remove(self, user_key) -> None:
        m = self._map()
        if user_key in m:
            del m[user_key]
            self._put(m) if m else self.clear()

    def pop_all(self, user_keys) -> list:
        """Remove ``user_keys`` and return their values (None for a missing one): one read
        and one write of the key's map, not one per user key."""
        m = self._map()
        out = [m.pop(k, None) for k in user_keys]
        self._put(m) if m else self.clear()
        return out

    def contains(self, user_key) -> bool:
        return user_key in self._map()

    def items(self):
        return list(self._map().items())

    def keys(self):
        return list(self._map())

    def is_empty(self) -> bool:
        return not self._map()


class RocksEntryMapState(_RocksState):
    """Map state with one RocksDB row per entry: ``put`` and ``remove`` touch one row, reads
    of the whole map scan the key's rows (in the byte order of the msgpack user keys)."""

    __slots__ = ()

    def _row(self, user_key) -> bytes:
        return self.backend._db_key(self.name_bytes) + pack_key(user_key)

    def _scan(self):
        base = self.backend._db_key(self.name_bytes)
        it = self.backend.db.iter()
        it.seek(base)
        n = len(base)
        while it.valid():
            k = it.key()
            if k[:n] != base:
                break
            yield k[n:], it.value()
            it.next()

    def get(self, user_key, default=None):
        raw = self.backend.db.get(self._row(user_key))
        return default if raw is None else self.loads(raw)

    def put(self, user_key, value) -> None:
        if type(user_key) not in SCALARS:
            self.check(user_key, "a map key:")
        self.backend.db.put(self._row(user_key), self.dumps(value))

    def remove(self, user_key) -> None:
        self.backend.db.delete(self._row(user_key))

    def pop_all(self, user_keys) -> list:
        """Remove ``user_keys`` and return their values (None for a missing one)."""
        out = [self.get(k) for k in user_keys]
        for k in user_keys:
            self.remove(k)
        return out

    def contains(self, user_key) -> bool:
        return self.backend.db.get(self._row(user_key)) is not None

    def items(self):
        loads = self.loads
        return [(unpack_key(k), loads(v)) for k, v in self._scan()]

    def keys(self):
        return [unpack_key(k) for k, _ in self._scan()]

    def is_empty(self) -> bool:
        return next(self._scan(), None) is None

    def clear(self) -> None:
        # point deletes, not delete_range: a range tombstone per key (one per window and
        # key in a window join) slows every later read and scan down by orders of magnitude
        base = self.backend._db_key(self.name_bytes)
        rows = [k for k, _ in self._scan()]
        if len(rows) == 1:
            self.backend.db.delete(base + rows[0])
        elif rows:
            batch = WriteBatch(raw_mode=True)
            for k in rows:
                batch.delete(base + k)
            self.backend.db.write(batch)


class RocksReducingState(_RocksState):
    __slots__ = ()

    def get(self):
        return self._get(None)

    def add(self, value) -> None:
        current = self._get(None)
        self._put(value if current is None
                  else self.descriptor.reduce_fn(current, value))  # type: ignore[misc]


ROCKS_STATES = {VALUE: RocksValueState, LIST: RocksListState, MAP: RocksMapState,
                 ENTRY_MAP: RocksEntryMapState, REDUCING: RocksReducingState}
