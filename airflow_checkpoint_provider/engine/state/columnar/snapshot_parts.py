"""Snapshot files of columnar state written from cached parts (issue 55, the defaults table).

A columnar snapshot holds every row of the state (the file is self-contained: restore,
rescaling and savepoints read one file). Encoding and compressing every row at every
checkpoint was most of a checkpoint's CPU (60-190 ms per checkpoint on Nexmark q16 and q17
at 1 s checkpoints). Most rows do not change from one checkpoint to the next: the keys of
old auctions, the distinct values seen days ago. So a state is cut into **parts** (a range
of rows of an aggregate, a run of distinct pairs), each part's Arrow IPC record batch
message (zstd-compressed, as before, at level 1) is kept, and a snapshot encodes only the parts that
changed since the message was made; the others are copied as bytes. The CPU of a
checkpoint is then about the rows changed since the last one, plus writing the file from
its pieces (not joined first) and the SHA-256 of the pieces after the prefix it shares with
the last file (:class:`_PrefixDigest`).

File: an Arrow IPC *stream*: the schema message, one record batch message per part, the
end-of-stream marker. Files written before are IPC *files* (one or more batches);
:func:`read_table` reads both. A part is identified by the owner (a key of its choosing)
and a **version** that changes whenever one of its rows may have changed; a message is
reused only for the same key, version and schema.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import pyarrow as pa

from ... import settings

__all__ = ["PART_ROWS_ENV", "PART_SHIFT", "PartCache", "RowParts", "encode", "part_shift",
           "read_table"]

#: rows of a part of a table's snapshot (one record batch): 2**PART_SHIFT
PART_SHIFT = 15
#: the setting for another power of two of rows per part (tests: many parts from little data)
PART_ROWS_ENV = settings.COLUMNAR_PART_ROWS.name


def part_shift() -> int:
    """log2 of the rows of a snapshot part: :data:`PART_SHIFT` unless the
    ``COLUMNAR_PART_ROWS`` setting says otherwise, rounded down to a power of two."""
    return max(settings.COLUMNAR_PART_ROWS.get().bit_length() - 1, 0)

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_FILE_MAGIC = b"ARROW1"
#: zstd at level 1: the ratio of Arrow's default level (3) on this state, 30% less CPU
#: (a Nexmark q19 top_n part: 9.4 MB either way, 33 instead of 48 ms); any level reads alike
_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=1))


def read_table(data: bytes | memoryview) -> pa.Table:
    """A snapshot's table, from an IPC file (the format of earlier commits) or stream."""
    buf = pa.py_buffer(data)
    if bytes(data[:6]) == _FILE_MAGIC:
        return pa.ipc.open_file(buf).read_all()
    return pa.ipc.open_stream(buf).read_all()


def encode(table: pa.Table) -> tuple[bytes, bytes]:
    """``(schema message, record batch messages)`` of ``table`` as a compressed IPC stream.

    The table must have no dictionary-encoded column (a stream would carry its dictionary
    in a message of its own)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_OPTIONS) as writer:
        writer.write_table(table)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    schema = reader.read_next_message().serialize().to_pybytes()
    body = []
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        if message is None:
            break
        body.append(message.serialize().to_pybytes())
    return schema, b"".join(body)


class PartCache:
    """The encoded parts of the last snapshots of one state, ``{key: (version, message)}``
    for one schema; a snapshot with another schema starts over. Thread-safe: snapshots are
    captured on the task thread and written on upload threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._schema: pa.Schema | None = None
        self._schema_message = b""
        self._parts: dict[Hashable, tuple[Hashable, bytes]] = {}
        self._digest = _PrefixDigest()

    def __len__(self) -> int:
        return len(self._parts)

    def get(self, key: Hashable, version: Hashable, schema: pa.Schema) -> bytes | None:
        """The message of part ``key`` at ``version`` under ``schema``, if it was encoded."""
        with self._lock:
            if self._schema is None or not schema.equals(self._schema):
                return None
            hit = self._parts.get(key)
        return hit[1] if hit is not None and hit[0] == version else None

    def clear(self) -> None:
        with self._lock:
            self._parts.clear()

    def pieces(self, schema: pa.Schema,
               parts: Sequence[tuple[Hashable, Hashable, bytes | pa.Table]],
               keep: set | None = None) -> tuple[list[bytes], str]:
        """The IPC stream of ``parts`` in order: ``(key, version, message or table)``; a table
        is encoded (cast to ``schema``) and its message kept for later snapshots. Parts of
        keys neither in ``parts`` nor in ``keep`` are forgotten. Returns the stream's pieces
        (the schema message, a message per part, the end-of-stream marker) and its SHA-256,
        hashed on from the longest prefix of messages the last stream began with too
        (:class:`_PrefixDigest`)."""
        body: list[bytes] = []
        made: dict[Hashable, tuple[Hashable, bytes]] = {}
        schema_message = b""
        for key, version, part in parts:
            if isinstance(part, bytes):
                body.append(part)
                continue
            if part.num_rows == 0:
                continue
            schema_message, message = encode(part.cast(schema))
            made[key] = (version, message)
            body.append(message)
        with self._lock:
            if self._schema is None or not schema.equals(self._schema):
                self._schema, self._parts = schema, {}
                self._schema_message = schema_message or encode(schema.empty_table())[0]
            elif schema_message:
                self._schema_message = schema_message
            for key, entry in made.items():
                old = self._parts.get(key)
                if old is None or _newer(entry[0], old[0]):
                    self._parts[key] = entry
            wanted = {key for key, _, _ in parts} | (keep or set())
            for key in [k for k in self._parts if k not in wanted]:
                del self._parts[key]
            head = self._schema_message
        pieces = [head, *body]
        return [*pieces, _EOS], self._digest.of(pieces, _EOS)


class _PrefixDigest:
    """SHA-256 of a stream whose pieces mostly begin as the last one's did: the hash state
    after each piece of the last stream is kept, and a stream that begins with the same
    piece objects (messages copied from the cache, not encoded again) is hashed on from
    there. A snapshot then hashes its new messages, not the whole file (a count_distinct
    state puts its sealed runs of pairs first: :class:`.distinct_state.PairRuns`).
    Thread-safe: streams are written on upload threads, the last one written is kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pieces: list[bytes] = []
        self._states: list = []  # the hash after each of _pieces

    def of(self, pieces: list[bytes], tail: bytes) -> str:
        with self._lock:
            last, states = self._pieces, self._states
        same = 0
        for mine, theirs in zip(pieces, last, strict=False):
            if mine is not theirs:
                break
            same += 1
        states = states[:same]
        digest = states[-1].copy() if states else hashlib.sha256()
        for piece in pieces[same:]:
            digest.update(piece)
            states.append(digest.copy())
        with self._lock:
            self._pieces, self._states = pieces, states
        digest = digest.copy()
        digest.update(tail)
        return digest.hexdigest()


def _newer(a: Hashable, b: Hashable) -> bool:
    """Whether version ``a`` is at least as new as ``b`` (versions compare as tuples or
    numbers; an incomparable pair counts as newer)."""
    try:
        return bool(a >= b)  # type: ignore[operator]
    except TypeError:
        return True


class RowParts:
    """The parts of a table's rows (``2**shift`` rows each) and which of them changed: per
    part, whether a row changed since the last capture, and the capture that last saw one
    change (the part's version); :attr:`generation` changes when the rows are renumbered
    (every part is new). Used on the task thread only; :attr:`cache` on any."""

    def __init__(self) -> None:
        self.shift = part_shift()
        self.cache = PartCache()
        self.generation = 0
        self._dirty = np.zeros(0, dtype=bool)
        self._epoch = np.zeros(0, dtype=np.int64)
        self._captures = 0

    def touch(self, n: int, rows: np.ndarray) -> None:
        """Rows (of ``n``) whose key or values changed: their parts are encoded again."""
        count = (n + (1 << self.shift) - 1) >> self.shift
        if len(self._dirty) < count:
            grow = count - len(self._dirty)
            self._dirty = np.concatenate([self._dirty, np.ones(grow, dtype=bool)])
            self._epoch = np.concatenate([self._epoch, np.zeros(grow, dtype=np.int64)])
        if len(rows):
            self._dirty[rows >> self.shift] = True

    def renumbered(self, n: int) -> None:
        """The rows moved: every part of the next snapshot is encoded anew."""
        self.generation += 1
        self._dirty = np.zeros(0, dtype=bool)
        self._epoch = np.zeros(0, dtype=np.int64)
        self.touch(n, np.empty(0, dtype=np.int64))

    def capture(self, n: int, schema: pa.Schema,
                copy: Callable[[int, int], object]) -> list[tuple]:
        """Per part of the ``n`` rows: ``(key, version, message)`` when its message under
        ``schema`` is cached and none of its rows changed since, else ``(key, version,
        copy(lo, hi))``."""
        shift = self.shift
        self.touch(n, np.empty(0, dtype=np.int64))
        self._captures += 1
        count = (n + (1 << shift) - 1) >> shift
        epoch = self._epoch[:count]
        epoch[self._dirty[:count]] = self._captures
        self._dirty[:] = False
        parts: list[tuple] = []
        for s in range(count):
            lo, hi = s << shift, min(n, (s + 1) << shift)
            key, version = (self.generation, s), (int(epoch[s]), hi - lo)
            message = self.cache.get(key, version, schema)
            parts.append((key, version, message if message is not None else copy(lo, hi)))
        return parts
