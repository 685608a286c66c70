"""Checkpoint storage: where snapshot files and ``_metadata`` live.

Layout (see ARCHITECTURE.md)::

    <checkpoint-dir>/<job-name>/<job-id>/chk-<N>/_metadata   + exclusive state files
    <checkpoint-dir>/<job-name>/<job-id>/shared/             files shared across checkpoints

Locations are plain strings: a local path (or ``file://`` URI) or ``s3://bucket/prefix``
(:mod:`.s3`, through boto3). Build and take apart locations only with the functions here
(:func:`join`, :func:`parent`, :func:`basename`, :func:`absolute_location`): they use
``posixpath`` for URIs and never ``os.path.abspath`` one.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import uuid

from ..errors import CheckpointStorageError
from .pieces import FileData, pieces_of
from .private import makedirs_private, open_private
from .s3 import S3FileSystem, split_uri

METADATA_FILE = "_metadata"


class LocalFileSystem:
    """Checkpoint files on a local (or mounted) file system."""

    def write_bytes(self, path: str, data: FileData, *, atomic: bool = False) -> None:
        """Write ``data``: one buffer, or the file's pieces in order (not joined first)."""
        try:
            makedirs_private(os.path.dirname(path))  # 0700 dirs, 0600 files (issue 42)
            target = f"{path}.{uuid.uuid4().hex[:8]}.tmp" if atomic else path
            with open_private(target) as f:
                f.writelines(pieces_of(data))
                f.flush()
                os.fsync(f.fileno())
            if atomic:
                os.replace(target, path)
        except OSError as exc:
            raise CheckpointStorageError(f"cannot write checkpoint file {path}: {exc}") from exc

    def read_bytes(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError as exc:
            raise CheckpointStorageError(f"checkpoint file {path} does not exist") from exc
        except OSError as exc:
            raise CheckpointStorageError(f"cannot read checkpoint file {path}: {exc}") from exc

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def remove_file(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def list_files(self, path: str) -> list[str]:
        """Every file below ``path`` as paths relative to it."""
        out = []
        for root, _dirs, files in os.walk(path):
            for name in files:
                out.append(os.path.relpath(os.path.join(root, name), path))
        return sorted(out)


S3_SCHEME = "s3://"


def is_s3(location: str) -> bool:
    return location.startswith(S3_SCHEME)


def split_locations(value: str) -> list[str]:
    """``os.pathsep``-separated locations (``$CKPT_ALLOWED_SAVEPOINT_ROOTS``), where an
    ``s3://`` URL keeps its ``:`` (``/data/sp:s3://bucket/sp`` is two roots)."""
    if os.pathsep != ":":
        return [r for r in value.split(os.pathsep) if r]
    return [r for r in re.split(r":(?!//)", value) if r]


def filesystem_for(location: str) -> LocalFileSystem | S3FileSystem:
    """The file system holding ``location``: S3 for ``s3://``, local for paths and ``file://``."""
    if is_s3(location):
        return S3FileSystem()
    if "://" in location and not location.startswith("file://"):
        scheme = location.split("://", 1)[0]
        raise CheckpointStorageError(
            f"checkpoint location {location!r}: scheme {scheme!r} is not supported "
            "(use a local path or s3://bucket/prefix)"
        )
    return LocalFileSystem()


def strip_scheme(location: str) -> str:
    """``file:///a/b`` -> ``/a/b``; local paths and ``s3://`` URIs are returned unchanged."""
    return location[len("file://"):] if location.startswith("file://") else location


def _s3_normalize(uri: str) -> str:
    """``s3://b//a/./c/`` -> ``s3://b/a/c`` (no trailing slash, no empty segments)."""
    bucket, key = split_uri(uri)
    key = posixpath.normpath("/" + key).lstrip("/") if key else ""
    return f"{S3_SCHEME}{bucket}/{key}" if key else f"{S3_SCHEME}{bucket}"


def join(base: str, *parts: str) -> str:
    if is_s3(base):
        return _s3_normalize(posixpath.join(base, *parts))
    return os.path.join(strip_scheme(base), *parts)


def parent(location: str) -> str:
    """The directory holding ``location`` (``os.path.dirname`` for paths)."""
    if is_s3(location):
        bucket, key = split_uri(location)
        return _s3_normalize(f"{S3_SCHEME}{bucket}/{posixpath.dirname(key)}")
    return os.path.dirname(strip_scheme(location))


def basename(location: str) -> str:
    """The last component of ``location`` (``os.path.basename`` for paths)."""
    if is_s3(location):
        return posixpath.basename(split_uri(location)[1])
    return os.path.basename(strip_scheme(location))


def absolute_location(location: str) -> str:
    """An absolute, scheme-free local path, or a normalized ``s3://bucket/prefix`` URI.

    Use it wherever a user-given directory is stored or handed to other processes (checkpoint
    and savepoint roots): ``os.path.abspath`` would turn ``s3://b/p`` into ``<cwd>/s3:/b/p``.
    """
    if is_s3(location):
        return _s3_normalize(location)
    return os.path.abspath(strip_scheme(location))


def sha256(data: FileData) -> str:
    """The SHA-256 of ``data``: one buffer, or the pieces of a file in order."""
    digest = hashlib.sha256()
    for piece in pieces_of(data):
        digest.update(piece)
    return digest.hexdigest()


def byte_size(data: FileData) -> int:
    """Bytes of ``data``: one buffer, or the pieces of a file."""
    return sum(len(piece) for piece in pieces_of(data))


def job_directory(checkpoint_root: str, job_name: str, job_id: str) -> str:
    """``<root>/<job-name>/<job-id>``: the root made absolute (local) or normalized (S3)."""
    return join(absolute_location(checkpoint_root), job_name, job_id)


def checkpoint_directory(job_dir: str, checkpoint_id: int) -> str:
    return join(job_dir, f"chk-{checkpoint_id}")


def savepoint_directory(savepoint_root: str, job_id: str, checkpoint_id: int) -> str:
    """``<savepoint-root>/savepoint-<job-id>-<N>`` (local or S3); the full job id, so two
    jobs whose ids share a prefix never share a savepoint name."""
    return join(absolute_location(savepoint_root), f"savepoint-{job_id}-{checkpoint_id}")


def default_savepoint_root(checkpoint_root: str) -> str:
    """``<checkpoint-root>/savepoints``: where savepoints go without an explicit directory."""
    return join(absolute_location(checkpoint_root), "savepoints")


def canonical_location(location: str) -> str:
    """One spelling per snapshot directory, to compare locations: a local path made absolute
    with symlinks, ``.``/``..``, duplicate and trailing slashes resolved (``file://`` too),
    an S3 URI normalized (``s3://bucket/key``), a ``.../_metadata`` file taken as its
    directory."""
    loc = absolute_location(location)
    if basename(loc) == METADATA_FILE:
        loc = parent(loc)
    return loc if is_s3(loc) else os.path.realpath(loc)
