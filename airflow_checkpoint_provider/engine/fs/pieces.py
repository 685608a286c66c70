"""A file's contents as one buffer or as its pieces in order (written and hashed without
joining them first: a columnar snapshot of cached messages, :mod:`..state.columnar.snapshot_parts`)."""

from __future__ import annotations

from collections.abc import Sequence

#: one buffer, or the pieces of a file in order
FileData = bytes | bytearray | memoryview | Sequence[bytes]


def pieces_of(data: FileData) -> Sequence[bytes | bytearray | memoryview]:
    """``data`` as a sequence of pieces (one buffer: itself alone)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return (data,)
    return data
