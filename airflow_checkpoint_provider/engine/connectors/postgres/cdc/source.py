"""Change data capture from PostgreSQL: an initial snapshot of tables, read in parallel,
then their change stream from a logical replication slot (``pgoutput``), as changelog
records (:mod:`....changelog`: ``+I`` / ``-U`` / ``+U`` / ``-D`` in the ``_op`` field).

Splits: ``stream`` (the slot; one) and ``snapshot-<i>`` for ``i < snapshot_splits``.

**Snapshot.** Every row goes to a bucket, ``md5(key as text) % buckets``; snapshot split
``i`` reads the buckets ``b`` with ``b % snapshot_splits == i`` of every table, in bucket
order, in one ``REPEATABLE READ`` transaction, and returns whole buckets only, so its
position (next table and bucket) always lies between buckets. The position also lists the
*parts* it read: ``[table, first bucket, end bucket, snapshot]``, where ``snapshot`` is the
transaction's ``pg_current_snapshot()``. After a restart the remaining buckets are read in
a new transaction: a new part with a new snapshot.

**Consistency with the stream** (xid visibility, no exported snapshot, survives restarts).
The stream reads every transaction that commits after the slot's start. A change of key
``k`` by transaction ``T`` is emitted only if ``T`` is *not visible* in the snapshot of the
part that holds ``k``'s bucket; a visible ``T`` is already in the row the snapshot emitted.
For one row this is exact: writers of a row are serialized by its lock, so the
transactions visible in a snapshot are a prefix of the row's history. Every transaction a
snapshot does not see commits after the slot's start: a split takes its snapshot only once
every transaction older than the slot's consistent point has ended (it waits otherwise).

**Ordering.** The stream emits nothing until every snapshot split has announced its parts:
a split announces (``pg_logical_emit_message``, prefix ``ckpt-cdc``, in the WAL the stream
reads) once a *completed checkpoint* holds its last bucket, so every snapshot row lies
before a barrier the stream's first change comes after, and aligned barriers deliver them
to every downstream task in that order. Announcements carry the job id and attempt: every
attempt announces again, and the stream (which starts again with every attempt) only counts
its own attempt's. Needs ``mode="exactly_once"`` without unaligned checkpoints for that
order (at-least-once mode may deliver a change before the snapshot row of its key).

**Acknowledgement.** The stream's position is the end LSN of the last transaction it
emitted (whole transactions only). The slot is confirmed up to a position only when a
checkpoint holding it completes (:meth:`SplitReader.notify_checkpoint_complete`).
Restoring a position older than the slot's confirmed one is refused (those changes are
gone from the slot).

Refused while streaming, with an error naming the table: a changed column list or type
(DDL on a captured table: a ``Relation`` message that differs from the table at start),
``TRUNCATE``, an update with an unchanged TOASTed value when ``REPLICA IDENTITY`` is not
``FULL``. Values are ``int`` / ``float`` / ``bool`` / ``str`` (every other type in its text
form, with ``DateStyle=ISO``, ``TimeZone=UTC``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ....errors import ConfigurationError, RestoreError
from ....extras import require
from ...base import Source, SourceContext, SplitReader
from ...capabilities import SupportsClaimBeforeRestore, SupportsJobStartCheck
from ..connection import libpq_dsn
from ..errors import CdcConfigurationError, SlotWaitTimeoutError
from .pgoutput import format_lsn, parse_lsn
from .rows import (
    MESSAGE_PREFIX,
    RESERVED_COLUMNS,
    TableInfo,
    _bucket_sql,
    convert,
    parse_snapshot,
)
from .slots import (
    NAME_PATTERN,
    check_name,
    drop_slot,
    job_object_name,
    legacy_object_name,
    slot_state,
)
from .start import check_job_start
from .stream import StreamReader
from .takeover import APP_PREFIX
from .wait import (
    create_slot,
    describe_blockers,
    list_blockers,
    slot_wait_timeout,
    timeout_error,
)

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

#: session settings of every connection, so text forms match between snapshot and stream
SESSION_OPTIONS = ("-c DateStyle=ISO -c TimeZone=UTC -c IntervalStyle=postgres "
                   "-c extra_float_digits=1 -c bytea_output=hex")
_TABLE_PATTERN = r"(?:[A-Za-z_][A-Za-z0-9_$]*\.)?[A-Za-z_][A-Za-z0-9_$]*"


class PostgresCdcSource(Source, SupportsClaimBeforeRestore, SupportsJobStartCheck):
    """Rows of PostgreSQL tables, then their changes, as changelog records.

    :param url: ``postgresql://user@host:port/db`` (or the SQLAlchemy form); the role needs
        ``REPLICATION`` (or superuser) and ``SELECT`` on the tables.
    :param tables: ``table`` or ``schema.table`` names; each needs a primary key.
    :param slot: the replication slot's name; default ``ckpt_<job name>_<hash>`` (see
        :mod:`.slots`). A slot belongs to one job name (metadata DB).
    :param publication: the publication's name; default the slot's. It is created
        ``FOR TABLE <tables>`` if missing (which needs ownership of the tables).
    :param snapshot: read the tables' rows first (``False``: changes only).
    :param snapshot_splits: snapshot splits read in parallel.
    :param buckets: key-hash buckets a snapshot split emits at once (the unit of its
        position): more buckets, smaller batches.
    :param metadata: add ``_lsn`` (commit LSN, ``None`` for snapshot rows) and
        ``_commit_ts`` (epoch ms) to every record. With more than one table every record
        also carries ``_table`` (``schema.table``).
    :param slot_wait_timeout_s: how long creating the slot, and a snapshot split's start,
        may wait for transactions older than the slot (a prepared transaction left by
        another tool, a session idle in a transaction, in any database) before the job fails
        with :class:`~.wait.SlotWaitTimeoutError` naming them; ``0``: no limit.
        Default ``$CKPT_CDC_SLOT_WAIT_TIMEOUT_S``, else 300 (see :mod:`.wait`).
    """

    slot_imports = ("psycopg",)

    #: ``ckpt verify-restore`` does not open its splits: opening one creates the job's slot
    #: and publication (named after the pipeline, not the job that will restore: a
    #: blue-green preflight created a stray slot and refused the hand-over as "older than
    #: the slot"); the job master checks the restored positions at start
    open_in_verify = False

    def __init__(self, url: str, tables: Sequence[str], *, slot: str | None = None,
                 publication: str | None = None, snapshot: bool = True,
                 snapshot_splits: int = 4, buckets: int = 1024, metadata: bool = False,
                 slot_wait_timeout_s: float | None = None) -> None:
        if isinstance(tables, str) or not tables:
            raise ConfigurationError("PostgresCdcSource tables= must be a non-empty list of "
                                     "'table' or 'schema.table' names")
        for t in tables:
            if not re.fullmatch(_TABLE_PATTERN, t):
                raise ConfigurationError(f"PostgresCdcSource table {t!r} is not 'table' or "
                                         "'schema.table'")
        if snapshot_splits < 1 or buckets < snapshot_splits:
            raise ConfigurationError(
                f"PostgresCdcSource needs snapshot_splits >= 1 and buckets >= snapshot_splits "
                f"(got {snapshot_splits}, {buckets})")
        self.url = url
        self.tables = [t if "." in t else f"public.{t}" for t in tables]
        self.slot = check_name(slot, "slot") if slot else None
        self.publication = check_name(publication, "publication") if publication else None
        self.snapshot = snapshot
        self.snapshot_splits = snapshot_splits
        self.buckets = buckets
        self.metadata = metadata
        self.slot_wait_timeout_s = slot_wait_timeout(slot_wait_timeout_s)
        #: set by :meth:`check_job_start` (the job master): the slot and publication names
        self.resolved_names: tuple[str, str] | None = None

    # -- names and connections ----------------------------------------------------------
    def names(self, job_name: str, conn=None, *, legacy: bool = False) -> tuple[str, str]:
        """The slot and publication names. ``legacy``: a restored position from before
        hash-suffixed names: its slot is used if it exists and the new one does not."""
        if self.resolved_names is not None:
            return self.resolved_names
        slot = self.slot or job_object_name(job_name)
        if (legacy and not self.slot and conn is not None and slot_state(conn, slot) is None
                and slot_state(conn, legacy_object_name(job_name)) is not None):
            slot = legacy_object_name(job_name)
            log.warning("%s: using replication slot %s (the name before hash suffixes)",
                        self.describe(), slot)
        return slot, self.publication or slot

    def check_job_start(self, store, *, job_name: str, job_id: str, fenced: bool,
                        restored: dict) -> None:
        """Called by the job master before the job's tasks start: see
        :func:`.start.check_job_start`."""
        check_job_start(self, store, job_name=job_name, job_id=job_id, fenced=fenced,
                        restored=restored)

    def claim_before_restore(self, store, *, job_name: str, job_id: str) -> None:
        """An explicitly named slot (``slot=``) is claimed for ``job_name`` before the
        snapshot to restore is checked: a job pointed at another job's slot is refused for
        that (:class:`SlotInUseError`), not for the position the other job acknowledged.
        Default names derive from the job name, so they are claimed in :meth:`check_job_start`."""
        if not self.slot:
            return
        from .slots import server_identity

        with self.connect() as conn:
            store.claim_cdc_slot(server=server_identity(conn), slot=self.slot,
                                 job_name=job_name, job_id=job_id)

    def conninfo(self, *, replication: bool = False, application_name: str = APP_PREFIX) -> str:
        """``application_name``: the stream split names its run (``ckpt-cdc <job id>
        <attempt>``, see :mod:`.takeover`)."""
        from psycopg.conninfo import make_conninfo

        extra = {"replication": "database"} if replication else {}
        return make_conninfo(libpq_dsn(self.url), options=SESSION_OPTIONS,
                             application_name=application_name, **extra)

    def connect(self) -> psycopg.Connection[Any]:
        require("postgres")
        import psycopg

        return psycopg.connect(self.conninfo(), autocommit=True)

    def splits(self) -> list[str]:
        return ["stream"] + ([f"snapshot-{i}" for i in range(self.snapshot_splits)]
                             if self.snapshot else [])

    # -- set-up ---------------------------------------------------------------------------
    def inspect(self, conn) -> dict[str, TableInfo]:
        """Check the server and the tables; the tables' columns and keys."""
        level = _value(conn, "SHOW wal_level")
        if level != "logical":
            raise CdcConfigurationError(
                f"{self.describe()}: the server's wal_level is {level!r}; logical decoding "
                "needs wal_level = logical (postgresql.conf, then restart the server)")
        out = {}
        for t in self.tables:
            row = conn.execute("SELECT to_regclass(%s)::oid", (t,)).fetchone()
            if row[0] is None:
                raise CdcConfigurationError(f"{self.describe()}: table {t!r} does not exist")
            cols = conn.execute(
                "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum", (row[0],)).fetchall()
            key = [r[0] for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY "
                "AS k(attnum, n) ON true JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                "a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
                (row[0],)).fetchall()]
            if not key:
                raise CdcConfigurationError(
                    f"{self.describe()}: table {t!r} has no primary key; the CDC source needs "
                    "one (ALTER TABLE ... ADD PRIMARY KEY)")
            ident = _value(conn, "SELECT relreplident FROM pg_class WHERE oid = %s", (row[0],))
            covered = {r[0] for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisreplident",
                (row[0],))}
            if ident == "n" or (ident == "i" and not set(key) <= covered):
                raise CdcConfigurationError(
                    f"{self.describe()}: table {t!r} has REPLICA IDENTITY "
                    f"{'NOTHING' if ident == 'n' else 'USING INDEX on an index without the primary key'}"
                    f": its updates and deletes would not carry the primary key "
                    f"({', '.join(key)}). ALTER TABLE {t} REPLICA IDENTITY DEFAULT (or FULL)")
            reserved = [c for c, _ in cols if c in RESERVED_COLUMNS]
            if reserved:
                raise CdcConfigurationError(
                    f"{self.describe()}: table {t!r} has column(s) {', '.join(reserved)}, "
                    "which the changelog uses for its own fields (_op, _table, _lsn, "
                    "_commit_ts); rename them (ALTER TABLE ... RENAME COLUMN) or capture a "
                    "view of the table through another job")
            out[t] = TableInfo(t, [(c, int(o)) for c, o in cols], key, int(row[0]))
        return out

    def prepare(self, conn, ctx: SourceContext, *, legacy: bool = False
                ) -> tuple[dict[str, TableInfo], str, str]:
        """Check, then create the publication and the slot if missing (first start); wait
        until the slot is consistent. Several splits may race here: creating what exists
        already is not an error."""
        import psycopg
        from psycopg import sql

        tables = self.inspect(conn)
        slot, pub = self.names(ctx.job_name, conn, legacy=legacy)
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (pub,)).fetchone() is None:
            try:
                conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(pub), sql.SQL(", ").join(
                        sql.SQL(".").join(map(sql.Identifier, t.split("."))) for t in tables)))
                log.info("Created publication %s for %s", pub, ", ".join(tables))
            except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                # made by another split meanwhile: one that committed before this statement
                # started is a duplicate object; one whose creation this statement waited
                # for is a unique violation on the catalog's name index
                pass
        published = {f"{s}.{t}" for s, t in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (pub,))}
        for t in tables:
            if t not in published:
                raise CdcConfigurationError(f"{self.describe()}: publication {pub!r} does not "
                                         f"include table {t!r} (ALTER PUBLICATION {pub} ADD "
                                         f"TABLE {t})")
        self._ensure_slot(conn, slot)
        return tables, slot, pub

    def _ensure_slot(self, conn, slot: str) -> None:
        """Create the slot if missing and wait until it is ready (another split may be
        creating it), within ``slot_wait_timeout_s`` (see :mod:`.wait`)."""
        import psycopg

        timeout = self.slot_wait_timeout_s
        started = time.monotonic()
        while True:
            row = conn.execute("SELECT slot_type, plugin, database, confirmed_flush_lsn IS NOT NULL "
                               "FROM pg_replication_slots WHERE slot_name = %s",
                               (slot,)).fetchone()
            left = timeout - (time.monotonic() - started) if timeout else 0.0
            if row is None:
                if timeout and left <= 0:  # another split's creation was cancelled
                    raise timeout_error(self.describe(), f"creating replication slot {slot}",
                                        time.monotonic() - started, timeout, list_blockers(conn))
                try:
                    create_slot(conn, slot, self.connect, self.describe(), timeout, left)
                    log.info("Created replication slot %s", slot)
                except psycopg.errors.DuplicateObject:
                    pass  # another split creates it: wait for it below
                continue
            kind, plugin, database, ready = row
            if (kind != "logical" or plugin not in (None, "", "pgoutput")
                    or database != conn.info.dbname):
                raise CdcConfigurationError(
                    f"{self.describe()}: replication slot {slot!r} exists as a {kind} slot for "
                    f"plugin {plugin!r} in database {database!r}; the source needs a pgoutput "
                    f"slot in {conn.info.dbname!r} (choose another slot= or drop it)")
            if ready:
                return
            if timeout and left <= 0:  # another split is still creating it
                raise timeout_error(self.describe(), f"waiting for replication slot {slot} "
                                    "(being created by another split)",
                                    time.monotonic() - started, timeout, list_blockers(conn))
            time.sleep(0.1)

    def confirmed_lsn(self, conn, slot: str) -> int:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE slot_name = %s", (slot,)).fetchone()
        if row is None:
            raise RestoreError(f"{self.describe()}: replication slot {slot!r} is gone (dropped?)"
                               "; restart the job without restoring to take a new snapshot")
        return parse_lsn(row[0])

    # -- splits ---------------------------------------------------------------------------
    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        require("postgres")
        where = f"CDC source {ctx.operator_uid!r} ({self.describe()}), split {split_id!r}"
        if position is not None and not isinstance(position, dict):
            raise RestoreError(f"{where}: restored position {position!r:.100} is not a mapping")
        if split_id == "stream":
            return StreamReader(self, position, ctx, where)
        m = re.fullmatch(r"snapshot-(\d+)", split_id)
        if m is None or int(m.group(1)) >= self.snapshot_splits:
            raise RestoreError(f"{where}: no such split (snapshot_splits={self.snapshot_splits})")
        return SnapshotReader(self, int(m.group(1)), position, ctx, where)

    def check_restore(self, operator_uid: str, positions, *, checkpoint_id: int,
                      location: str, job_name: str) -> None:
        """The stream position must not be older than the slot's confirmed one (those
        changes are gone from the slot); read-only (see :meth:`Source.check_restore`)."""
        position = positions.get("stream")
        if not isinstance(position, dict) or position.get("lsn") is None:
            return  # empty state or no stream position yet: starts at the slot's position
        require("postgres")
        slot, _ = self.names(job_name)
        try:
            lsn = int(position["lsn"])
        except (TypeError, ValueError) as exc:
            raise RestoreError(f"restored position {position!r:.200} in {location} is "
                               "malformed") from exc
        origin = str(position.get("slot") or slot)
        with self.connect() as conn:
            if origin != slot and slot_state(conn, slot) is None:
                # a green job restoring blue's snapshot, without a slot of its own yet: the
                # job master copies blue's at start if it still holds the restored position
                self._check_copy_origin(conn, origin, slot, lsn, job_name)
                return
            confirmed = self.confirmed_lsn(conn, slot)
        if lsn < confirmed:
            raise RestoreError(
                f"the stream position {format_lsn(lsn)} of checkpoint {checkpoint_id} is older "
                f"than replication slot {slot!r}'s confirmed position {format_lsn(confirmed)}: "
                "a newer checkpoint acknowledged the changes in between and the slot no "
                "longer has them")

    def _check_copy_origin(self, conn, origin: str, slot: str, lsn: int, job_name: str) -> None:
        state = slot_state(conn, origin)
        if state is None:
            raise RestoreError(
                f"{self.describe()}: the restored position {format_lsn(lsn)} was read from slot "
                f"{origin!r}, which does not exist, and this job's slot {slot!r} does not "
                "either: nothing holds the changes after it. Start without restoring (a new "
                "snapshot)")
        if state[0] is not None and state[0] > lsn:
            raise RestoreError(
                f"{self.describe()}: job {job_name} has no replication slot {slot!r} yet, and "
                f"the restored position {format_lsn(lsn)} was read from slot {origin!r}, now "
                f"confirmed past it at {format_lsn(state[0])}: a copy made now lacks the "
                "changes in between. For a blue-green upgrade create green's slot BEFORE the "
                "hand-over snapshot: ckpt cdc copy-slots PIPELINE --from-job BLUE --to-job "
                f"{job_name} (the blue_green_upgrade DAG's copy_cdc_slots task does), then "
                "take blue's savepoint")

    def lineage_dataset(self) -> tuple[str, str]:
        from sqlalchemy.engine import make_url

        url = make_url(libpq_dsn(self.url))
        return (f"postgres://{url.host or 'localhost'}:{url.port or 5432}",
                f"{url.database}.{self.tables[0]}")

    def describe(self) -> str:
        return f"postgres-cdc({', '.join(self.tables)})"


def _value(conn: psycopg.Connection[Any], query: str, params: tuple | None = None) -> Any:
    """The one value of ``query``, which always returns one row."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"PostgreSQL returned no row for {query!r}")
    return row[0]


class SnapshotReader(SplitReader):
    """Snapshot split ``index``: whole buckets of every table (see the module docstring).

    Position: ``{"table": i, "bucket": b, "parts": [[table, first, end, snapshot], ...],
    "done": bool}``; ``bucket`` is the next bucket to read of table ``i``.
    """

    def __init__(self, src: PostgresCdcSource, index: int, position: dict | None,
                 ctx: SourceContext, where: str) -> None:
        self.src, self.index, self.ctx, self.where = src, index, ctx, where
        pos = position or {"table": 0, "bucket": index, "parts": [], "done": False}
        try:
            self.table = int(pos["table"])
            self.bucket = int(pos["bucket"])
            self.parts = [[int(t), int(a), int(b), str(s)] for t, a, b, s in pos["parts"]]
            self.done = bool(pos["done"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RestoreError(f"{where}: restored position {position!r:.200} is malformed") from exc
        self.cursor: psycopg.ServerCursor[Any] | None = None
        self.rows: Iterator[Any] = iter(())
        self.peek: Any = None
        self.horizon: int | None = None
        #: when the snapshot began waiting for transactions older than the slot; last warning
        self.waiting_since: float | None = None
        self.warned = 0.0
        self.conn: psycopg.Connection[Any] | None = src.connect()
        self.tables, self.slot, _ = src.prepare(
            self.conn, ctx, legacy=position is not None and "slot" not in position)
        self.names = list(self.tables)
        if self.done:
            self._announce()

    def _announce(self) -> None:
        """Tell the stream (through the WAL it reads) which snapshot covers which buckets."""
        body = json.dumps({"slot": self.slot, "job": self.ctx.job_id, "attempt": self.ctx.attempt,
                           "split": self.index, "parts": self.parts})
        conn = self._connection()
        conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (MESSAGE_PREFIX, body))
        log.info("%s: snapshot announced (%d part(s))", self.where, len(self.parts))
        conn.close()
        self.conn = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None:  # announced: a split that is done reads nothing more
            raise RuntimeError(f"{self.where}: the snapshot's connection is already closed")
        return self.conn

    def _begin(self) -> bool:
        """Open the snapshot transaction once no transaction older than the slot runs."""
        import psycopg

        conn = self._connection()
        if self.horizon is None:
            self.horizon = int(_value(conn, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))
        conn.autocommit = False
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        snap = _value(conn, "SELECT pg_current_snapshot()::text")
        if parse_snapshot(snap)[0] < self.horizon:
            conn.rollback()
            conn.autocommit = True
            now = time.monotonic()
            self.waiting_since = self.waiting_since or now
            waited, timeout = now - self.waiting_since, self.src.slot_wait_timeout_s
            if timeout and waited > timeout:
                raise timeout_error(self.where, "the snapshot's start", waited, timeout,
                                    list_blockers(conn, self.horizon))
            if waited > 5 and now - self.warned > 10:
                self.warned = now
                log.warning("%s: the snapshot has waited %.0f s%s for transactions older than "
                            "the replication slot to end: %s", self.where, waited,
                            f" of {timeout:g} s" if timeout else "",
                            describe_blockers(list_blockers(conn, self.horizon)))
            return False
        self.snapshot = snap
        self.parts.append([self.table, self.bucket, self.bucket, snap])
        self._open_cursor()
        return True

    def _open_cursor(self) -> None:
        from psycopg import sql

        info = self.tables[self.names[self.table]]
        n, b = self.src.snapshot_splits, _bucket_sql(info.key, self.src.buckets)
        query = sql.SQL("SELECT {b} AS _b, {cols} FROM {t} WHERE {b} % {n} = {i} AND {b} >= {start} "
                        "ORDER BY 1").format(
            b=b, n=sql.Literal(n), i=sql.Literal(self.index), start=sql.Literal(self.bucket),
            cols=sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c))
                                    for c, _ in info.columns),
            t=sql.SQL(".").join(map(sql.Identifier, info.name.split("."))))
        cursor = self._connection().cursor(name=f"ckpt_cdc_snapshot_{self.index}")
        cursor.itersize = 2000
        cursor.execute(query)
        self.cursor, self.rows = cursor, iter(cursor)
        self.peek = next(self.rows, None)

    def _record(self, info: TableInfo, row) -> dict:
        rec = {c: convert(v, oid) for (c, oid), v in zip(info.columns, row[1:], strict=True)}
        rec["_op"] = "+I"
        if len(self.names) > 1:
            rec["_table"] = info.name
        if self.src.metadata:
            rec["_lsn"] = rec["_commit_ts"] = None
        return rec

    def read_batch(self, max_records: int) -> list[dict] | None:
        if self.done:
            return []
        if self.cursor is None and not self._begin():
            return []
        out: list[dict] = []
        info = self.tables[self.names[self.table]]
        while len(out) < max_records:
            if self.peek is None:  # this table is read: on to the next one
                self.parts[-1][2] = self.src.buckets
                if self.cursor is not None:
                    self.cursor.close()
                self.table += 1
                self.bucket = self.index
                if self.table == len(self.names):
                    self.done = True
                    conn = self._connection()
                    conn.rollback()
                    conn.autocommit = True
                    break
                self.parts.append([self.table, self.bucket, self.bucket, self.snapshot])
                self._open_cursor()
                info = self.tables[self.names[self.table]]
                continue
            current = int(self.peek[0])
            while self.peek is not None and int(self.peek[0]) == current:  # one whole bucket
                out.append(self._record(info, self.peek))
                self.peek = next(self.rows, None)
            self.bucket = current + self.src.snapshot_splits
            self.parts[-1][2] = self.bucket
        return out

    def position(self) -> dict:
        return {"table": self.table, "bucket": self.bucket, "done": self.done,
                "parts": [list(p) for p in self.parts], "slot": self.slot,
                "tables": self.names, "oids": [self.tables[t].oid for t in self.names],
                "splits": self.src.snapshot_splits, "buckets": self.src.buckets}

    def notify_checkpoint_complete(self, checkpoint_id: int, position: object) -> None:
        if isinstance(position, dict) and position.get("done") and self.conn is not None:
            self._announce()

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass


__all__ = ["NAME_PATTERN", "SESSION_OPTIONS", "PostgresCdcSource", "SlotWaitTimeoutError",
           "SnapshotReader", "check_name", "drop_slot", "job_object_name"]
