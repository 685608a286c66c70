"""The snapshot file of ``top_n``, compressed once per unchanged payload chunk.

A ``top_n`` snapshot holds every kept row (O(state)); compressing them was most of its
CPU (q19: 0.88M rows, 57 MB after zstd, 0.5-1 CPU-s per checkpoint). The payload chunks
are immutable Arrow tables, and a chunk's kept rows, their ``_seq`` and ``_rank`` change
only while its keys still receive rows. So each chunk's part of the file (an Arrow IPC
record batch message, zstd-compressed) is kept from one snapshot to the next and reused
while the chunk, its kept rows and their ranks are the same: a snapshot compresses only
the chunks that changed. It still writes every kept row (the file is self-contained).

File: an Arrow IPC *stream* (schema message, one record batch message per chunk, end of
stream), columns as before (``key_group``, the input columns, ``_seq``, ``_rank``). The
files of earlier commits are IPC *files*; :func:`read_table` reads both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from .snapshot_parts import encode, read_table

__all__ = ["ChunkMessages", "read_table"]

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_messages = encode  # (schema message, record batch messages) of a compressed IPC stream


class ChunkMessages:
    """The record batch message of each payload chunk's part of the last snapshot (keyed by
    the chunk object, which is immutable), reused while its rows and ranks are the same.
    Snapshots may be written by several threads: one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: id(chunk) -> (chunk, local row ids, ranks, message)
        self._parts: dict[int, tuple[pa.Table, np.ndarray, np.ndarray, bytes]] = {}

    def stream(
        self,
        chunks: list[pa.Table],
        bounds: np.ndarray,
        ids: np.ndarray,
        seq: np.ndarray,
        rank: np.ndarray,
        part: Callable[[pa.Table, np.ndarray, np.ndarray, np.ndarray], pa.Table],
    ) -> bytes | None:
        """The snapshot of the kept payload rows ``ids`` (sorted) with their ``seq`` and
        ``rank``: ``part(chunk, local ids, seq, rank)`` gives a chunk's table (computed only
        for a chunk that changed). None when no row is kept or a column is dictionary
        encoded (a stream would carry a dictionary per chunk): the caller writes a file."""
        if any(pa.types.is_dictionary(f.type) for c in chunks[:1] for f in c.schema):
            return None
        cut = np.searchsorted(ids, bounds)
        schema: bytes | None = None
        body = []
        with self._lock:
            old, self._parts = self._parts, {}
            for c, chunk in enumerate(chunks):
                lo, hi = int(cut[c]), int(cut[c + 1])
                if lo == hi:
                    continue
                local, ranks = ids[lo:hi] - bounds[c], rank[lo:hi]
                hit = old.get(id(chunk))
                if (
                    hit is not None
                    and hit[0] is chunk
                    and np.array_equal(hit[1], local)
                    and np.array_equal(hit[2], ranks)
                ):
                    message = hit[3]
                else:
                    schema_message, message = _messages(part(chunk, local, seq[lo:hi], ranks))
                    schema = schema or schema_message
                self._parts[id(chunk)] = (chunk, local, ranks, message)
                body.append(message)
        if not body:
            return None
        if schema is None:  # every part reused: the schema message of any part
            first = next(iter(self._parts.values()))
            schema = _messages(part(first[0], first[1][:1], seq[:1], rank[:1]))[0]
        return schema + b"".join(body) + _EOS
