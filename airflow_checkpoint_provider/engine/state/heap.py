"""Heap keyed-state backend: state lives in Python dicts, one table per key group.

Tables are ``{state_name: {key_group: {key: value}}}`` so that a snapshot is written and
restored key group by key group (rescaling reads only the key groups a subtask owns).

Snapshot file format (no pickle): a sequence of msgpack objects, one per non-empty key
group, each ``[key_group, {state_name: {key: value}}, 2]`` in the typed encoding of
:mod:`..typed_codec` (format version 2: tuples, sets, datetimes, ... come back as they were
stored); the handle records the byte offset and length of every key group and the file's
SHA-256. Version 1 chunks (plain msgpack, ``[key_group, {state_name: [[key, value], ...]}]``)
restore as before.

A snapshot has two parts, as in Flink's heap backend (``CopyOnWriteStateMap`` in
miniature): :meth:`HeapKeyedStateBackend.capture` (synchronous, on the task thread) takes a
shallow copy of every key group's ``{key: value}`` dict, and
:meth:`HeapKeyedStateBackend.serialize_capture` (asynchronous, on another thread) packs
that copy while the task keeps processing records. The containers that the backend itself
mutates in place (a ``ListState``'s list, a ``MapState``'s dict) are copied on write: the
first in-place change of a key's container after a capture replaces it with a copy, so a
capture never sees later changes.
"""

from __future__ import annotations

import copy
import itertools
import weakref
from collections.abc import Iterator

from ..errors import CorruptCheckpointError
from ..typed_codec import FORMAT_VERSION, UnsupportedValueError, pack_value, unpack_value
from . import ttl
from .backend import StateSnapshot, restore_key_group_chunks, write_state_file
from .contract import SCALARS, checker, refusal
from .descriptors import ENTRY_MAP, LIST, MAP, REDUCING, VALUE, StateDescriptor, check_compatible
from .keygroups import KeyGroupRange, key_group_for

_MISSING = object()
_MUTABLE = (dict, list, set, bytearray)


class HeapCapture:
    """The synchronous part of a heap snapshot: a shallow copy of every non-empty key group
    table, ``{key_group: {state_name: {key: value}}}``, plus each state's serializer and
    meta as they were at capture time. Opaque: pass it to
    :meth:`HeapKeyedStateBackend.serialize_capture` (once)."""

    __slots__ = ("by_kg", "dumps", "meta", "_garbage", "_finalizer", "__weakref__")

    def __init__(
        self, by_kg: dict[int, dict[str, dict]], dumps: dict, meta: dict[str, dict], garbage: list
    ) -> None:
        self.by_kg: dict[int, dict[str, dict]] | None = by_kg
        self.dumps = dumps
        self.meta = meta
        self._garbage = garbage  # copy-on-write bookkeeping, freed off the task thread
        self._finalizer: weakref.finalize | None = None

    @property
    def empty(self) -> bool:
        """Nothing to write (no state entries at capture time)."""
        return not self.by_kg

    def release(self) -> None:
        """Drop the captured tables and stop copy-on-write on their behalf (idempotent)."""
        self.by_kg = None
        self._garbage = None
        if self._finalizer is not None:
            self._finalizer()


class HeapKeyedStateBackend:
    """Keyed state of one operator subtask.

    Snapshots are copy-on-write (see the module docstring). The backend copies the
    containers it mutates in place itself, and while a snapshot is pending it copies a
    mutable value (dict, list, set) the first time ``ValueState.value()`` or
    ``ReducingState.get()``/``add()`` reads it, so ``v = state.value(); v["n"] += 1;
    state.update(v)`` and reduce functions that mutate their accumulator are safe. Not
    covered (as with Flink's heap backend): keeping a reference to an object across
    records and mutating it later without reading it back, and mutable elements of list
    or map state. Call ``update()``/``put()`` with the object you changed.

    ``capture()`` and all state access must happen on one thread (the task thread);
    ``serialize_capture()`` may run on any thread, concurrently with them.
    """

    def __init__(self, operator_uid: str, key_groups: KeyGroupRange, max_parallelism: int) -> None:
        self.operator_uid = operator_uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.tables: dict[str, dict[int, dict]] = {}
        self.descriptors: dict[str, StateDescriptor] = {}
        self.restored_meta: dict[str, dict] = {}
        self.current_key: object = None
        self.current_key_group: int = -1
        # copy-on-write: ids of captures not yet serialized (the state classes copy a
        # container before mutating it in place only while this is non-empty), and per state
        # and key group the keys whose container was created or copied since the last capture
        # (so it is shared with no capture and may be mutated in place)
        self._live_captures: set[int] = set()
        self._capture_ids = itertools.count(1)
        self._owned: dict[str, dict[int, set]] = {}

    # -- key context --------------------------------------------------------------------
    def set_current_key(self, key: object) -> None:
        if isinstance(key, list):
            key = tuple(key)
        self.current_key = key
        self.current_key_group = key_group_for(key, self.max_parallelism)

    def set_current_key_in_group(self, key: object, key_group: int) -> None:
        """:meth:`set_current_key` for a checked key whose key group the caller computed
        (``key_group_for(key, max_parallelism)``, e.g. for a whole batch at once)."""
        self.current_key = key
        self.current_key_group = key_group

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
        """Capture and serialize all state in one go (both parts on the calling thread).

        Returns ``(file_bytes, {key_group: [offset, length]}, state_meta)``.
        """
        return self.serialize_capture(self.capture())

    def capture(self) -> HeapCapture:
        """Synchronous part of a snapshot: a shallow copy of every non-empty key group table
        (C-speed ``dict.copy``), the serializers and the state meta. Call it on the thread
        that accesses the state; serialize the result with :meth:`serialize_capture`."""
        names = sorted(self.tables)
        self._purge_expired()
        by_kg: dict[int, dict[str, dict]] = {}
        for name in names:
            for kg, entries in self.tables[name].items():
                if entries:
                    by_kg.setdefault(kg, {})[name] = entries.copy()
        dumps = {n: self._dumps_for(n) for n in names}
        meta = {n: self._meta_for(n) for n in names}
        # every container now may be shared with this capture: forget which were owned (the
        # old sets are dropped with the capture, off the task thread)
        garbage = []
        for owned in self._owned.values():
            if owned:
                garbage.append(owned.copy())
                owned.clear()
        cap = HeapCapture(by_kg, dumps, meta, garbage)
        if by_kg:
            cid = next(self._capture_ids)
            self._live_captures.add(cid)
            # a capture dropped without being serialized stops copy-on-write when collected
            cap._finalizer = weakref.finalize(cap, self._live_captures.discard, cid)
        return cap

    def _purge_expired(self) -> None:
        """Drop values past their TTL from the live tables (so from this snapshot too).
        Containers are replaced, never changed in place: a pending capture may share them."""
        now = ttl.now_ms()
        for name, d in self.descriptors.items():
            if d.ttl_ms is None:
                continue
            for entries in self.tables.get(name, {}).values():
                for key, stored in list(entries.items()):
                    kept = ttl.purge(d.kind, stored, now, d.ttl_ms)
                    if kept is None:
                        del entries[key]
                    elif kept is not stored:
                        entries[key] = kept

    def serialize_capture(
        self, capture: HeapCapture
    ) -> tuple[bytes, dict[int, list[int]], dict[str, dict]]:
        """Asynchronous part of a snapshot: the bytes, offsets and meta :meth:`snapshot`
        returns, for the state as it was at :meth:`capture`. Reads only the capture, so it
        may run on another thread while the state keeps changing; then releases the capture
        (each capture is serialized once).
        """
        by_kg = capture.by_kg
        if by_kg is None:
            raise RuntimeError("this heap state capture was already serialized or released")
        try:
            dumps = capture.dumps
            chunks: list[bytes] = []
            offsets: dict[int, list[int]] = {}
            pos = 0
            for kg in sorted(by_kg):
                states = {}
                for name, entries in by_kg[kg].items():
                    dump = dumps[name]
                    states[name] = entries if dump is None else {
                        k: dump(v) for k, v in entries.items()}
                try:
                    chunk = pack_value([kg, states, FORMAT_VERSION])
                except UnsupportedValueError:
                    raise self._unencodable(states) from None
                offsets[kg] = [pos, len(chunk)]
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks), offsets, capture.meta
        finally:
            capture.release()

    def _unencodable(self, states: dict) -> Exception:
        """The error naming the state whose captured value cannot be encoded (changed in
        place after it was stored, or a custom serializer's output)."""
        for name, entries in states.items():
            for key, value in entries.items():
                try:
                    pack_value([key, value])
                except UnsupportedValueError as exc:
                    return refusal(self.operator_uid, name, exc, f"(key {key!r:.80}) at snapshot:")
        return RuntimeError("a heap state capture could not be encoded")

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
        kg, states = decode_chunk(chunk, self.operator_uid)
        if kg not in self.key_groups:
            return
        for name, items in states.items():
            self.restored_meta.setdefault(name, state_meta[name])
            self.tables.setdefault(name, {}).setdefault(kg, {}).update(items)

    def keys(self, state_name: str) -> Iterator[object]:
        for kg_table in self.tables.get(state_name, {}).values():
            yield from kg_table

    def drop_state(self, state_name: str) -> None:
        """Forget a state and its entries: later snapshots no longer carry it (an operator
        that moved a restored state's contents into another one)."""
        for registry in (self.tables, self.descriptors, self.restored_meta, self._owned):
            registry.pop(state_name, None)

    # -- the KeyedStateBackend protocol (state/backend.py) ------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        """Capture now (shallow copies, copy-on-write); serialize in ``write``."""
        cap = self.capture()
        if cap.empty:  # no state entries: no state file
            return StateSnapshot(cap.meta)

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            data, offsets, _meta = self.serialize_capture(cap)
            return write_state_file(chk_dir, stem, "state", data,
                                    {"offsets": {str(kg): v for kg, v in offsets.items()}})

        return StateSnapshot(cap.meta, write)

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        restore_key_group_chunks(self, directory, handles, states)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Nothing to confirm: every heap snapshot is self-contained."""

    def close(self) -> None:
        """Nothing to release (the state is garbage-collected with the backend)."""

    def state_size_entries(self) -> int:
        return sum(len(t) for tables in self.tables.values() for t in tables.values())


def decode_chunk(chunk: bytes | memoryview, operator_uid: str) -> tuple[int, dict[str, dict]]:
    """``(key_group, {state: {key: value}})`` of one key-group chunk of a heap snapshot file,
    version 2 (typed) or 1 (plain msgpack: list keys become tuples, as they always did)."""
    try:
        decoded = unpack_value(chunk)
    except (ValueError, TypeError) as exc:  # msgspec.DecodeError (a ValueError)
        raise CorruptCheckpointError(
            f"operator {operator_uid!r}: a heap state chunk cannot be decoded ({exc})") from exc
    if isinstance(decoded, list) and len(decoded) == 3 and decoded[2] == FORMAT_VERSION \
            and isinstance(decoded[1], dict):
        return decoded[0], decoded[1]
    if isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], dict):
        return decoded[0], {name: {tuple(k) if isinstance(k, list) else k: v for k, v in items}
                            for name, items in decoded[1].items()}
    raise CorruptCheckpointError(
        f"operator {operator_uid!r}: a heap state chunk is not [key group, states] (format "
        f"version 1) or [key group, states, {FORMAT_VERSION}]")


class _KeyedState:
    __slots__ = ("backend", "descriptor", "table", "owned", "check")

    def __init__(self, backend: HeapKeyedStateBackend, descriptor: StateDescriptor, table: dict):
        self.backend = backend
        self.descriptor = descriptor
        self.table = table
        #: raises StateValueError for a value a checkpoint would not restore as it was
        self.check = checker(backend.operator_uid, descriptor)
        # {key_group: keys whose container was created or copied since the last capture}
        self.owned: dict[int, set] = backend._owned.setdefault(descriptor.name, {})

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
        if backend._live_captures and isinstance(v, _MUTABLE):
            return self._private(t, key, v)
        return v

    def update(self, value) -> None:
        if value is None:
            self.clear()
        else:
            if type(value) not in SCALARS:
                self.check(value)
            backend = self.backend
            key, kg = backend.current_key, backend.current_key_group
            t = self.table.get(kg)
            if t is None:
                t = self.table[kg] = {}
            t[key] = value
            if backend._live_captures:
                self._own(key)  # the caller's object: no capture holds it


class ListState(_KeyedState):
    __slots__ = ()

    def get(self) -> list:
        t = self._kg_table(False)
        return list(t.get(self.backend.current_key, ())) if t is not None else []

    def add(self, value) -> None:
        self.add_all((value,))

    def add_all(self, values) -> None:
        values = list(values)
        check = self.check
        for v in values:
            if type(v) not in SCALARS:
                check(v)
        t = self._kg_table(True)
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
            self._kg_table(True)[key] = values
            if self.backend._live_captures:
                self._own(key)
        else:
            self.clear()


class MapState(_KeyedState):
    __slots__ = ()

    def _map(self) -> dict | None:
        t = self._kg_table(False)
        return None if t is None else t.get(self.backend.current_key)

    def get(self, user_key, default=None):
        m = self._map()
        return default if m is None else m.get(user_key, default)

    def put(self, user_key, value) -> None:
        if type(user_key) not in SCALARS:
            self.check(user_key, "a map key:")
        if type(value) not in SCALARS:
            self.check(value)
        t = self._kg_table(True)
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
        t = self._kg_table(True)
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
        t = self._kg_table(False)
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
        t = self._kg_table(False)
        if t is None:
            return None
        key = self.backend.current_key
        v = t.get(key)
        return None if v is None else self._private(t, key, v)

    def add(self, value) -> None:
        t = self._kg_table(True)
        key = self.backend.current_key
        current = t.get(key, _MISSING)
        if current is not _MISSING:
            value = self.descriptor.reduce_fn(self._private(t, key, current), value)
        if type(value) not in SCALARS:
            self.check(value)
        t[key] = value
        if self.backend._live_captures:
            self._own(key)


#: entry map state is map state on heap (a dict per key, mutated in place, copy on write)
_STATE_CLASSES = {VALUE: ValueState, LIST: ListState, MAP: MapState, ENTRY_MAP: MapState,
                  REDUCING: ReducingState}
