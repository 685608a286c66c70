"""What every keyed state backend does for checkpoints, so the task never asks which one it has.

Three backends implement :class:`KeyedStateBackend`: the heap backend (Python dicts,
copy-on-write captures, one msgpack file per snapshot with per-key-group offsets), RocksDB
(native checkpoints, incremental SST upload) and the columnar tables of ``aggregate()``
(one Arrow IPC file). A snapshot has Flink's two parts: :meth:`~KeyedStateBackend.
snapshot_state` runs on the task thread between records and returns a
:class:`StateSnapshot`, whose :attr:`~StateSnapshot.write` runs later on an upload thread
and returns the keyed-state handle for ``_metadata``. :meth:`~KeyedStateBackend.
restore_state` reads the handles of a snapshot and keeps exactly the key groups this
subtask owns: that is how state is redistributed when the parallelism changes.

The heap and RocksDB backends also serve per-key state to user functions
(:class:`PerKeyStateBackend`). One contract test suite
(``tests/unit/engine/state/test_backend_contract.py``) runs against all three.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..fs.pieces import FileData
from ..fs.storage import byte_size, filesystem_for, join, sha256
from ..snapshot.handles import KeyedStateHandle
from .keygroups import KeyGroupRange

#: ``write(checkpoint_dir, file_stem, full) -> (handle, state_size, bytes_written)``
SnapshotWriter = Callable[[str, str, bool], tuple[dict, int, int]]


@dataclass
class StateSnapshot:
    """The synchronous part of a keyed-state snapshot.

    ``states``: the state descriptors' metadata for ``_metadata``. ``write``: the
    asynchronous part, or None when there is nothing to write (no state yet). Its ``full``
    argument asks RocksDB for a self-contained upload (savepoints); the other backends'
    files always are.
    """

    states: dict[str, dict]
    write: SnapshotWriter | None = None


@runtime_checkable
class KeyedStateBackend(Protocol):
    """Keyed state of one operator subtask, for the key groups in :attr:`key_groups`."""

    key_groups: KeyGroupRange

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot: ...

    def restore_state(self, directory: str, handles: Sequence[KeyedStateHandle],
                      states: dict[str, dict]) -> None: ...

    def notify_complete(self, checkpoint_id: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class PerKeyStateBackend(KeyedStateBackend, Protocol):
    """A backend that scopes value/list/map/reducing state to the current key."""

    #: state name -> meta of the states a restore brought (registered or not)
    restored_meta: dict[str, dict]
    current_key: object

    def set_current_key(self, key: object) -> None: ...

    def set_current_key_in_group(self, key: object, key_group: int) -> None: ...

    def get_state(self, descriptor: Any) -> Any: ...

    def keys(self, state_name: str) -> Iterator[object]: ...


def write_state_file(chk_dir: str, stem: str, suffix: str, data: FileData,
                     fields: dict, *, digest: str | None = None) -> tuple[dict, int, int]:
    """Write one state file of a snapshot (``data``: its bytes, or its pieces in order, not
    joined first); its handle carries its size and SHA-256 (``digest``, when the caller
    has it)."""
    name = f"{stem}-{uuid.uuid4().hex[:8]}.{suffix}"
    filesystem_for(chk_dir).write_bytes(join(chk_dir, name), data)
    size = byte_size(data)
    return {**fields, "path": name, "size": size, "sha256": digest or sha256(data)}, size, size
