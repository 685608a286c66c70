"""Restoring heap-format keyed state: full heap files and the chains of incremental heap
snapshots, into either backend (the heap backend, or RocksDB when a job switches backends),
key group by key group: a subtask reads only the key groups it owns (rescaling)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import RestoreError
from ...snapshot.codec import read_state_file
from ...snapshot.handles import HeapChangelogHandle, KeyedStateHandle, StateFileHandle
from .changelog import read_chain


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
        if not isinstance(handle, StateFileHandle):
            raise RestoreError(f"operator {backend.operator_uid!r}: the snapshot holds RocksDB "
                               "state; restore it with state_backend='rocksdb'")
        data = read_state_file(directory, handle)
        for kg, off, length in handle.offsets:
            if kg in backend.key_groups:
                backend.restore_key_group_chunk(data[off:off + length], states)
