"""Read the keyed state of a RocksDB snapshot handle, entry by entry, without a backend.

One decoder for everyone who reads RocksDB snapshots outside a RocksDB backend: the state
processor (:mod:`...state_io.read`) and the heap backend restoring a RocksDB snapshot
(switching a job from ``state_backend="rocksdb"`` to ``"heap"``, :mod:`..heap.restore`).

The handle's files (private files and ``shared/`` SSTs of an incremental checkpoint, each
size- and SHA-256-verified) are copied into a private temporary directory and opened
read-only; the snapshot itself is never opened by RocksDB. Rows are decoded as the backend
wrote them (:mod:`.`): ``<key group: 2 bytes><state name>\\x00<msgpack key>`` and, for
entry map state, ``<msgpack user key>`` after it; the values in the typed encoding of
:mod:`...typed_codec`. An entry map state's rows (one per entry, contiguous per key) come
back as one ``{user key: value}`` dict per key, the form heap snapshot files hold.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

from rocksdict import AccessType, Rdict

from ...snapshot.handles import RocksDBHandle
from ...typed_codec import unpack_key, unpack_value
from ..keygroups import KeyGroupRange
from .layout import _download, _kg_prefix, _options, local_root, split_key

#: ``(key_group, state name, key, stored value)``
Entry = tuple[int, str, object, object]


def iter_rocksdb_entries(directory: str, handle: RocksDBHandle,
                         key_groups: KeyGroupRange | None = None) -> Iterator[Entry]:
    """``(key_group, state, key, stored value)`` of every row of ``handle`` (a RocksDB
    checkpoint or savepoint of one subtask, its paths relative to ``directory``), in key
    group order; ``key_groups``: only the rows of those key groups (a range seek, not a
    scan). A stored value is what heap files hold for the same state: with a TTL,
    ``[value, last write ms]`` (per element, per entry); with an explicit serializer, its
    output."""
    tmp = tempfile.mkdtemp(prefix="ckpt-rocksdb-read-", dir=local_root())
    try:
        db_path = os.path.join(tmp, "db")
        _download(directory, handle, db_path)
        db = Rdict(db_path, _options(), access_type=AccessType.read_only())
        try:
            yield from _decode(db, key_groups)
        finally:
            db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _decode(db: Rdict, key_groups: KeyGroupRange | None) -> Iterator[Entry]:
    if key_groups is None:
        rows = db.items()
        stop = None
    else:
        rows = db.items(from_key=_kg_prefix(key_groups.start))
        stop = _kg_prefix(key_groups.end + 1) if key_groups.end + 1 < 1 << 16 else None
    group: tuple | None = None  # the entry map state key being collected
    for k, v in rows:
        raw: bytes = k  # type: ignore[assignment]
        if stop is not None and raw >= stop:
            break
        name, _, rest = raw[2:].partition(b"\x00")
        key, user_key = split_key(rest)
        kg = int.from_bytes(raw[:2], "big")
        if group is not None and (not user_key or group[:3] != (kg, name, key)):
            yield group[0], group[1].decode(), group[2], group[3]
            group = None
        if not user_key:
            yield kg, name.decode(), key, unpack_value(v)  # type: ignore[arg-type]
            continue
        if group is None:
            group = (kg, name, key, {})
        group[3][unpack_key(user_key)] = unpack_value(v)  # type: ignore[arg-type]
    if group is not None:
        yield group[0], group[1].decode(), group[2], group[3]
