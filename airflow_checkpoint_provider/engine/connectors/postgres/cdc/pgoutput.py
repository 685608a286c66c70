"""PostgreSQL logical replication for the CDC source: the streaming replication protocol over
psycopg 3's libpq wrapper, and a decoder of the ``pgoutput`` plugin's messages.

psycopg 3 has no replication API (psycopg2's ``LogicalReplicationConnection`` has no
successor), and no maintained PyPI package decodes ``pgoutput`` without psycopg2
(``pypgoutput`` needs it). Both protocols are small and documented, so they are written
here: https://www.postgresql.org/docs/current/protocol-replication.html and
https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
(protocol version 1: no streamed in-progress transactions, values in text format).

The streaming protocol is used instead of the SQL functions
(``pg_logical_slot_peek_binary_changes``) because a peek always decodes from the slot's
confirmed position again: between two checkpoints every poll would re-read everything the
previous polls returned. A replication connection reads each change once, and the client
says separately (standby status update) up to where it is done: the source sends the LSN of
the last *completed checkpoint* there, never more.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, field

from ..errors import ReplicationError as ReplicationError  # defined here before issue 53

log = logging.getLogger(__name__)

#: microseconds between the Unix epoch and PostgreSQL's (2000-01-01)
PG_EPOCH_US = 946_684_800_000_000


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


# -- pgoutput messages ----------------------------------------------------------------------
@dataclass
class Column:
    name: str
    type_oid: int
    key: bool


@dataclass
class Relation:
    relid: int
    schema: str
    name: str
    replica_identity: str
    columns: list[Column]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass
class Change:
    """An Insert / Update / Delete: ``new`` and ``old`` are tuples of text values (``None``
    for NULL, :data:`UNCHANGED_TOAST` for a TOASTed value the update did not change);
    ``old_kind`` is ``"K"`` (key columns only), ``"O"`` (the whole old row) or ``None``."""

    kind: str
    relid: int
    new: list | None = None
    old: list | None = None
    old_kind: str | None = None


@dataclass
class Transaction:
    xid: int
    final_lsn: int
    commit_ts_us: int
    changes: list[Change] = field(default_factory=list)
    end_lsn: int = 0


UNCHANGED_TOAST = object()


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str):
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return out

    def byte(self) -> str:
        b = self.buf[self.pos:self.pos + 1].decode()
        self.pos += 1
        return b

    def cstring(self) -> str:
        end = self.buf.index(b"\0", self.pos)
        s = self.buf[self.pos:end].decode()
        self.pos = end + 1
        return s

    def tuple_data(self) -> list:
        (n,) = self.unpack(">h")
        out: list = []
        for _ in range(n):
            kind = self.byte()
            if kind == "n":
                out.append(None)
            elif kind == "u":
                out.append(UNCHANGED_TOAST)
            elif kind == "t":
                (length,) = self.unpack(">i")
                out.append(self.buf[self.pos:self.pos + length].decode())
                self.pos += length
            else:
                raise ReplicationError(f"pgoutput: tuple column kind {kind!r} is not supported")
        return out


def decode(message: bytes):
    """One pgoutput message -> ``(kind, payload)``: ``("B", Transaction)``,
    ``("C", end_lsn)``, ``("R", Relation)``, ``("I"|"U"|"D", Change)``,
    ``("T", [relids])``, ``("M", (transactional, prefix, content))``, or ``(kind, None)``
    for messages the source does not need (Origin, Type)."""
    r = _Reader(message)
    kind = r.byte()
    if kind == "B":
        final_lsn, ts, xid = r.unpack(">QqI")
        return kind, Transaction(xid=xid, final_lsn=final_lsn, commit_ts_us=ts)
    if kind == "C":
        _flags, _commit_lsn, end_lsn, _ts = r.unpack(">bQQq")
        return kind, end_lsn
    if kind == "R":
        (relid,) = r.unpack(">I")
        schema, name = r.cstring(), r.cstring()
        ident = r.byte()
        (n,) = r.unpack(">h")
        cols = []
        for _ in range(n):
            (flags,) = r.unpack(">b")
            cname = r.cstring()
            oid, _typmod = r.unpack(">Ii")
            cols.append(Column(cname, oid, bool(flags & 1)))
        return kind, Relation(relid, schema or "pg_catalog", name, ident, cols)
    if kind == "I":
        (relid,) = r.unpack(">I")
        r.byte()  # 'N'
        return kind, Change("I", relid, new=r.tuple_data())
    if kind == "U":
        (relid,) = r.unpack(">I")
        tag = r.byte()
        old = old_kind = None
        if tag in ("K", "O"):
            old_kind, old = tag, r.tuple_data()
            tag = r.byte()
        return kind, Change("U", relid, new=r.tuple_data(), old=old, old_kind=old_kind)
    if kind == "D":
        (relid,) = r.unpack(">I")
        tag = r.byte()
        return kind, Change("D", relid, old=r.tuple_data(), old_kind=tag)
    if kind == "T":
        n, _options = r.unpack(">ib")
        return kind, list(r.unpack(f">{n}I"))
    if kind == "M":
        (flags,) = r.unpack(">b")
        r.unpack(">Q")
        prefix = r.cstring()
        (length,) = r.unpack(">i")
        return kind, (bool(flags & 1), prefix, r.buf[r.pos:r.pos + length])
    return kind, None


# -- the replication connection ------------------------------------------------------------
class ReplicationStream:
    """``START_REPLICATION SLOT ... LOGICAL`` on a ``replication=database`` connection.

    :meth:`poll` returns the pgoutput messages that arrived (without blocking longer than
    ``timeout``); :meth:`send_feedback` reports the flushed LSN (what the slot may forget).
    """

    def __init__(self, conninfo: str, slot: str, publication: str, start_lsn: int,
                 flushed: int) -> None:
        from psycopg import pq

        self.pq = pq
        self.conn = pq.PGconn.connect(conninfo.encode())
        if self.conn.status != pq.ConnStatus.OK:
            raise ReplicationError(f"replication connection failed: "
                                   f"{(self.conn.error_message or b'').decode().strip()}")
        query = (f"START_REPLICATION SLOT {slot} LOGICAL {format_lsn(start_lsn)} "
                 f"(proto_version '1', publication_names '{publication}', messages 'true')")
        res = self.conn.exec_(query.encode())
        if res.status != pq.ExecStatus.COPY_BOTH:
            raise ReplicationError(f"START_REPLICATION on slot {slot!r} failed: "
                                   f"{(res.error_message or b'').decode().strip()}")
        self.conn.nonblocking = 1
        #: the walsender's process id (``pg_replication_slots.active_pid`` while it holds the slot)
        self.backend_pid = self.conn.backend_pid
        #: the server's WAL end, from the latest XLogData or keepalive
        self.server_wal_end = 0
        #: the WAL end of the latest keepalive: the server sent everything before it
        self.keepalive_end = 0
        self.flushed = flushed
        self._last_feedback = 0.0
        self._reply_requested = False
        self.send_feedback(flushed, reply=True)  # a keepalive back: the server's WAL end

    def poll(self, timeout: float, max_messages: int) -> list[tuple[int, bytes]]:
        """``(wal_start, pgoutput message)`` pairs, at most ``max_messages``."""
        import select

        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(out) < max_messages:
            n, data = self.conn.get_copy_data(1)
            if n == 0:
                if out or time.monotonic() >= deadline:
                    break
                select.select([self.conn.socket], [], [], max(0.0, deadline - time.monotonic()))
                self.conn.consume_input()
                continue
            if n == -1:
                res = self.conn.get_result()
                why = (res.error_message or b"").decode().strip() if res is not None else ""
                raise ReplicationError("the server ended the replication stream"
                                       + (f": {why}" if why else ""))
            if n < 0:
                raise ReplicationError(
                    f"replication stream failed: {(self.conn.error_message or b'').decode().strip()}")
            buf = bytes(data)
            if buf[:1] == b"w":
                start, wal_end, _clock = struct.unpack_from(">QQQ", buf, 1)
                self.server_wal_end = max(self.server_wal_end, wal_end)
                out.append((start, buf[25:]))
            elif buf[:1] == b"k":
                wal_end, _clock, reply = struct.unpack_from(">QQb", buf, 1)
                self.server_wal_end = max(self.server_wal_end, wal_end)
                self.keepalive_end = wal_end
                self._reply_requested = self._reply_requested or bool(reply)
        if self._reply_requested or time.monotonic() - self._last_feedback > 5.0:
            self.send_feedback(self.flushed)
        return out

    def send_feedback(self, flushed: int, *, reply: bool = False) -> None:
        """Standby status update: written/flushed/applied = ``flushed`` (``reply``: ask the
        server for a keepalive)."""
        self.flushed = flushed
        now_us = int(time.time() * 1_000_000) - PG_EPOCH_US
        msg = b"r" + struct.pack(">QQQqb", flushed, flushed, flushed, now_us, int(reply))
        if self.conn.put_copy_data(msg) != 1 or self.conn.flush() < 0:
            raise ReplicationError("could not send the standby status update: "
                                   f"{(self.conn.error_message or b'').decode().strip()}")
        self._last_feedback = time.monotonic()
        self._reply_requested = False

    def alive(self) -> bool:
        """Whether the connection still looks usable (reads what arrived, without waiting)."""
        try:
            self.conn.consume_input()
        except Exception:  # noqa: BLE001 - a broken connection is what this detects
            return False
        return self.conn.status == self.pq.ConnStatus.OK

    def close(self) -> None:
        try:
            self.conn.finish()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass
