"""Check that every state file of a snapshot exists and matches its size and SHA-256."""

from __future__ import annotations

from ..snapshot.codec import LoadedSnapshot, load_snapshot, read_verified


def verify_snapshot(snapshot: LoadedSnapshot) -> int:
    """Read every state file ``snapshot`` references and verify it; return how many.

    Raises :class:`~..errors.CorruptCheckpointError` naming the first missing, truncated or
    altered file (a storage outage is a :class:`~..errors.CheckpointStorageError`).
    """
    n = 0
    for _field, location, size, digest in snapshot.metadata.state_files(snapshot.directory):
        read_verified(location, size, digest)
        n += 1
    return n


def load_verified_snapshot(path: str) -> LoadedSnapshot:
    """:func:`load_snapshot` then :func:`verify_snapshot`."""
    snapshot = load_snapshot(path)
    verify_snapshot(snapshot)
    return snapshot
