"""Heap keyed-state backend: state lives in Python dicts, one table per key group.

Tables are ``{state_name: {key_group: {key: value}}}`` so that a snapshot is written and
restored key group by key group (rescaling reads only the key groups a subtask owns).

Snapshot file format (no pickle): :mod:`.format` (one msgpack chunk per key group, with
its offset in the handle). With ``incremental=True`` a checkpoint writes only the keys
changed since the last completed one, on top of a chain of files under the job's
``shared/`` (:mod:`.changelog`); savepoints are always full.

A snapshot has two parts, as in Flink's heap backend (``CopyOnWriteStateMap`` in
miniature): :meth:`HeapKeyedStateBackend.capture` (synchronous, on the task thread) takes a
shallow copy of every key group's ``{key: value}`` dict, and
:meth:`HeapKeyedStateBackend.serialize_capture` (asynchronous, on another thread) packs
that copy while the task keeps processing records. The containers that the backend itself
mutates in place (a ``ListState``'s list, a ``MapState``'s dict) are copied on write: the
first in-place change of a key's container after a capture replaces it with a copy, so a
capture never sees later changes. While incremental, that bookkeeping stays on between
captures: the keys it records are the keys changed since the last capture.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterator
from typing import TypeVar, cast

from ...typed_codec import FORMAT_VERSION, UnsupportedValueError, pack_value
from .. import ttl
from ..backend import StateSnapshot, write_state_file
from ..contract import refusal
from ..descriptors import StateDescriptor, check_compatible
from ..keygroups import KeyGroupRange, key_group_for
from .changelog import Chain, changed_keys, encode_delta, write_shared
from .format import decode_chunk
from .restore import restore_heap_backend
from .states import STATE_CLASSES

S = TypeVar("S")

#: the capture id that keeps copy-on-write bookkeeping on for good (incremental snapshots)
ALWAYS = 0


class HeapCapture:
    """The synchronous part of a heap snapshot: a shallow copy of every non-empty key group
    table, ``{key_group: {state_name: {key: value}}}``, plus each state's serializer and
    meta as they were at capture time. Opaque: pass it to
    :meth:`HeapKeyedStateBackend.serialize_capture` (once)."""

    __slots__ = ("by_kg", "dumps", "meta", "dirty", "_garbage", "_finalizer", "__weakref__")

    def __init__(
        self, by_kg: dict[int, dict[str, dict]], dumps: dict, meta: dict[str, dict], garbage: list,
        dirty: dict[int, set] | None = None,
    ) -> None:
        self.by_kg: dict[int, dict[str, dict]] | None = by_kg
        self.dumps = dumps
        self.meta = meta
        self._garbage: list | None = garbage  # copy-on-write bookkeeping, freed off the task thread
        #: incremental: the keys changed since the previous capture, {key_group: keys}
        self.dirty = dirty
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

    :param incremental: checkpoints write only the keys changed since the last completed
        checkpoint (:mod:`.changelog`); savepoints stay full.
    :param max_deltas: incremental: a checkpoint writes a new base (compaction) when the
        chain has this many deltas...
    :param compaction_ratio: ...or when its deltas add up to this many times its base.
    """

    def __init__(self, operator_uid: str, key_groups: KeyGroupRange, max_parallelism: int,
                 *, incremental: bool = False, max_deltas: int = 10,
                 compaction_ratio: float = 1.0) -> None:
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
        self.incremental = incremental
        self.max_deltas = max_deltas
        self.compaction_ratio = compaction_ratio
        # incremental snapshots (.changelog): the keys the states changed since the last
        # capture ({key_group: keys}, filled by the state classes); the chain of the last
        # completed checkpoint; per capture since then the keys it saw change and the
        # checkpoint whose chain it extends (None: a new base); the chains written and not
        # yet confirmed (by the upload thread: under the lock)
        self._tracking = incremental
        self._dirty: dict[int, set] = {}
        self._confirmed: Chain | None = None
        self._changes: dict[int, dict[int, set]] = {}
        self._extends: dict[int, int | None] = {}
        self._written: dict[int, Chain] = {}
        self._written_lock = threading.Lock()
        self._force_base = False
        if incremental:
            self._live_captures.add(ALWAYS)

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
    def get_state(self, descriptor: StateDescriptor[S]) -> S:
        """The state ``descriptor`` declares (a protocol of :mod:`..interface`)."""
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
        cls = STATE_CLASSES[descriptor.kind]
        return cast(S, cls(self, descriptor, self.tables[descriptor.name]))

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
        dirty = None
        if self._tracking:  # the keys changed since the previous capture
            dirty = self._dirty.copy()
            self._dirty.clear()
        cap = HeapCapture(by_kg, dumps, meta, garbage, dirty)
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
            for kg, entries in self.tables.get(name, {}).items():
                for key, stored in list(entries.items()):
                    kept = ttl.purge(d.kind, stored, now, d.ttl_ms)
                    if kept is None:
                        del entries[key]
                    elif kept is not stored:
                        entries[key] = kept
                    else:
                        continue
                    if self._tracking:
                        self._dirty.setdefault(kg, set()).add(key)

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
        place after it was stored, or a custom serializer's output). ``states``: one key
        group's ``{state: {key: value}}``, or ``{key_group: that}``."""
        if all(isinstance(k, int) for k in states):  # {key_group: {state: entries}}
            for tables in states.values():
                err = self._unencodable(tables)
                if not isinstance(err, RuntimeError):
                    return err
        for name, entries in states.items():
            if not isinstance(entries, dict):
                continue
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
        self.restore_key_group_states(kg, states, state_meta)

    def restore_key_group_states(self, kg: int, states: dict[str, dict],
                                 state_meta: dict[str, dict]) -> None:
        """Add one key group's restored entries, ``{state: {key: value}}``."""
        if kg not in self.key_groups:
            return
        self._force_base = True  # the next checkpoint starts a chain of this job
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
        self._force_base = True  # a delta cannot say that a state is gone

    # -- the KeyedStateBackend protocol (state/backend.py) ------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        """Capture now (shallow copies, copy-on-write); serialize in ``write``: a full file
        in the snapshot directory, or (incremental, not a savepoint) a chain file under the
        job's ``shared/``."""
        cap = self.capture()
        if not self.incremental:
            if cap.empty:  # no state entries: no state file
                return StateSnapshot(cap.meta)

            def write_file(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
                return self._write_full(cap, chk_dir, stem)

            return StateSnapshot(cap.meta, write_file)
        if cap.empty:  # no state: no file, and the next checkpoint starts a new chain
            self._confirmed = None
            self._changes.clear()
            self._extends.clear()
            return StateSnapshot(cap.meta)
        # 1. the chain this checkpoint extends: the last completed one's, unless it is due
        # for compaction, or a checkpoint triggered since does not extend that chain (its
        # completion would subsume the last completed one and let the registry delete
        # files of that chain this one needs): then a new base
        base = self._confirmed
        since = -1 if base is None else base.checkpoint_id
        new_base = (base is None or self._force_base or base.deltas >= self.max_deltas
                    or base.delta_size >= self.compaction_ratio * base.base_size
                    or any(e != since for c, e in self._extends.items() if c > since))
        self._force_base = False
        # 2. remember the keys this capture saw change (later deltas include them until a
        # checkpoint that covers them completes) and what it extends
        self._changes[checkpoint_id] = cap.dirty or {}
        self._extends[checkpoint_id] = None if new_base else since
        changes = [] if new_base else [d for c, d in self._changes.items() if c > since]

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            if full:  # a savepoint: self-contained
                return self._write_full(cap, chk_dir, stem)
            chain = self._write_chain(checkpoint_id, cap, chk_dir, None if new_base else base,
                                      changes)
            with self._written_lock:
                self._written[checkpoint_id] = chain
            return chain.handle(self.key_groups), chain.size, chain.size - (
                0 if new_base or base is None else base.size)

        return StateSnapshot(cap.meta, write)

    def _write_full(self, cap: HeapCapture, chk_dir: str, stem: str) -> tuple[dict, int, int]:
        data, offsets, _meta = self.serialize_capture(cap)
        return write_state_file(chk_dir, stem, "state", data,
                                {"offsets": {str(kg): v for kg, v in offsets.items()}})

    def _write_chain(self, checkpoint_id: int, cap: HeapCapture, chk_dir: str,
                     base: Chain | None, changes: list[dict[int, set]]) -> Chain:
        """Asynchronous part of an incremental checkpoint: a new base (``base`` None), or a
        delta of the keys in ``changes`` (per capture since ``base``'s) on top of it."""
        if base is None:
            data, offsets, _meta = self.serialize_capture(cap)
            entry = write_shared(chk_dir, self.operator_uid, "base", data, offsets)
            return Chain(checkpoint_id, (entry,), len(data), 0)
        by_kg = cap.by_kg
        if by_kg is None:
            raise RuntimeError("this heap state capture was already serialized or released")
        try:
            try:
                chunks, offsets = encode_delta(by_kg, cap.dumps, changed_keys(changes))
            except UnsupportedValueError:
                raise self._unencodable(by_kg) from None
        finally:
            cap.release()
        if not chunks:  # nothing changed: the same files
            return Chain(checkpoint_id, base.files, base.base_size, base.delta_size)
        data = b"".join(chunks)
        entry = write_shared(chk_dir, self.operator_uid, "delta", data, offsets)
        return Chain(checkpoint_id, (*base.files, entry), base.base_size,
                     base.delta_size + len(data))

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        """Heap files and chains, or RocksDB checkpoints and savepoints (a job that switched
        from RocksDB), this subtask's key groups only (:mod:`.restore`)."""
        restore_heap_backend(self, directory, handles, states)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Incremental: the chain of checkpoint ``checkpoint_id`` is the base of the next
        deltas (its changes, and every earlier capture's, are in it)."""
        with self._written_lock:
            chain = self._written.pop(checkpoint_id, None)
            if chain is None:
                return  # not an incremental checkpoint of this backend (or a savepoint)
            for c in [c for c in self._written if c < checkpoint_id]:
                del self._written[c]  # subsumed: never extended
        self._confirmed = chain
        for log in (self._changes, self._extends):
            for c in [c for c in log if c <= checkpoint_id]:
                del log[c]

    def close(self) -> None:
        """Nothing to release (the state is garbage-collected with the backend)."""

    def state_size_entries(self) -> int:
        return sum(len(t) for tables in self.tables.values() for t in tables.values())
