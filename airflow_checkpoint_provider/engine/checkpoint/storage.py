"""Checkpoint storage: where snapshot files and ``_metadata`` live.

Layout (see ARCHITECTURE.md)::

    <checkpoint-dir>/<job-name>/<job-id>/chk-<N>/_metadata   + exclusive state files
    <checkpoint-dir>/<job-name>/<job-id>/shared/             files shared across checkpoints

Locations are plain strings: a local path today; ``s3://bucket/prefix`` plugs in here
through :func:`filesystem_for`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid

from ..errors import CheckpointStorageError

METADATA_FILE = "_metadata"


class LocalFileSystem:
    """Checkpoint files on a local (or mounted) file system."""

    def write_bytes(self, path: str, data: bytes, *, atomic: bool = False) -> None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            target = f"{path}.{uuid.uuid4().hex[:8]}.tmp" if atomic else path
            with open(target, "wb") as f:
                f.write(data)
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


def filesystem_for(location: str) -> LocalFileSystem:
    if "://" in location and not location.startswith("file://"):
        scheme = location.split("://", 1)[0]
        raise CheckpointStorageError(
            f"checkpoint location {location!r}: scheme {scheme!r} is not supported yet "
            "(use a local path)"
        )
    return LocalFileSystem()


def strip_scheme(location: str) -> str:
    return location[len("file://"):] if location.startswith("file://") else location


def join(base: str, *parts: str) -> str:
    return os.path.join(strip_scheme(base), *parts)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def job_directory(checkpoint_root: str, job_name: str, job_id: str) -> str:
    return join(os.path.abspath(strip_scheme(checkpoint_root)), job_name, job_id)


def checkpoint_directory(job_dir: str, checkpoint_id: int) -> str:
    return join(job_dir, f"chk-{checkpoint_id}")
