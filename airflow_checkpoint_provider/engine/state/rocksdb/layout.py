"""Where a RocksDB backend's rows and files are, shared by the backend (:mod:`.`) and the
reader of RocksDB snapshots (:mod:`.read`, which the heap backend and the state processor
use): the key layout ``<key group: 2 bytes big-endian><state name>\\x00<msgpack(key)>``
(entry map state: ``<msgpack(user key)>`` after it), the options a database is opened with,
the private local root of working directories, and the download of a snapshot handle's
files. Imports nothing of the backend, so the heap backend may read RocksDB snapshots."""

from __future__ import annotations

import os

import msgpack
from rocksdict import Options

from ...fs.private import makedirs_private, private_dir, user_temp_dir
from ...settings import LOCAL_DIR
from ...snapshot.codec import read_verified
from ...snapshot.handles import RocksDBHandle
from .states import _untuple

LOCAL_DIR_ENV = LOCAL_DIR.name


def local_root() -> str:
    """Where RocksDB working directories live: ``$CKPT_LOCAL_DIR`` (created ``0700``; it must
    belong to this user and be writable by nobody else), else ``ckpt-rocksdb`` in this user's
    private temp base (:func:`~..private.user_temp_dir`: ``$CKPT_TEMP_DIR`` or
    ``$TMPDIR/airflow-checkpoint-<uid>``, a name other local users cannot pre-empt). The state
    of a job is as private as its checkpoints."""
    configured = LOCAL_DIR.get()
    if configured:
        return private_dir(makedirs_private(configured), f"RocksDB directory ${LOCAL_DIR_ENV}")
    return user_temp_dir("ckpt-rocksdb")


def _kg_prefix(kg: int) -> bytes:
    return kg.to_bytes(2, "big")


def split_key(raw: bytes) -> tuple[object, bytes]:
    """``(key, rest)`` of the bytes after ``<state name>\\x00``: the key's msgpack and what
    follows it (an entry map state's msgpack user key; empty for the other kinds). One
    ``unpackb`` per row (a restore decodes every row): only entry map rows, whose key is
    followed by more bytes, take the ``ExtraData`` path."""
    try:
        return _untuple(msgpack.unpackb(raw, raw=False, strict_map_key=False)), b""
    except msgpack.ExtraData as extra:
        return _untuple(extra.unpacked), extra.extra


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    return opts


def _download(directory: str, handle: RocksDBHandle, target: str) -> None:
    # every name and path of the handle was validated by RocksDBHandle.from_dict: bare
    # names (or shared/<name>), so nothing is read or written outside its directory
    makedirs_private(target)
    for entry in handle.files:
        data = read_verified(entry.location_in(directory), entry.size, entry.sha256)
        with open(os.path.join(target, entry.name), "wb") as f:
            f.write(data)
