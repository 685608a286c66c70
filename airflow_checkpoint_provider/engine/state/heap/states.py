"""The heap backend's per-key states: value, list, map and reducing state over the
backend's ``{state: {key_group: {key: value}}}`` tables (they satisfy the protocols of
:mod:`..interface`).

Copy-on-write: while a capture of the backend is pending (``backend._live_captures``), a
container that a state mutates in place (a list state's list, a map state's dict) is copied
the first time it changes, and a mutable value read from value or reducing state is copied
on read, so a pending snapshot never sees later changes (see :mod:`.backend`). Only mutable
values are "owned" (an immutable one is never changed in place, so it needs no copy).

Incremental snapshots (:mod:`.changelog`): every write, removal and copy-on-write copy also
adds the key to ``backend._dirty`` (``{key_group: keys}``, one set per key group for all
states: the second state a record updates finds its key already there), and copy-on-write
stays on between captures so that a mutable value read and changed in place is a changed
key too.
"""

from __future__ import annotations

import copy
from typing import Protocol

from ..contract import SCALARS, checker
from ..descriptors import ENTRY_MAP, LIST, MAP, REDUCING, VALUE, StateDescriptor


class HeapTables(Protocol):
    """What the states read of :class:`~.backend.HeapKeyedStateBackend`: the current key
    and key group, and its copy-on-write bookkeeping."""

    operator_uid: str
    current_key: object
    current_key_group: int
    _live_captures: set[int]
    _owned: dict[str, dict[int, set]]
    _tracking: bool
    _dirty: dict[int, set]

_MISSING = object()
_MUTABLE = (dict, list, set, bytearray)


class _KeyedState:
    __slots__ = ("backend", "descriptor", "table", "owned", "check", "dirty")

    def __init__(self, backend: HeapTables, descriptor: StateDescriptor, table: dict):
        self.backend = backend
        self.descriptor = descriptor
        self.table = table
        #: raises StateValueError for a value a checkpoint would not restore as it was
        self.check = checker(backend.operator_uid, descriptor)
        # {key_group: keys whose container was created or copied since the last capture}
        self.owned: dict[int, set] = backend._owned.setdefault(descriptor.name, {})
        #: incremental snapshots: {key_group: keys changed since the last capture}, or None
        self.dirty: dict[int, set] | None = backend._dirty if backend._tracking else None

    def _kg_table(self) -> dict | None:
        """The current key group's ``{key: value}`` table, if it has one."""
        return self.table.get(self.backend.current_key_group)

    def _kg_table_to_write(self) -> dict:
        """The current key group's ``{key: value}`` table, created if missing."""
        kg = self.backend.current_key_group
        t = self.table.get(kg)
        if t is None:
            t = self.table[kg] = {}
        return t

    def clear(self) -> None:
        t = self._kg_table()
        if t is not None and t.pop(self.backend.current_key, _MISSING) is not _MISSING \
                and self.dirty is not None:
            self._changed(self.backend.current_key)

    def _changed(self, key) -> None:
        """Incremental snapshots: ``key`` (of the current key group) changed."""
        dirty = self.dirty
        if dirty is not None:
            kg = self.backend.current_key_group
            keys = dirty.get(kg)
            if keys is None:
                dirty[kg] = {key}
            else:
                keys.add(key)

    # copy-on-write of the containers ListState/MapState mutate in place; called only while
    # a capture is pending (``backend._live_captures``), with ``t`` the current key group's
    # table and ``key`` the current key
    def _own(self, key) -> None:
        """The container just stored at ``key`` is new: no capture shares it."""
        kg = self.backend.current_key_group
        owned = self.owned.get(kg)
        if owned is None:
            self.owned[kg] = {key}
        else:
            owned.add(key)
        if self.dirty is not None:
            self._changed(key)

    def _writable(self, t: dict, key, container):
        """``container`` (stored at ``key``), or a copy of it replacing it in ``t`` if a
        pending capture may share it."""
        kg = self.backend.current_key_group
        owned = self.owned.get(kg)
        if owned is None:
            owned = self.owned[kg] = set()
        elif key in owned:
            return container
        container = t[key] = container.copy()
        owned.add(key)
        if self.dirty is not None:
            self._changed(key)
        return container


    def _private(self, t: dict, key, value):
        """Copy on read: while a capture may share a mutable ``value`` (dict, list, set,
        bytearray), replace it by a deep copy that only the live table holds, so user code
        that mutates what ``value()`` returned (or a reduce function that mutates its
        accumulator) cannot change a pending checkpoint. Flink's heap backend copies on
        access the same way during a snapshot."""
        if isinstance(value, _MUTABLE) and self.backend._live_captures:
            owned = self.owned.get(self.backend.current_key_group)
            if owned is None or key not in owned:
                value = t[key] = copy.deepcopy(value)
                self._own(key)
        return value


class ValueState(_KeyedState):
    __slots__ = ()

    # value() and update() run once or more per record: _kg_table and _private inlined
    def value(self):
        backend = self.backend
        t = self.table.get(backend.current_key_group)
        if t is None:
            return self.descriptor.default
        key = backend.current_key
        v = t.get(key, _MISSING)
        if v is _MISSING:
            return self.descriptor.default
        if backend._live_captures and type(v) not in SCALARS and isinstance(v, _MUTABLE):
            return self._private(t, key, v)
        return v

    def update(self, value) -> None:
        if value is None:
            self.clear()
        else:
            mutable = type(value) not in SCALARS
            if mutable:
                self.check(value)
            backend = self.backend
            key, kg = backend.current_key, backend.current_key_group
            t = self.table.get(kg)
            if t is None:
                t = self.table[kg] = {}
            t[key] = value
            if mutable and backend._live_captures:
                self._own(key)  # the caller's object: no capture holds it
            dirty = self.dirty
            if dirty is not None:  # _changed, inlined
                keys = dirty.get(kg)
                if keys is None:
                    dirty[kg] = {key}
                else:
                    keys.add(key)


class ListState(_KeyedState):
    __slots__ = ()

    def get(self) -> list:
        t = self._kg_table()
        return list(t.get(self.backend.current_key, ())) if t is not None else []

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        values = list(values)
        check = self.check
        for v in values:
            if type(v) not in SCALARS:
                check(v)
        t = self._kg_table_to_write()
        key = self.backend.current_key
        lst = t.get(key)
        if lst is None:
            t[key] = values
            if self.backend._live_captures:
                self._own(key)
        else:
            if self.backend._live_captures:
                lst = self._writable(t, key, lst)
            lst.extend(values)

    def update(self, values) -> None:
        values = list(values)
        if values:
            check = self.check
            for v in values:
                if type(v) not in SCALARS:
                    check(v)
            key = self.backend.current_key
            self._kg_table_to_write()[key] = values
            if self.backend._live_captures:
                self._own(key)
        else:
            self.clear()


class MapState(_KeyedState):
    __slots__ = ()

    def _map(self) -> dict | None:
        t = self._kg_table()
        return None if t is None else t.get(self.backend.current_key)

    def get(self, user_key, default=None):
        m = self._map()
        return default if m is None else m.get(user_key, default)

    def put(self, user_key, value) -> None:
        if type(user_key) not in SCALARS:
            self.check(user_key, "a map key:")
        if type(value) not in SCALARS:
            self.check(value)
        t = self._kg_table_to_write()
        key = self.backend.current_key
        m = t.get(key)
        if m is None:
            t[key] = {user_key: value}
            if self.backend._live_captures:
                self._own(key)
        else:
            if self.backend._live_captures:
                m = self._writable(t, key, m)
            m[user_key] = value

    def writable_map(self) -> dict:
        """The current key's map, to change in place (created if missing; copied first if a
        pending capture shares it). Leave no empty map behind: ``clear()`` instead."""
        t = self._kg_table_to_write()
        key = self.backend.current_key
        m = t.get(key)
        if m is None:
            m = t[key] = {}
            if self.backend._live_captures:
                self._own(key)
        elif self.backend._live_captures:
            m = self._writable(t, key, m)
        return m

    def remove(self, user_key) -> None:
        t = self._kg_table()
        if t is None:
            return
        key = self.backend.current_key
        m = t.get(key)
        if m is None:
            return
        if user_key in m and len(m) > 1:
            if self.backend._live_captures:
                m = self._writable(t, key, m)
            del m[user_key]
        elif user_key in m or not m:
            del t[key]  # the map would be empty: clear the key
            if self.dirty is not None:
                self._changed(key)

    def pop_all(self, user_keys) -> list:
        """Remove ``user_keys`` and return their values (None for a missing one)."""
        out = [self.get(k) for k in user_keys]
        for k in user_keys:
            self.remove(k)
        return out

    def contains(self, user_key) -> bool:
        m = self._map()
        return m is not None and user_key in m

    def items(self):
        m = self._map()
        return list(m.items()) if m else []

    def keys(self):
        m = self._map()
        return list(m) if m else []

    def is_empty(self) -> bool:
        return not self._map()


class ReducingState(_KeyedState):
    __slots__ = ()

    def get(self):
        t = self._kg_table()
        if t is None:
            return None
        key = self.backend.current_key
        v = t.get(key)
        return None if v is None else self._private(t, key, v)

    def add(self, value) -> None:
        t = self._kg_table_to_write()
        key = self.backend.current_key
        current = t.get(key, _MISSING)
        if current is not _MISSING:
            value = self.descriptor.reduce_fn(  # type: ignore[misc]  # set for REDUCING
                self._private(t, key, current), value)
        if type(value) not in SCALARS:
            self.check(value)
            if self.backend._live_captures:
                self._own(key)
        t[key] = value
        if self.dirty is not None:
            self._changed(key)


#: entry map state is map state on heap (a dict per key, mutated in place, copy on write)
STATE_CLASSES: dict[str, type[_KeyedState]] = {
    VALUE: ValueState, LIST: ListState, MAP: MapState, ENTRY_MAP: MapState,
    REDUCING: ReducingState}
