"""Heap keyed-state backend: state lives in Python dicts, one table per key group.

Tables are ``{state_name: {key_group: {key: value}}}`` so that a snapshot is written and
restored key group by key group (rescaling reads only the key groups a subtask owns).

Snapshot file format (no pickle): a sequence of msgpack objects, one per non-empty key
group, each ``[key_group, {state_name: [[key, value], ...]}]``; the handle records the byte
offset and length of every key group and the file's SHA-256.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..serialization import packb, unpackb
from .descriptors import LIST, MAP, REDUCING, VALUE, StateDescriptor, check_compatible
from .keygroups import KeyGroupRange, key_group_for

_MISSING = object()


class HeapKeyedStateBackend:
    """Keyed state of one operator subtask."""

    def __init__(self, operator_uid: str, key_groups: KeyGroupRange, max_parallelism: int) -> None:
        self.operator_uid = operator_uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.tables: dict[str, dict[int, dict]] = {}
        self.descriptors: dict[str, StateDescriptor] = {}
        self.restored_meta: dict[str, dict] = {}
        self.current_key: object = None
        self.current_key_group: int = -1

    # -- key context --------------------------------------------------------------------
    def set_current_key(self, key: object) -> None:
        if isinstance(key, list):
            key = tuple(key)
        self.current_key = key
        self.current_key_group = key_group_for(key, self.max_parallelism)

    # -- registration -------------------------------------------------------------------
    def get_state(self, descriptor: StateDescriptor):
        existing = self.descriptors.get(descriptor.name)
        restored = self.restored_meta.get(descriptor.name)
        check_compatible(self.operator_uid, descriptor, existing, restored)
        if existing is None:
            self.descriptors[descriptor.name] = descriptor
            table = self.tables.setdefault(descriptor.name, {})
            if restored is not None and descriptor.serializer.name != "msgpack":
                loads = descriptor.serializer.loads
                for kg_table in table.values():
                    for k in kg_table:
                        kg_table[k] = loads(kg_table[k])
        cls = _STATE_CLASSES[descriptor.kind]
        return cls(self, descriptor, self.tables[descriptor.name])

    # -- snapshot -----------------------------------------------------------------------
    def snapshot(self) -> tuple[bytes, dict[int, list[int]], dict[str, dict]]:
        """Synchronous part: serialize a consistent copy of all state.

        Returns ``(file_bytes, {key_group: [offset, length]}, state_meta)``.
        """
        names = sorted(self.tables)
        dumps = {n: self._dumps_for(n) for n in names}
        per_kg: dict[int, dict[str, list]] = {}
        for name in names:
            dump = dumps[name]
            for kg, entries in self.tables[name].items():
                if not entries:
                    continue
                if dump is None:
                    items = list(entries.items())  # (key, value) tuples pack as arrays
                else:
                    items = [[k, dump(v)] for k, v in entries.items()]
                per_kg.setdefault(kg, {})[name] = items
        chunks: list[bytes] = []
        offsets: dict[int, list[int]] = {}
        pos = 0
        for kg in sorted(per_kg):
            chunk = packb([kg, per_kg[kg]])
            offsets[kg] = [pos, len(chunk)]
            chunks.append(chunk)
            pos += len(chunk)
        meta = {n: self._meta_for(n) for n in names}
        return b"".join(chunks), offsets, meta

    def _dumps_for(self, name: str):
        d = self.descriptors.get(name)
        if d is None or d.serializer.name == "msgpack":
            return None
        return d.serializer.dumps

    def _meta_for(self, name: str) -> dict:
        d = self.descriptors.get(name)
        return d.meta if d is not None else self.restored_meta[name]

    # -- restore ------------------------------------------------------------------------
    def restore_key_group_chunk(self, chunk: bytes, state_meta: dict[str, dict]) -> None:
        kg, states = unpackb(chunk)
        if kg not in self.key_groups:
            return
        for name, items in states.items():
            self.restored_meta.setdefault(name, state_meta[name])
            table = self.tables.setdefault(name, {}).setdefault(kg, {})
            for k, v in items:
                table[tuple(k) if isinstance(k, list) else k] = v

    def keys(self, state_name: str) -> Iterator[object]:
        for kg_table in self.tables.get(state_name, {}).values():
            yield from kg_table

    def state_size_entries(self) -> int:
        return sum(len(t) for tables in self.tables.values() for t in tables.values())


class _KeyedState:
    __slots__ = ("backend", "descriptor", "table")

    def __init__(self, backend: HeapKeyedStateBackend, descriptor: StateDescriptor, table: dict):
        self.backend = backend
        self.descriptor = descriptor
        self.table = table

    def _kg_table(self, create: bool) -> dict | None:
        kg = self.backend.current_key_group
        t = self.table.get(kg)
        if t is None and create:
            t = self.table[kg] = {}
        return t

    def clear(self) -> None:
        t = self._kg_table(False)
        if t is not None:
            t.pop(self.backend.current_key, None)


class ValueState(_KeyedState):
    __slots__ = ()

    def value(self):
        t = self._kg_table(False)
        if t is None:
            return self.descriptor.default
        return t.get(self.backend.current_key, self.descriptor.default)

    def update(self, value) -> None:
        if value is None:
            self.clear()
        else:
            self._kg_table(True)[self.backend.current_key] = value


class ListState(_KeyedState):
    __slots__ = ()

    def get(self) -> list:
        t = self._kg_table(False)
        return list(t.get(self.backend.current_key, ())) if t is not None else []

    def add(self, value) -> None:
        t = self._kg_table(True)
        t.setdefault(self.backend.current_key, []).append(value)

    def add_all(self, values) -> None:
        t = self._kg_table(True)
        t.setdefault(self.backend.current_key, []).extend(values)

    def update(self, values) -> None:
        values = list(values)
        if values:
            self._kg_table(True)[self.backend.current_key] = values
        else:
            self.clear()


class MapState(_KeyedState):
    __slots__ = ()

    def _map(self, create: bool) -> dict | None:
        t = self._kg_table(create)
        if t is None:
            return None
        m = t.get(self.backend.current_key)
        if m is None and create:
            m = t[self.backend.current_key] = {}
        return m

    def get(self, user_key, default=None):
        m = self._map(False)
        return default if m is None else m.get(user_key, default)

    def put(self, user_key, value) -> None:
        self._map(True)[user_key] = value

    def remove(self, user_key) -> None:
        m = self._map(False)
        if m is not None:
            m.pop(user_key, None)
            if not m:
                self.clear()

    def contains(self, user_key) -> bool:
        m = self._map(False)
        return m is not None and user_key in m

    def items(self):
        m = self._map(False)
        return list(m.items()) if m else []

    def keys(self):
        m = self._map(False)
        return list(m) if m else []

    def is_empty(self) -> bool:
        return not self._map(False)


class ReducingState(_KeyedState):
    __slots__ = ()

    def get(self):
        t = self._kg_table(False)
        return None if t is None else t.get(self.backend.current_key)

    def add(self, value) -> None:
        t = self._kg_table(True)
        key = self.backend.current_key
        current = t.get(key, _MISSING)
        t[key] = value if current is _MISSING else self.descriptor.reduce_fn(current, value)


_STATE_CLASSES = {VALUE: ValueState, LIST: ListState, MAP: MapState, REDUCING: ReducingState}
