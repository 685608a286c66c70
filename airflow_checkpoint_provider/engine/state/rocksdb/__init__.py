"""RocksDB keyed-state backend (through ``rocksdict``) with incremental checkpoints.

One RocksDB instance per operator subtask, in a task-local working directory. Keys are
``<key group: 2 bytes big-endian><state name>\\x00<msgpack(key)>``, so the state of a key
group range is one contiguous key range: rescaling copies exactly the owned ranges, and
``delete_range`` drops the rest. Values are in the typed encoding of :mod:`..typed_codec`
(a state's explicit serializer's output too), which reads the plain msgpack of earlier
versions. Entry map state (``ENTRY_MAP``) has one row per user key, ``<that key><user
key>`` (:func:`~..typed_codec.pack_key`: tuples stay msgpack arrays, as before): msgpack is
self-delimiting, so the rows of one key are exactly those that start with its key
(:func:`split_key`).

Snapshot (Flink's RocksDB incremental snapshot):

* synchronous part: flush the memtable and take a RocksDB native checkpoint (hard links,
  milliseconds) into the working directory;
* asynchronous part: upload the checkpoint's files. SST files are immutable: an SST that
  the last *completed* checkpoint already uploaded is referenced, not uploaded again; new
  SSTs go to ``<job>/shared/``; MANIFEST, CURRENT and OPTIONS are private to the
  checkpoint directory. Files uploaded for a checkpoint that did not complete are never
  reused (only :meth:`notify_complete` confirms uploads). Savepoints are always full and
  self-contained: every file goes into the savepoint directory.

Row cache (as Quix Streams keeps a transaction's writes in memory until it commits): the
rows of value, list, map and reducing state are read through a cache of encoded values and
written into it, not into RocksDB; the rows changed since the last write-out go to RocksDB
in one ``WriteBatch`` at the synchronous part of every snapshot (so each checkpoint holds
every change before its barrier), when the cache reaches :data:`CACHE_ENTRIES` rows (then
it is emptied), and before anything reads RocksDB directly (key iteration, TTL clean-up,
restore). A key updated many times between two checkpoints costs one RocksDB write, and a
key read again costs no RocksDB read. The cache holds bytes, as RocksDB does: a value read
is decoded anew every time, so mutating it without ``update()`` changes nothing stored.
Entry map rows bypass the cache (their reads scan RocksDB).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections import deque
from collections.abc import Callable
from typing import TypeVar, cast

import msgpack
from rocksdict import Checkpoint, Rdict, WriteBatch, WriteOptions

from ...fs.private import makedirs_private
from ...fs.storage import filesystem_for, join, parent, sha256
from ...serialization import packb
from ...snapshot.handles import RocksDBHandle
from ...typed_codec import pack_key, pack_value, unpack_value
from .. import ttl
from ..backend import StateSnapshot
from ..descriptors import ENTRY_MAP, StateDescriptor, check_compatible
from ..heap.restore import refuse_unconvertible, restore_key_group_chunks
from ..keygroups import KeyGroupRange, key_group_for
from .layout import LOCAL_DIR_ENV as LOCAL_DIR_ENV  # the key layout, files, local root
from .layout import _download, _kg_prefix, _options, local_root, split_key
from .states import ROCKS_STATES

S = TypeVar("S")

log = logging.getLogger(__name__)

SHARED_DIR = "shared"
#: rows the row cache holds before it is written out and emptied (bounds its memory: about
#: 100-200 bytes per row of a small value)
CACHE_ENTRIES = 262_144
_UNKNOWN = object()


def _open(path: str) -> Rdict:
    """The working database at ``path``, written without a write-ahead log (as Flink's
    RocksDB backend): it is never recovered from its own files, a restore starts from a
    snapshot taken after a flush, so the log would be written and never read."""
    db = Rdict(path, _options())
    no_wal = WriteOptions()
    no_wal.disable_wal = True  # type: ignore[method-assign,assignment]  # a property (stub: a method)
    db.set_write_options(no_wal)
    return db


def _key_packer() -> Callable[[object], bytes]:
    """``packb`` of :mod:`...serialization` (plain msgpack, bin type), as a packer of the
    backend's own, not a new one per call: a key is packed per record."""
    return msgpack.Packer(use_bin_type=True).pack


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key that starts with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


#: entries the incremental TTL clean-up looks at per checkpoint
TTL_CLEANUP_ENTRIES = 50_000

class RocksDBKeyedStateBackend:
    """Keyed state of one operator subtask in RocksDB (same interface as the heap backend)."""

    def __init__(self, operator_uid: str, key_groups: KeyGroupRange, max_parallelism: int, *,
                 incremental: bool = True, workdir: str | None = None) -> None:
        self.operator_uid = operator_uid
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.incremental = incremental
        self.workdir = workdir or os.path.join(
            local_root(), f"{operator_uid}-{key_groups.start}-{uuid.uuid4().hex[:8]}")
        makedirs_private(self.workdir)
        self.db_path = os.path.join(self.workdir, "db")
        self.db = _open(self.db_path)
        self.descriptors: dict[str, StateDescriptor] = {}
        self.restored_meta: dict[str, dict] = {}
        self.current_key: object = None
        self.current_key_group = -1
        self._key_bytes = b""
        self._pack_key = _key_packer()
        self._prefix = b""
        # shared SST handles confirmed by the last completed checkpoint: name -> file entry
        self.confirmed: dict[str, dict] = {}
        self._ttl_cursor = b""  # where the next incremental TTL clean-up starts
        self.uploaded: dict[int, dict[str, dict]] = {}
        # the row cache (module docstring): db key -> encoded value (None: no row), and the
        # rows changed since the last write-out (None: deleted)
        self._cache: dict[bytes, bytes | None] = {}
        self._dirty: dict[bytes, bytes | None] = {}

    # -- the row cache ------------------------------------------------------------------
    def _read(self, key: bytes) -> bytes | None:
        """The encoded value of row ``key`` (None: no such row), through the cache."""
        raw = self._cache.get(key, _UNKNOWN)
        if raw is _UNKNOWN:
            raw = self.db.get(key)
            if len(self._cache) >= CACHE_ENTRIES:
                self.write_out(empty=True)
            self._cache[key] = raw
        return raw  # type: ignore[return-value]

    def _write(self, key: bytes, raw: bytes | None) -> None:
        """Set (``raw`` None: delete) row ``key`` in the cache; RocksDB gets it at the next
        write-out."""
        cache = self._cache
        if len(cache) >= CACHE_ENTRIES and key not in cache:
            self.write_out(empty=True)
        cache[key] = raw
        self._dirty[key] = raw

    def write_out(self, *, empty: bool = False) -> None:
        """Write the rows changed in the cache to RocksDB (one batch); ``empty``: then
        forget every cached row (before RocksDB is changed directly, or at capacity)."""
        dirty = self._dirty
        if dirty:
            batch = WriteBatch(raw_mode=True)
            if None in dirty.values():  # deletions among them: row by row
                for k, v in dirty.items():
                    if v is None:
                        batch.delete(k)
                    else:
                        batch.put(k, v)
            else:  # puts only: one pass in C (half the CPU of the loop above per row)
                deque(map(batch.put, dirty.keys(), dirty.values()), maxlen=0)
            self.db.write(batch)
            self._dirty = {}
        if empty:
            self._cache = {}

    # -- key context --------------------------------------------------------------------
    def set_current_key(self, key: object) -> None:
        if isinstance(key, list):
            key = tuple(key)
        self.set_current_key_in_group(key, key_group_for(key, self.max_parallelism))

    def set_current_key_in_group(self, key: object, key_group: int) -> None:
        """:meth:`set_current_key` for a checked key whose key group the caller computed."""
        self.current_key = key
        self.current_key_group = key_group
        self._prefix = key_group.to_bytes(2, "big")  # layout._kg_prefix, inlined (per record)
        try:
            self._key_bytes = self._pack_key(key)
        except BaseException:
            self._pack_key = _key_packer()  # its buffer may hold part of the key
            raise

    def _db_key(self, name_bytes: bytes) -> bytes:
        return self._prefix + name_bytes + self._key_bytes

    # -- registration -------------------------------------------------------------------
    def get_state(self, descriptor: StateDescriptor[S]) -> S:
        """The state ``descriptor`` declares (a protocol of :mod:`..interface`)."""
        check_compatible(self.operator_uid, descriptor, self.descriptors.get(descriptor.name),
                         self.restored_meta.get(descriptor.name))
        if "\x00" in descriptor.name:
            raise ValueError(f"state name {descriptor.name!r} must not contain NUL")
        self.descriptors[descriptor.name] = descriptor
        return cast(S, ROCKS_STATES[descriptor.kind](self, descriptor))

    def keys(self, state_name: str):
        self.write_out()
        marker = state_name.encode() + b"\x00"
        last = None
        for raw in self.db.keys():
            k = cast(bytes, raw)  # raw mode: keys are bytes
            if k[2:2 + len(marker)] == marker:
                key, rest = split_key(k[2 + len(marker):])
                if rest and last is not None and last == (k[:2], key):
                    continue  # another entry of an entry map state's key
                last = (k[:2], key)
                yield key

    def drop_state(self, state_name: str) -> None:
        """Forget a state and delete its entries (every key group): later snapshots no
        longer carry it (an operator that moved a restored state's contents elsewhere)."""
        self.write_out(empty=True)
        marker = state_name.encode() + b"\x00"
        for kg in self.key_groups:
            prefix = _kg_prefix(kg) + marker
            end = _prefix_end(prefix)
            if end is not None:
                self.db.delete_range(prefix, end)
        self.descriptors.pop(state_name, None)
        self.restored_meta.pop(state_name, None)

    # -- snapshot -----------------------------------------------------------------------
    def snapshot_sync(self, checkpoint_id: int) -> str:
        """Write the cached changes out, flush and take a native checkpoint (hard links);
        returns its local directory."""
        self.write_out()
        self._purge_expired()
        self.db.flush()
        local = os.path.join(self.workdir, f"chk-{checkpoint_id}-{uuid.uuid4().hex[:6]}")
        Checkpoint(self.db).create_checkpoint(local)
        return local

    def _purge_expired(self) -> None:
        """Incremental TTL clean-up: look at up to :data:`TTL_CLEANUP_ENTRIES` entries per
        checkpoint, from where the previous one stopped (the whole DB every few
        checkpoints), and drop the values of TTL states that expired."""
        expiring = {d.name.encode() + b"\x00": (d, d.ttl_ms)
                    for d in self.descriptors.values() if d.ttl_ms}
        if not expiring:
            return
        self.write_out(empty=True)  # the clean-up changes RocksDB directly
        now, seen, batch = ttl.now_ms(), 0, WriteBatch(raw_mode=True)
        last: bytes | None = None
        for raw, v in self.db.items(from_key=self._ttl_cursor):
            last = k = cast(bytes, raw)  # raw mode: keys are bytes
            seen += 1
            for marker, (d, ttl_ms) in expiring.items():
                if k[2:2 + len(marker)] == marker:
                    stored = unpack_value(cast(bytes, v))
                    kept = ttl.purge(d.kind, stored, now, ttl_ms)
                    if kept is None:
                        batch.delete(k)
                    elif kept is not stored:
                        batch.put(k, pack_value(kept))
                    break
            if seen >= TTL_CLEANUP_ENTRIES:
                break
        self.db.write(batch)
        # wrap around once the end of the DB was reached
        self._ttl_cursor = last + b"\x00" if seen >= TTL_CLEANUP_ENTRIES and last else b""

    def snapshot_state(self, checkpoint_id: int) -> StateSnapshot:
        """A native checkpoint now; ``write`` uploads its files (new SSTs only, when
        incremental and not ``full``)."""
        local = self.snapshot_sync(checkpoint_id)

        def write(chk_dir: str, stem: str, full: bool) -> tuple[dict, int, int]:
            return self.upload(checkpoint_id, local, chk_dir, full=full)

        return StateSnapshot(self.state_meta(), write)

    def restore_state(self, directory: str, handles, states: dict[str, dict]) -> None:
        """RocksDB handles are downloaded (and cut to this subtask's key groups); heap
        snapshot files are loaded key group by key group (switching a job to RocksDB)."""
        if any(h.type == "rocksdb" for h in handles):
            self.restore(directory, list(handles), states)
        else:
            refuse_unconvertible(self.operator_uid, handles, states, "rocksdb")
            restore_key_group_chunks(self, directory, handles, states)

    def state_meta(self) -> dict[str, dict]:
        meta = dict(self.restored_meta)
        meta.update({n: d.meta for n, d in self.descriptors.items()})
        return meta

    def upload(self, checkpoint_id: int, local: str, target_dir: str, *, full: bool
               ) -> tuple[dict, int, int]:
        """Asynchronous part. Returns ``(handle, state_size, uploaded_bytes)``."""
        try:
            fs = filesystem_for(target_dir)
            files = []
            state_size = uploaded = 0
            used: dict[str, dict] = {}
            for name in sorted(os.listdir(local)):
                path = os.path.join(local, name)
                size = os.path.getsize(path)
                state_size += size
                is_sst = name.endswith(".sst")
                if is_sst and self.incremental and not full and name in self.confirmed:
                    entry = self.confirmed[name]             # reuse: confirmed by completion
                else:
                    with open(path, "rb") as f:
                        data = f.read()
                    if is_sst and self.incremental and not full:
                        key = f"{SHARED_DIR}/{self.operator_uid}-{uuid.uuid4().hex[:12]}-{name}"
                        fs.write_bytes(join(parent(target_dir), key), data)
                        entry = {"name": name, "shared": key, "size": size, "sha256": sha256(data)}
                    else:
                        fs.write_bytes(join(target_dir, f"{self.operator_uid}-{self.key_groups.start}-{name}"), data)
                        entry = {"name": name, "path": f"{self.operator_uid}-{self.key_groups.start}-{name}",
                                 "size": size, "sha256": sha256(data)}
                    uploaded += size
                if "shared" in entry:
                    used[name] = entry
                files.append(entry)
            if self.incremental and not full:
                self.uploaded[checkpoint_id] = used
            handle = {"type": "rocksdb", "files": files,
                      "key_group_range": self.key_groups.to_list()}
            return handle, state_size, uploaded
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def notify_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id in self.uploaded:
            self.confirmed = self.uploaded.pop(checkpoint_id)
        for old in [c for c in self.uploaded if c < checkpoint_id]:
            del self.uploaded[old]  # subsumed pending uploads: never reused

    # -- restore ------------------------------------------------------------------------
    def restore(self, directory: str, handles: list[RocksDBHandle | dict],
                state_meta: dict[str, dict]) -> None:
        """Download the handles' files and keep exactly this subtask's key groups."""
        self.write_out(empty=True)
        self.restored_meta.update(state_meta)
        mine = self.key_groups
        loaded = [h if isinstance(h, RocksDBHandle)
                  else RocksDBHandle.from_dict(h, location=directory) for h in handles]
        exact = [h for h in loaded if KeyGroupRange(*h.key_group_range) == mine]
        if len(loaded) == 1 and exact:
            self.db.close()
            shutil.rmtree(self.db_path, ignore_errors=True)
            _download(directory, loaded[0], self.db_path)
            self.db = _open(self.db_path)
            # Nothing restored is reused by the next checkpoint: it uploads in full (the
            # restored snapshot may belong to another job, and NO_CLAIM never shares files).
            return
        lo, hi = _kg_prefix(mine.start), _kg_prefix(mine.end + 1) if mine.end + 1 < 65536 else None
        for h in loaded:
            tmp = os.path.join(self.workdir, f"restore-{uuid.uuid4().hex[:8]}")
            _download(directory, h, tmp)
            src = Rdict(tmp, _options())
            try:
                batch = WriteBatch(raw_mode=True)
                n = 0
                for k, v in src.items(from_key=lo):
                    if hi is not None and cast(bytes, k) >= hi:
                        break
                    batch.put(k, v)
                    n += 1
                    if n % 10_000 == 0:
                        self.db.write(batch)
                        batch = WriteBatch(raw_mode=True)
                self.db.write(batch)
            finally:
                src.close()
                shutil.rmtree(tmp, ignore_errors=True)

    def restore_key_group_chunk(self, chunk: bytes, state_meta: dict[str, dict]) -> None:
        """Load one key group of a heap snapshot (switching a job from heap to RocksDB)."""
        from ..heap import decode_chunk

        kg, states = decode_chunk(chunk, self.operator_uid)
        self.restore_key_group_states(kg, states, state_meta)

    def restore_key_group_states(self, kg: int, states: dict[str, dict],
                                 state_meta: dict[str, dict]) -> None:
        """Load one key group's entries of a heap snapshot, ``{state: {key: value}}``."""
        if kg not in self.key_groups:
            return
        self.write_out(empty=True)
        batch = WriteBatch(raw_mode=True)
        for name, items in states.items():
            self.restored_meta.setdefault(name, state_meta[name])
            prefix = _kg_prefix(kg) + name.encode() + b"\x00"
            entries = state_meta[name].get("kind") == ENTRY_MAP
            for k, v in items.items():
                if entries:  # one row per entry
                    key = prefix + packb(k)
                    for uk, entry in v.items():
                        batch.put(key + pack_key(uk), pack_value(entry))
                else:
                    batch.put(prefix + packb(k), pack_value(v))
        self.db.write(batch)

    def close(self) -> None:
        self._cache, self._dirty = {}, {}  # a closed backend's changes go nowhere
        try:
            self.db.close()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
