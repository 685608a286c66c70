"""The exceptions of the file connectors (:mod:`.sink`, :mod:`.source`)."""

from __future__ import annotations

from ...errors import ConfigurationError, DeterministicError


class MalformedFileError(DeterministicError):
    """A file of a :class:`FileSource` holds something that is not a record of its format."""


class FileSinkRestoreError(ConfigurationError, DeterministicError):
    """A transaction restored from a snapshot (pre-committed by the job that took it) is
    neither staged nor committed in this sink's directory or in the directory it was staged
    for (moved away, removed, or not recorded by an older snapshot while the sink moved).
    It names where the records are or were and what to do. Raised before the job starts
    (:meth:`FileSink.check_restored_transactions`) when the transaction records its
    directory, else by the sink subtask that recovers it.

    Not a :class:`~...errors.RestoreError`: ``restore="latest"`` must not skip the checkpoint
    and fall back to an older one (the sink cannot remove what the old job committed in
    another directory: it would be written twice). A :class:`~...errors.DeterministicError`:
    a task that meets it fails the job at once (restarting cannot bring the file back)."""
