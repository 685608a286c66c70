"""Restoring keyed state into the heap backend, key group by key group: a subtask reads only
the key groups it owns (rescaling).

* heap-format snapshots (full heap files and the chains of incremental heap snapshots), into
  either backend (the heap backend, or RocksDB when a job switches backends);
* RocksDB snapshots (full savepoints, full or incremental checkpoints) into the heap backend
  when a job switches from ``state_backend="rocksdb"`` to ``"heap"``: the handle's files are
  read read-only by the RocksDB backend's reader (:mod:`..rocksdb.read`, the one the state
  processor uses), and each key group's entries load as a heap file's would.

Both backends store the same values per state (the TTL timestamps and an explicit
serializer's output included), except entry map state with an explicit serializer: RocksDB
serializes each entry, heap the whole map. Such a state is refused before anything is
loaded (:func:`backend_switch_problems`), never restored in part.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...errors import RestoreError
from ...snapshot.codec import read_state_file
from ...snapshot.handles import (
    HeapChangelogHandle,
    KeyedStateHandle,
    RocksDBHandle,
    StateFileHandle,
)
from ..descriptors import ENTRY_MAP
from .changelog import read_chain


def backend_switch_problems(states: dict[str, dict], handle_types: Iterable[str],
                            backend: str) -> list[tuple[str, str]]:
    """``(state name, reason)`` of each state of a snapshot (``states``: its state meta;
    ``handle_types``: the types of its keyed handles, ``"heap"``, ``"heap-changelog"``,
    ``"rocksdb"``) that a
    ``backend`` (``"heap"`` or ``"rocksdb"``) backend cannot restore because the snapshot was
    written by the other backend. Empty when nothing is switched or everything converts."""
    other = {"heap": "rocksdb", "rocksdb": "heap"}.get(backend)
    written = {"heap" if t.startswith("heap") else t for t in handle_types}  # heap-changelog
    if other is None or other not in written:
        return []
    return [(name, f"entry map state with serializer {meta.get('serializer')!r} is stored "
                   "per entry by the RocksDB backend and as one map by the heap backend, so it "
                   f"cannot move from a {other} snapshot to state_backend={backend!r}; restore "
                   f"with state_backend={other!r}, or declare the state with the default "
                   "msgpack serializer before taking the snapshot")
            for name, meta in sorted(states.items())
            if meta.get("kind") == ENTRY_MAP and meta.get("serializer", "msgpack") != "msgpack"]


def refuse_unconvertible(operator_uid: str, handles: Sequence[KeyedStateHandle],
                         states: dict[str, dict], backend: str) -> None:
    """Raise :class:`RestoreError` naming the operator and state if a backend switch would
    lose or garble a state (:func:`backend_switch_problems`); before anything is loaded."""
    problems = backend_switch_problems(states, (h.type for h in handles), backend)
    if problems:
        name, reason = problems[0]
        raise RestoreError(f"operator {operator_uid!r}: state {name!r}: {reason}")


def restore_key_group_chunks(backend: Any, directory: str, handles: Sequence[KeyedStateHandle],
                             states: dict[str, dict]) -> None:
    """Restore heap-format snapshots (msgpack per key group: full files, or the chain of an
    incremental snapshot) into ``backend``: only the key groups it owns are read from each
    file (``restore_key_group_chunk``, ``restore_key_group_states``)."""
    for handle in handles:
        if isinstance(handle, HeapChangelogHandle):  # incremental: base + deltas, in order
            for kg, tables in read_chain(directory, handle, backend.key_groups,
                                         backend.operator_uid).items():
                backend.restore_key_group_states(kg, tables, states)
            continue
        if not isinstance(handle, StateFileHandle) or handle.type != "heap":
            raise RestoreError(f"operator {backend.operator_uid!r}: the snapshot holds "
                               f"{handle.type} state, which this backend does not restore")
        data = read_state_file(directory, handle)
        for kg, off, length in handle.offsets:
            if kg in backend.key_groups:
                backend.restore_key_group_chunk(data[off:off + length], states)


def restore_heap_backend(backend: Any, directory: str, handles: Sequence[KeyedStateHandle],
                         states: dict[str, dict]) -> None:
    """Restore a heap backend from heap-format or RocksDB snapshots (a job that switched
    from RocksDB), only the key groups it owns. 1. Refuse a state that does not convert,
    before loading anything. 2. Load heap-format handles. 3. Load RocksDB handles, one key
    group at a time, as their reader yields them (in key group order)."""
    # 1. every state converts, or nothing is restored
    refuse_unconvertible(backend.operator_uid, handles, states, "heap")
    # 2. heap files and chains
    restore_key_group_chunks(backend, directory,
                             [h for h in handles if not isinstance(h, RocksDBHandle)], states)
    # 3. RocksDB checkpoints and savepoints: read-only copies of their files
    rocks = [h for h in handles if isinstance(h, RocksDBHandle)]
    if not rocks:
        return
    from ...extras import require

    require("rocksdb")
    from ..rocksdb.read import iter_rocksdb_entries

    tables: dict[str, dict]
    for handle in rocks:
        kg_now, tables = -1, {}
        for kg, name, key, value in iter_rocksdb_entries(directory, handle, backend.key_groups):
            if kg != kg_now:
                if tables:
                    backend.restore_key_group_states(kg_now, tables, states)
                kg_now, tables = kg, {}
            tables.setdefault(name, {})[key] = value
        if tables:
            backend.restore_key_group_states(kg_now, tables, states)
