"""The change stream split of :class:`~.source.PostgresCdcSource` (see that module for
the design): a replication connection on the job's slot, pgoutput decoded into changelog
records, filtered against the snapshot parts, acknowledged on checkpoint completion."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ....errors import RestoreError
from ...base import SourceContext, SplitReader
from ..errors import CdcError, ReplicationError
from .pgoutput import (
    PG_EPOCH_US,
    UNCHANGED_TOAST,
    Change,
    Relation,
    ReplicationStream,
    Transaction,
    decode,
    format_lsn,
)
from .rows import (
    MESSAGE_PREFIX,
    RESERVED_COLUMNS,
    TableInfo,
    bucket_of,
    convert,
    parse_snapshot,
    visible,
)
from .slots import check_slot_position, slot_state
from .takeover import application_name, release_stale_holder

log = logging.getLogger(__name__)


#: consecutive failed (re)connects or polls before the reader gives up (the job restarts)
MAX_RETRIES = 8


class StreamReader(SplitReader):
    """Position: ``{"lsn": end LSN of the last emitted transaction, "parts": {split: parts}
    or None while the snapshot splits have not all announced, "commit_ts": µs, "slot": the
    slot it was read from, "splits"/"buckets": the snapshot plan}``.

    A fenced reader (``ctx.fenced``: a blue-green validation run) never acknowledges: the
    slot stays where the job found it."""

    def __init__(self, src: Any, position: dict | None, ctx: SourceContext,
                 where: str) -> None:
        self.src, self.ctx, self.where = src, ctx, where
        self.admin = src.connect()
        self.tables, self.slot, self.publication = src.prepare(
            self.admin, ctx, legacy=bool(position) and "slot" not in (position or {}))
        #: captured tables by OID (a rename keeps it; a recreated table has another)
        self.by_oid = {info.oid: info for info in self.tables.values()}
        self.fenced = ctx.fenced
        self.failures = 0
        confirmed = src.confirmed_lsn(self.admin, self.slot)
        try:
            self.lsn = int(position["lsn"]) if position else confirmed
            parts = position.get("parts") if position else None
            self.commit_ts = int(position.get("commit_ts") or 0) if position else 0
            self.parts = None if parts is None else {int(k): v for k, v in parts.items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RestoreError(f"{where}: restored position {position!r:.200} is malformed") from exc
        if self.lsn < confirmed:
            raise RestoreError(
                f"{where}: the restored position {format_lsn(self.lsn)} is older than slot "
                f"{self.slot!r}'s confirmed position {format_lsn(confirmed)}: a newer checkpoint "
                "acknowledged the changes in between and the slot no longer has them. Restore the "
                "latest checkpoint, or drop the slot (ckpt cdc drop-slot) and start without "
                "restoring (a new snapshot)")
        if not src.snapshot:
            self.parts = {}
        # what the slot may forget: a fenced run acknowledges nothing (the slot's own)
        self.acked = confirmed if self.fenced else self.lsn
        self.stream: ReplicationStream | None = None
        self.relations: dict[int, Relation] = {}
        self.txn: Transaction | None = None
        self.announced: dict[int, list] = {}
        self._snapshots: dict[str, tuple] = {}
        self.caught_up = False
        log.info("%s: streaming slot %s from %s%s", where, self.slot, format_lsn(self.lsn),
                 "" if self.parts is not None else " once the snapshot splits are done")

    # -- the replication connection -------------------------------------------------------
    def _connect(self) -> ReplicationStream:
        self.relations.clear()
        self.txn = None
        conninfo = self.src.conninfo(replication=True, application_name=application_name(
            self.ctx.job_id, self.ctx.attempt))
        try:
            stream = ReplicationStream(conninfo, self.slot, self.publication, self.lsn,
                                       self.acked)
        except ReplicationError as exc:
            # held by the walsender of a superseded run (its client died without closing
            # the connection): end it and connect at once, instead of retrying until the
            # server's wal_sender_timeout; another reader fails the job (SlotHeldError)
            if "is active for PID" not in str(exc) or release_stale_holder(
                    self._admin(), self.slot, job_id=self.ctx.job_id, attempt=self.ctx.attempt,
                    where=self.where) is None:
                raise
            stream = ReplicationStream(conninfo, self.slot, self.publication, self.lsn,
                                       self.acked)
        try:  # on every (re)connect: the server must not start past our position
            check_slot_position(self._admin(), self.slot, self.lsn, stream.backend_pid,
                                self.where)
        except BaseException:
            stream.close()
            raise
        return stream

    def _admin(self):
        """The normal connection (opened again if it broke, e.g. a server restart)."""
        if self.admin.closed or self.admin.broken:
            self.admin = self.src.connect()
        return self.admin

    def _unrecoverable(self, error: str) -> str | None:
        """Why the stream cannot continue, if the server says so: the slot or the
        publication is gone. ``None`` when it cannot tell (the server is unreachable)."""
        import psycopg

        try:
            conn = self._admin()
            if slot_state(conn, self.slot) is None:
                return (f"replication slot {self.slot!r} was dropped while the job ran: the "
                        "changes since the last checkpoint are gone")
            if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                            (self.publication,)).fetchone() is None:
                return f"publication {self.publication!r} was dropped while the job ran"
            if f'publication "{self.publication}" does not exist' in error:
                return (f"publication {self.publication!r} was created after the slot's "
                        "position (pgoutput reads publications as of each change): use the "
                        "publication the slot was read with (publication=)")
        except psycopg.Error:
            return None
        return None

    def _stream_failed(self, exc: ReplicationError) -> None:
        """Fail at once when the slot or publication is gone; else reconnect later, at most
        :data:`MAX_RETRIES` times in a row (then the job restarts)."""
        if self.stream is not None:
            self.stream.close()
        self.stream = None
        fatal = self._unrecoverable(str(exc))
        if fatal is not None:
            raise CdcError(f"{self.where}: {fatal} ({exc}). Drop the slot and the "
                           "publication (ckpt cdc drop-slot) and start the job without "
                           "restoring to take a new snapshot") from exc
        self.failures += 1
        if self.failures > MAX_RETRIES:
            raise ReplicationError(f"{self.where}: the replication stream of slot "
                                   f"{self.slot!r} failed {self.failures} times in a row; "
                                   f"last: {exc}") from exc
        log.warning("%s: %s; reconnecting at %s (attempt %d of %d)", self.where, exc,
                    format_lsn(self.lsn), self.failures, MAX_RETRIES)
        # e.g. the slot is still held by a killed attempt's connection
        time.sleep(min(5.0, 0.25 * 2 ** self.failures))

    def read_batch(self, max_records: int) -> list[dict] | None:
        try:
            if self.stream is None:
                self.stream = self._connect()
            messages = self.stream.poll(0.05, max(64, max_records))
        except ReplicationError as exc:  # e.g. wal_sender_timeout while backpressured
            self._stream_failed(exc)
            return []
        self.failures = 0
        if self.parts is None:
            self._wait_for_snapshot(messages)
            return []
        out: list[dict] = []
        for _start, message in messages:
            kind, payload = decode(message)
            if kind == "B":
                self.txn = payload
            elif kind in ("I", "U", "D"):
                if self.txn is not None:
                    self.txn.changes.append(payload)
            elif kind == "C":
                if self.txn is not None:
                    out.extend(self._emit(self.txn))
                    self.commit_ts = self.txn.commit_ts_us
                    self.txn = None
                self.lsn = max(self.lsn, payload)
            elif kind == "R":
                self._relation(payload)
            elif kind == "T":
                names = [self.by_oid[r].name for r in payload if r in self.by_oid]
                if not names:
                    continue  # a table of the publication this job does not capture
                raise CdcError(f"{self.where}: TRUNCATE of captured table(s) "
                               f"{', '.join(names)}; the CDC source does not turn a TRUNCATE "
                               "into deletes. Recover: stop the job, drop its slot and empty its "
                               "upsert targets (postgres_cdc_recovery.recover_after_truncate), "
                               "then start it without restoring (a new snapshot)")
        self.caught_up = not messages and self.txn is None
        return out

    def _wait_for_snapshot(self, messages) -> None:
        """Before streaming: collect this attempt's announcements of the snapshot splits;
        with all of them, read the slot again from the start with the parts known."""
        for _start, message in messages:
            kind, payload = decode(message)
            if kind != "M" or payload[1] != MESSAGE_PREFIX:
                continue
            body = json.loads(payload[2])
            if (body.get("slot") == self.slot and body.get("job") == self.ctx.job_id
                    and body.get("attempt") == self.ctx.attempt):
                self.announced[int(body["split"])] = body["parts"]
        if len(self.announced) == self.src.snapshot_splits:
            self.parts = dict(self.announced)
            log.info("%s: every snapshot split is done; streaming changes from %s", self.where,
                     format_lsn(self.lsn))
            assert self.stream is not None
            self.stream.close()
            self.stream = None

    def _relation(self, rel: Relation) -> None:
        """A Relation message (the table's name and columns as of the changes after it):
        captured tables are tracked by OID. Columns added, dropped or retyped are followed
        (records carry the relation's columns); a rename or move, a recreated table, a
        changed primary key fail the job naming the table and the change."""
        info = self.by_oid.get(rel.relid)
        how = ("drop the slot (ckpt cdc drop-slot) and start the job without restoring to take "
               "a new snapshot")
        if info is None:
            if rel.qualified in self.tables:
                raise CdcError(
                    f"{self.where}: table {rel.qualified!r} was replaced while captured (OID "
                    f"{self.tables[rel.qualified].oid} at start, now {rel.relid}: dropped and "
                    f"created again, or swapped for a copy); {how}")
            self.relations[rel.relid] = rel  # not captured (another table of the publication)
            return
        if rel.qualified != info.name:
            raise CdcError(
                f"{self.where}: table {info.name!r} was renamed or moved to {rel.qualified!r} "
                f"while captured (OID {rel.relid}); change tables= to the new name, then {how}")
        names = [c.name for c in rel.columns]
        missing = [k for k in info.key if k not in names]
        keys = [c.name for c in rel.columns if c.key]
        if missing or (keys and rel.replica_identity == "d" and sorted(keys) != sorted(info.key)):
            raise CdcError(
                f"{self.where}: the primary key of table {info.name!r} changed while captured "
                f"({info.key} at start, now {keys or 'without ' + ', '.join(missing)}); {how}")
        if rel.replica_identity == "n" or (rel.replica_identity == "i" and not set(info.key)
                                           <= set(keys)):
            raise CdcError(
                f"{self.where}: table {info.name!r} now has REPLICA IDENTITY "
                f"{'NOTHING' if rel.replica_identity == 'n' else 'USING INDEX without the primary key'}"
                f": its updates and deletes do not carry the key; ALTER TABLE {info.name} "
                f"REPLICA IDENTITY DEFAULT (or FULL), then {how}")
        reserved = [n for n in names if n in RESERVED_COLUMNS]
        if reserved:
            raise CdcError(f"{self.where}: table {info.name!r} gained column(s) "
                           f"{', '.join(reserved)}, which the changelog uses; rename them")
        before = self.relations.get(rel.relid)
        old = ([(c.name, c.type_oid) for c in before.columns] if before is not None
               else info.columns)
        now = [(c.name, c.type_oid) for c in rel.columns]
        if now != old:
            log.info("%s: table %s now has columns %s (was %s): records follow", self.where,
                     info.name, now, old)
        self.relations[rel.relid] = rel

    # -- records --------------------------------------------------------------------------
    def _keep(self, xid: int, info: TableInfo, index: int, texts: list) -> bool:
        """Whether a change of transaction ``xid`` to the row with these column texts is
        not in the snapshot already."""
        if not self.parts:
            return True
        key = [texts[i] for i in self._key_index(info)]
        b = bucket_of(key, self.src.buckets)
        split = b % self.src.snapshot_splits
        for t, first, end, snap in self.parts.get(split, ()):
            if t == index and first <= b < end:
                parsed = self._snapshots.get(snap)
                if parsed is None:
                    parsed = self._snapshots[snap] = parse_snapshot(snap)
                return not visible(xid, parsed)
        raise CdcError(f"{self.where}: bucket {b} of table {info.name!r} is in no snapshot "
                       "part (inconsistent announcement)")

    def _key_index(self, info: TableInfo) -> list[int]:
        names = [c for c, _ in info.columns]
        return [names.index(k) for k in info.key]

    def _record(self, info: TableInfo, texts: list, op: str, txn: Transaction,
                key_only: bool = False) -> dict:
        """``info``: the table with the columns of its latest Relation message."""
        if key_only:
            idx = set(self._key_index(info))
            rec = {c: convert(texts[i], oid) for i, (c, oid) in enumerate(info.columns) if i in idx}
        else:
            rec = {c: convert(v, oid) for (c, oid), v in zip(info.columns, texts, strict=True)}
        rec["_op"] = op
        if len(self.tables) > 1:
            rec["_table"] = info.name
        if self.src.metadata:
            rec["_lsn"] = format_lsn(txn.final_lsn)
            rec["_commit_ts"] = (txn.commit_ts_us + PG_EPOCH_US) // 1000
        return rec

    def _emit(self, txn: Transaction) -> list[dict]:
        out: list[dict] = []
        names = list(self.tables)
        for ch in txn.changes:
            rel = self.relations.get(ch.relid)
            captured = self.by_oid.get(ch.relid)
            if rel is None or captured is None:
                continue
            # the columns of the relation as of this change (followed across DDL)
            info = TableInfo(captured.name, [(c.name, c.type_oid) for c in rel.columns],
                             captured.key, captured.oid)
            index = names.index(info.name)
            if ch.kind == "I":  # the decoder sets new of an insert, old of a delete
                if ch.new is not None and self._keep(txn.xid, info, index, ch.new):
                    out.append(self._record(info, ch.new, "+I", txn))
            elif ch.kind == "D":
                if ch.old is not None and self._keep(txn.xid, info, index, ch.old):
                    out.append(self._record(info, ch.old, "-D", txn, key_only=ch.old_kind != "O"))
            else:
                out.extend(self._update(ch, info, index, txn))
        return out

    def _update(self, ch: Change, info: TableInfo, index: int, txn: Transaction) -> list[dict]:
        new = list(ch.new or ())
        for i, v in enumerate(new):
            if v is UNCHANGED_TOAST:
                if ch.old_kind != "O" or ch.old is None:
                    raise CdcError(
                        f"{self.where}: an update of table {info.name!r} left TOASTed column "
                        f"{info.columns[i][0]!r} unchanged, so the server did not send its value; "
                        f"ALTER TABLE {info.name} REPLICA IDENTITY FULL")
                new[i] = ch.old[i]
        old = ch.old if ch.old is not None else new
        key = self._key_index(info)
        out = []
        if [old[i] for i in key] == [new[i] for i in key]:
            if self._keep(txn.xid, info, index, new):
                out.append(self._record(info, old, "-U", txn, key_only=ch.old_kind != "O"))
                out.append(self._record(info, new, "+U", txn))
            return out
        # the key changed: a delete of the old key and an insert of the new one
        if self._keep(txn.xid, info, index, old):
            out.append(self._record(info, old, "-D", txn, key_only=ch.old_kind != "O"))
        if self._keep(txn.xid, info, index, new):
            out.append(self._record(info, new, "+I", txn))
        return out

    # -- position, acknowledgement, lag ---------------------------------------------------
    def position(self) -> dict:
        return {"lsn": self.lsn, "commit_ts": self.commit_ts, "parts": self.parts,
                "slot": self.slot, "publication": self.publication,
                "tables": list(self.tables), "oids": [i.oid for i in self.tables.values()],
                "splits": self.src.snapshot_splits,
                "buckets": self.src.buckets}

    def notify_checkpoint_complete(self, checkpoint_id: int, position: object) -> None:
        if not isinstance(position, dict) or self.fenced:  # fenced: never acknowledge
            return
        self.acked = max(self.acked, int(position["lsn"]))
        if self.stream is not None:
            try:
                self.stream.send_feedback(self.acked)
            except ReplicationError as exc:
                log.warning("%s: %s (the acknowledgement is sent again on reconnect)",
                            self.where, exc)

    def lag(self) -> dict:
        """``lag_bytes``: server WAL end minus the source's position; ``lag_seconds``: now
        minus the commit time of the last transaction emitted (0 when caught up). Both
        ``None`` (unknown) while the reader is not connected, never 0."""
        stream = self.stream
        if stream is None or not stream.server_wal_end or not stream.alive():
            return {"lag_bytes": None, "lag_seconds": None}
        end = stream.server_wal_end if stream else self.lsn
        done = max(self.lsn, stream.keepalive_end if stream and self.caught_up else 0)
        seconds = 0.0
        if not self.caught_up and self.commit_ts:
            seconds = max(0.0, time.time() - (self.commit_ts + PG_EPOCH_US) / 1e6)
        return {"lag_bytes": max(0, end - done), "lag_seconds": round(seconds, 3)}

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        try:
            self.admin.close()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass
