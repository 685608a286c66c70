"""Incremental heap snapshots: a base file and the deltas written since, restored in order.

A full heap snapshot serializes every key of every key group at every checkpoint (issue 55:
26% of a per-record job with 100,000 keys and 1 s checkpoints). With ``incremental=True``
(:class:`~.backend.HeapKeyedStateBackend`) a checkpoint writes only what changed since the
last *completed* checkpoint, as Flink's changelog state backend and Quix Streams' changelog
topics do, and every so often a full **compaction** starts a new chain:

* **files**: all under the job's ``shared/`` (``shared/<uid>-<random>-base.heap`` or
  ``-delta.heap``), so that later checkpoints can reference them. A checkpoint's handle
  (:class:`~...snapshot.handles.HeapChangelogHandle`) lists its chain: the base, then each
  delta in order.
* **a delta** holds, per key group with changes, either the key group's whole table (the
  chunk of a full file: when at least half of its entries changed, cheaper than a patch) or
  a patch ``[key_group, puts, version, deletes]``: the changed keys' values and the removed
  keys. The changed keys are the keys the state classes wrote, removed or copied on write
  since the capture of the chain's last checkpoint (:mod:`.states`: one set per key group,
  about 0.1-0.2 us per state update), so a delta costs in proportion to the keys changed,
  not to the state.
* **compaction**: a checkpoint writes a new base when the chain has :attr:`max_deltas
  <.backend.HeapKeyedStateBackend.max_deltas>` deltas, or its deltas add up to
  ``compaction_ratio`` times the base, and always after a restore or when a state was
  dropped.
* **reference counting**: the coordinator registers every ``shared/`` file a completed
  checkpoint references in the shared-state registry (the same rows as RocksDB's
  incremental SSTs: ``created_by`` / ``last_used`` checkpoint) and deletes a file once no
  retained checkpoint uses it. A chain only ever extends the chain of a *completed*
  checkpoint, and a checkpoint is written in full while an earlier compaction is not yet
  confirmed, so no file a pending checkpoint references can be deleted by the completion of
  another one.
* **savepoints** are always full and self-contained (one heap state file in the savepoint
  directory, relocatable), whatever the mode; snapshots written before this mode (full heap
  files) restore as before, and a chain restores into either backend (rescaling reads the
  key groups a subtask owns; switching to RocksDB goes through a savepoint or a checkpoint).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import CorruptCheckpointError
from ...fs.storage import filesystem_for, join, parent, sha256
from ...snapshot.codec import read_verified
from ...snapshot.handles import HEAP_CHANGELOG, SHARED_PREFIX, HeapChangelogHandle
from ...typed_codec import FORMAT_VERSION, UnsupportedValueError, pack_value, unpack_value
from ..keygroups import KeyGroupRange
from .format import decode_chunk

#: a key group is written whole (not patched) when at least this share of it changed
REPLACE_SHARE = 0.5


@dataclass(frozen=True)
class Chain:
    """The files of an incremental heap snapshot (handle entries, the base first)."""

    checkpoint_id: int
    files: tuple[dict, ...]
    base_size: int
    delta_size: int

    @property
    def deltas(self) -> int:
        return len(self.files) - 1

    @property
    def size(self) -> int:
        return self.base_size + self.delta_size

    def handle(self, key_groups: KeyGroupRange) -> dict:
        return {"type": HEAP_CHANGELOG, "files": list(self.files),
                "key_group_range": key_groups.to_list()}


def changed_keys(changes: list[dict[int, set]]) -> dict[int, set]:
    """The union of the captures' changed keys, ``{key_group: keys}``."""
    if len(changes) == 1:
        return changes[0]
    out: dict[int, set] = {}
    for d in changes:
        for kg, keys in d.items():
            out[kg] = out[kg] | keys if kg in out else keys
    return out


def encode_delta(by_kg: dict[int, dict[str, dict]], dumps: dict, changed: dict[int, set]
                 ) -> tuple[list[bytes], dict[int, list[int]]]:
    """The chunks of a delta file: per key group with changed keys, its whole table (when
    the changed keys are at least half of its entries) or a patch of their values and
    removals; ``(chunks, {key_group: [offset, length]})``. A changed key absent from a state
    is written as removed from it. Raises :class:`UnsupportedValueError`."""
    chunks: list[bytes] = []
    offsets: dict[int, list[int]] = {}
    pos = 0
    for kg in sorted(changed):
        keys = changed[kg]
        if not keys:
            continue
        tables = by_kg.get(kg, {})
        names = set(tables) | set(dumps)
        if len(keys) * max(len(names), 1) >= REPLACE_SHARE * sum(len(t) for t in tables.values()):
            states = {name: _dumped(entries, dumps.get(name)) for name, entries in tables.items()}
            chunk = pack_value([kg, states, FORMAT_VERSION])
        else:
            puts: dict[str, dict] = {}
            deletes: dict[str, list] = {}
            for name in names:
                entries = tables.get(name, {})
                present = {k: entries[k] for k in keys if k in entries}
                if present:
                    puts[name] = _dumped(present, dumps.get(name))
                if len(present) < len(keys):
                    deletes[name] = [k for k in keys if k not in entries]
            chunk = pack_value([kg, puts, FORMAT_VERSION, deletes])
        offsets[kg] = [pos, len(chunk)]
        chunks.append(chunk)
        pos += len(chunk)
    return chunks, offsets


def _dumped(entries: dict, dump) -> dict:
    return entries if dump is None else {k: dump(v) for k, v in entries.items()}


def write_shared(chk_dir: str, operator_uid: str, kind: str, data: bytes,
                 offsets: dict[int, list[int]]) -> dict:
    """Write one chain file under the job's ``shared/``; its handle entry."""
    key = f"{SHARED_PREFIX}{operator_uid}-{uuid.uuid4().hex[:12]}-{kind}.heap"
    filesystem_for(chk_dir).write_bytes(join(parent(chk_dir), key), data)
    return {"shared": key, "size": len(data), "sha256": sha256(data),
            "offsets": {str(kg): v for kg, v in offsets.items()}}


def decode_changelog_chunk(chunk: bytes | memoryview, operator_uid: str
                           ) -> tuple[int, dict[str, dict], dict[str, list] | None]:
    """``(key_group, states, deletes)``: ``deletes`` is None for a chunk that replaces the
    key group, the removed keys per state for a patch."""
    decoded = None
    try:
        decoded = unpack_value(chunk)
    except (ValueError, TypeError):
        pass  # decode_chunk raises the error that names the operator
    if (isinstance(decoded, list) and len(decoded) == 4 and decoded[2] == FORMAT_VERSION
            and isinstance(decoded[1], dict) and isinstance(decoded[3], dict)):
        return decoded[0], decoded[1], decoded[3]
    kg, states = decode_chunk(chunk, operator_uid)
    return kg, states, None


def read_chain(directory: str, handle: HeapChangelogHandle, key_groups: Iterable[int] | None,
               operator_uid: str) -> dict[int, dict[str, dict]]:
    """The state of an incremental heap snapshot, ``{key_group: {state: {key: value}}}``, for
    the key groups in ``key_groups`` (all with None): the base, then each delta applied in
    order. Every file's size and SHA-256 is verified."""
    wanted = None if key_groups is None else set(key_groups)
    merged: dict[int, dict[str, dict]] = {}
    for f in handle.files:
        data = read_verified(f.location_in(directory), f.size, f.sha256)
        for kg, off, length in f.offsets:
            if wanted is not None and kg not in wanted:
                continue
            chunk_kg, states, deletes = decode_changelog_chunk(data[off:off + length],
                                                               operator_uid)
            if chunk_kg != kg:
                raise CorruptCheckpointError(
                    f"operator {operator_uid!r}: heap changelog file {f.shared} has no key "
                    f"group {kg} chunk at offset {off}")
            if deletes is None:
                merged[kg] = states
                continue
            tables = merged.setdefault(kg, {})
            for name, puts in states.items():
                tables.setdefault(name, {}).update(puts)
            for name, keys in deletes.items():
                table = tables.get(name)
                if table is not None:
                    for k in keys:
                        table.pop(k, None)
                    if not table:
                        del tables[name]
    return {kg: tables for kg, tables in merged.items() if tables}


def full_file(directory: str, handle: HeapChangelogHandle, operator_uid: str
              ) -> tuple[bytes, dict[int, list[int]]]:
    """The chain of ``handle`` as one full heap state file (self-contained: for a savepoint
    written from a checkpoint); ``(data, {key_group: [offset, length]})``."""
    merged = read_chain(directory, handle, None, operator_uid)
    chunks, offsets, pos = [], {}, 0
    for kg in sorted(merged):
        chunk = pack_value([kg, merged[kg], FORMAT_VERSION])
        offsets[kg] = [pos, len(chunk)]
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks), offsets


__all__ = ["Chain", "UnsupportedValueError", "changed_keys", "decode_changelog_chunk",
           "encode_delta", "full_file", "read_chain", "write_shared"]
