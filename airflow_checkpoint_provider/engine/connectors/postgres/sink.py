"""Exactly-once rows into a PostgreSQL table: two-phase commit with prepared transactions.

Each sink subtask writes the rows of a checkpoint epoch into one open transaction (``COPY``).
At the barrier it runs ``PREPARE TRANSACTION '<gid>'``: the rows are durable but invisible,
and the gid goes into the checkpoint. When the checkpoint completes, ``COMMIT PREPARED``
makes them visible (Flink's ``TwoPhaseCommitSinkFunction`` on PostgreSQL's own 2PC). After a
failure the restored checkpoint's gids are committed (again: committing is idempotent), and
every other prepared transaction of this sink from the restored job or this one is rolled
back, so rows of checkpoints that never completed disappear.

gid: ``ckpt~<job id>~<hash of the operator uid>~<subtask>~<checkpoint id>``
(:mod:`...sink_names`; gids of the old ``-`` encoding, which parse one way only, are still
committed and rolled back). A restored gid must name this sink's uid hash and one job (this
one, or the job whose snapshot is restored): a snapshot cannot commit another job's prepared
transaction. A gid this job builds that does not parse back fails the job at once
(:class:`~...sink_names.TransactionIdError`), it never makes a checkpoint look corrupt.

``mode="upsert"`` with ``key=[...]`` is for tables with a primary key (or a unique index on
``key``) and changelog input (:mod:`...changelog`): the epoch's records are compacted per key
(last operation wins, :mod:`..upsert`) and applied at the barrier as ``INSERT ... ON CONFLICT
(key) DO UPDATE`` (``+I``/``+U``) and ``DELETE`` (``-U``/``-D``) inside the same prepared
transaction as above: exactly once, committed when the checkpoint completes. With
``prepared=False`` the upsert transaction is committed at the barrier instead (no
``max_prepared_transactions`` needed; the table then shows epochs of checkpoints that may
not complete, and converges once they are replayed, since each key ends at its last
operation).

The server needs ``max_prepared_transactions`` > 0 for the default mode (a clear error says
so at the first checkpoint otherwise).

Locks (issue 54): a prepared transaction keeps its locks until ``COMMIT PREPARED``, so DDL on
the table (``ALTER TABLE`` needs an ACCESS EXCLUSIVE lock) queues behind it, and every later
statement needing a lock on the table queues behind the DDL. The next epoch's first write
waiting there would wait in the task thread, the one that must process the notification
whose ``COMMIT PREPARED`` ends the wait: a silent wedge. So an epoch's first write waits at
most :data:`WRITE_LOCK_WAIT_MS` for the table's lock; then its transaction (which holds
nothing yet) is rolled back, the rows are kept in memory and retried with a later write,
while the task goes on to commit completed checkpoints (on a connection of its own) and the
DDL runs. Once the epoch holds the table's lock, its statements wait up to
``lock_timeout_ms`` (row locks). The barrier writes what was kept, waiting at most
``lock_timeout_ms`` (not at all when the lock waits for a prepared transaction of this sink
that cannot commit before the barrier is through: a cycle across subtasks, when the DDL
queued behind one subtask's open epoch); if the lock is still taken it fails the task with
:class:`~...errors.SinkLockTimeoutError` naming the table, the lock, and the backends holding
or waiting for a conflicting lock (pid, statement, what blocks them: from ``pg_locks``,
``pg_stat_activity`` and ``pg_blocking_pids``). That is the reason of the failover and of the
checkpoints it aborts; the failover commits or rolls back what the sink prepared, which
frees the DDL. A ``lock_timeout_ms`` below the checkpoint timeout keeps a checkpoint from
expiring on a lock without saying so.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence

from ...changelog import OP_FIELD, RETRACT, row_kind
from ...errors import (
    BadRecordError,
    ConfigurationError,
    CorruptCheckpointError,
    SinkTransactionConflictError,
)
from ...extras import require
from ..base import ConnectorContext, Sink, SinkWriter
from ..capabilities import (
    SupportsDiscardHeld,
    SupportsDiscardUncommitted,
    SupportsFencing,
    SupportsRelocation,
    SupportsUpsert,
    Transaction,
)
from ..sink_names import RestoredTransactions, one_owner, own, parse_gid
from ..sink_names import gid as make_gid
from ..upsert import upsert_key
from .connection import libpq_dsn
from .locks import WRITE_LOCK_WAIT_MS, WRITE_RETRY_S, LockWatch

log = logging.getLogger(__name__)


def _uid_hash(uid: str) -> str:
    return hashlib.sha1(uid.encode()).hexdigest()[:12]


class PostgresSink(Sink, SupportsFencing, SupportsDiscardUncommitted, SupportsRelocation,
                   SupportsUpsert):
    """Rows (dicts, or Arrow batches) into ``table``.

    :param url: ``postgresql://user@host:port/db`` (or the SQLAlchemy form).
    :param table: ``table`` or ``schema.table``; it must exist.
    :param columns: the columns to fill, from the record fields of the same name (default:
        the fields of the first record).
    :param mode: ``"2pc"`` (prepared transactions, exactly-once) or ``"upsert"``.
    :param key: the conflict columns of ``"upsert"`` (a primary key or unique index).
    :param prepared: ``"upsert"`` only: apply each epoch in a prepared transaction (default,
        exactly once) or commit it at the barrier (``False``: idempotent, converging).
    :param lock_timeout_ms: the longest the barrier waits for a lock on the table (DDL queued
        behind the sink's prepared transaction, another session's lock) before the task fails
        with :class:`~...errors.SinkLockTimeoutError` naming the blocking backend; keep it
        below the checkpoint timeout. ``None``: wait without limit (not recommended).
    """

    slot_imports = ("psycopg",)

    def __init__(self, url: str, table: str, columns: Sequence[str] | None = None, *,
                 mode: str = "2pc", key: Sequence[str] | None = None,
                 prepared: bool = True, lock_timeout_ms: int | None = 10_000) -> None:
        self.key = upsert_key(f"PostgresSink({table!r})", mode, key, modes=("2pc", "upsert"))
        self.prepared = bool(prepared) or mode == "2pc"
        if not table or not all(part for part in table.split(".")) or table.count(".") > 1:
            raise ConfigurationError(f"PostgresSink table {table!r} is not 'table' or 'schema.table'")
        self.url = url
        self.table = table
        self.columns = list(columns) if columns else None
        self.mode = mode
        if lock_timeout_ms is not None and (isinstance(lock_timeout_ms, bool) or not isinstance(
                lock_timeout_ms, int) or lock_timeout_ms <= 0):
            raise ConfigurationError(f"PostgresSink {table!r}: lock_timeout_ms must be a "
                                     f"positive number of milliseconds or None "
                                     f"(got {lock_timeout_ms!r})")
        self.lock_timeout_ms = lock_timeout_ms

    def create_writer(self, ctx: ConnectorContext) -> SinkWriter:
        require("postgres")
        return _PostgresWriter(self, ctx)

    def lineage_dataset(self) -> tuple[str, str]:
        """``("postgres://host:port", "database.schema.table")``, without credentials."""
        from sqlalchemy.engine import make_url

        url = make_url(libpq_dsn(self.url))
        schema, _, table = self.table.rpartition(".")
        return (f"postgres://{url.host or 'localhost'}:{url.port or 5432}",
                f"{url.database}.{schema or 'public'}.{table}")

    def can_discard_committed(self) -> bool:
        """Upsert mode rewrites the same rows when records are replayed (idempotent), so a
        restore may fall back past committed output; 2PC mode appends and cannot undo."""
        return self.mode == "upsert"

    def can_hold_commits(self) -> bool:
        """Not in upsert mode: with ``prepared=False`` it commits at the barrier, and a held
        prepared upsert keeps its rows locked, so the next epoch touching those keys could
        never run (:class:`SinkTransactionConflictError`)."""
        return self.mode == "2pc"

    def describe(self) -> str:
        return f"postgres({self.table}, {self.mode})"

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str]:
        """Roll back what ended job ``job_id`` prepared and never committed (called once a
        job restored from its checkpoint runs; the rows are replayed by the new job)."""
        if not self.prepared:
            return []
        import psycopg

        with psycopg.connect(libpq_dsn(self.url), autocommit=True) as conn:
            return _rollback_of_job(conn, job_id, operator_uid)

    def discard_uncommitted_of_job(self, operator_uid: str, job_id: str,
                                   newest_completed: int) -> list[str]:
        """Roll back what ended job ``job_id`` prepared for checkpoints after its newest
        completed one (``newest_completed``; -1: none): nothing can commit them any more (a
        restore commits only the transactions its snapshot names, and a snapshot names only
        those of checkpoints up to its own). Called when a job ends (cancelled, failed): a
        prepared transaction holds a ``max_prepared_transactions`` slot and its row locks."""
        if not self.prepared:
            return []
        import psycopg

        uid = _uid_hash(operator_uid)
        with psycopg.connect(libpq_dsn(self.url), autocommit=True) as conn:
            doomed = []
            for g in sorted(_prepared(conn)):
                p = parse_gid(g)
                if (p is not None and p.job_id == job_id and p.operator_uid == uid
                        and p.checkpoint_id is not None and p.checkpoint_id > newest_completed):
                    _finish(conn, g, "ROLLBACK")
                    doomed.append(g)
            return doomed

    def check_restored_transactions(self, transactions: Sequence[Transaction], *,
                                    location: str) -> None:
        owners = set()
        for t in transactions:
            p = parse_gid(t)
            if p is None:
                raise CorruptCheckpointError(
                    f"{location}: PostgresSink transaction {t!r:.100} is not a prepared "
                    "transaction id of this sink")
            owners.add((p.job_id, p.operator_uid))
        one_owner(owners, location)


#: the prepared transactions of a checkpointed sink in the connection's database: the view
#: shows the whole server's, and one can be finished only from its own database
_OURS = ("FROM pg_prepared_xacts WHERE database = current_database() "
         "AND (gid LIKE 'ckpt~%%' OR gid LIKE 'ckpt-%%')")


def _prepared(conn) -> set[str]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT gid {_OURS}")
        return {g for (g,) in cur.fetchall()}


#: how long a COMMIT/ROLLBACK PREPARED waits for another backend finishing the same gid
BUSY_WAIT_S = 30.0


def _finish(conn, gid: str, how: str) -> None:
    """``COMMIT``/``ROLLBACK PREPARED gid``, idempotent. A gid another backend is finishing
    right now ("prepared transaction ... is busy": the committer of a failed attempt whose
    slot has not stopped yet, while the restarted attempt recovers) is retried until that
    backend is done (then it is gone: nothing to do), for at most :data:`BUSY_WAIT_S`."""
    import time

    import psycopg

    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        try:
            conn.execute(psycopg.sql.SQL(f"{how} PREPARED {{}}").format(psycopg.sql.Literal(gid)))
            return
        except psycopg.errors.UndefinedObject:
            return  # finished already (by another subtask, or before a failure): idempotent
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            if "is busy" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _rollback_of_job(conn, job_id: str, operator_uid: str,
                     keep: frozenset[str] | set[str] = frozenset()) -> list[str]:
    uid, done = _uid_hash(operator_uid), []
    for g in sorted(_prepared(conn) - keep):
        p = parse_gid(g)
        if p is not None and p.job_id == job_id and p.operator_uid == uid:
            _finish(conn, g, "ROLLBACK")
            done.append(g)
    return done


class _PostgresWriter(SinkWriter, SupportsDiscardHeld):
    accepts_arrow = False
    sink: PostgresSink

    def __init__(self, sink: PostgresSink, ctx: ConnectorContext) -> None:
        import psycopg

        self.sink, self.ctx = sink, ctx
        self.psycopg = psycopg
        self.conn = psycopg.connect(libpq_dsn(sink.url))          # the open epoch's transaction
        self.admin = psycopg.connect(libpq_dsn(sink.url), autocommit=True)  # COMMIT/ROLLBACK PREPARED
        self.uid_hash = _uid_hash(ctx.operator_uid)
        self.sink_name = f"PostgresSink {ctx.operator_uid!r} ({sink.table})"
        self.columns = sink.columns
        self.rows = 0
        #: upsert mode: the epoch's last record per key, in order of their last arrival
        self.latest: dict[tuple, dict] = {}
        #: upsert mode, prepared: the compacted changes of each transaction this writer
        #: prepared and has not committed yet (their row locks block the same keys)
        self.unresolved: dict[str, dict[tuple, dict]] = {}
        #: fenced (a blue-green validation run, 2PC mode): the epoch's rows go to a private
        #: temporary copy of the table, never to the table the live job writes
        self.fenced = ctx.fenced and sink.mode == "2pc"
        if self.fenced:
            self._open_fenced()
        #: the lock waits and the errors that name who holds a lock (module docstring)
        self.locks = LockWatch(psycopg=psycopg, conn=self.conn, admin=self.admin,
                               table=sink.table, target=self._table(target=True),
                               lock_timeout_ms=sink.lock_timeout_ms, sink_name=self.sink_name,
                               ctx=ctx, uid_hash=self.uid_hash)
        #: rows of the open epoch not written yet: the table was locked (module docstring)
        self.kept: list[tuple] = []
        self.retry_at = 0.0
        # between barriers a statement of the epoch waits at most WRITE_LOCK_WAIT_MS for a
        # lock (the barrier raises it to the sink's lock_timeout_ms for its transaction)
        self.conn.execute(f"SET lock_timeout = {WRITE_LOCK_WAIT_MS}")
        self.conn.commit()

    def _open_fenced(self) -> None:
        """A fenced epoch is never published, so it must not touch the live job's rows: in
        the target table its rows would collide with (``UniqueViolation``: the fenced job
        failed over in a loop) or wait for the rows blue writes, and blue's for its. It
        writes a temporary table of the target's columns, defaults and CHECK / NOT NULL
        constraints instead (the row shape and types are validated; uniqueness, which
        depends on blue's rows, is not), and rolls each epoch back at the barrier: it
        prepares nothing (no ``max_prepared_transactions`` slot, no row lock)."""
        sql = self.psycopg.sql
        with self.conn.cursor() as cur:
            cur.execute("SHOW max_prepared_transactions")
            row = cur.fetchone()
            if row is None or int(row[0]) <= 0:  # the unfenced run would need them
                raise ConfigurationError(
                    f"PostgresSink {self.sink.table!r}: the server refuses prepared "
                    "transactions (max_prepared_transactions = 0); set "
                    "max_prepared_transactions > 0 or use mode='upsert'")
            cur.execute(sql.SQL(
                "CREATE TEMPORARY TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                "INCLUDING GENERATED INCLUDING IDENTITY)").format(
                    sql.Identifier(f"ckpt_fenced_{self.uid_hash}"), self._table(target=True)))
        self.conn.commit()

    # -- SQL --------------------------------------------------------------------------------
    def _table(self, *, target: bool = False):
        sql = self.psycopg.sql
        if self.fenced and not target:
            return sql.Identifier(f"ckpt_fenced_{self.uid_hash}")
        return sql.SQL(".").join(sql.Identifier(p) for p in self.sink.table.split("."))

    def _cols(self):
        sql = self.psycopg.sql
        return sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)

    def write(self, records: list[dict]) -> None:
        if not records:
            return
        if self.sink.mode == "upsert":
            self._compact(records)
            return
        if self.columns is None:
            self.columns = list(records[0])
        cols = self.columns
        try:
            rows = [tuple(r[c] for c in cols) for r in records]
        except KeyError as exc:
            raise ConfigurationError(
                f"PostgresSink {self.sink.table!r}: a record has no field {exc.args[0]!r} "
                f"(columns: {', '.join(cols)})") from None
        retrying = bool(self.kept)
        if retrying:  # the table was locked: after the rows kept, in order
            self.kept.extend(rows)
            if time.monotonic() < self.retry_at:
                return
            rows, self.kept = self.kept, []
        try:
            self._copy(rows)
        except self.psycopg.errors.LockNotAvailable as exc:
            # the task thread must not wait: it commits completed checkpoints, which may be
            # what the lock waits for (DDL queued behind this sink's prepared transaction)
            if not retrying:
                log.warning("%s keeps the open epoch's rows in memory, its table is locked: %s",
                            self.sink_name, self.locks.report(exc))
            self.kept = rows
            self.retry_at = time.monotonic() + WRITE_RETRY_S

    def _copy(self, rows: list[tuple]) -> None:
        """``COPY`` ``rows`` into the open transaction. The epoch's first ``COPY`` takes the
        table's lock: if that wait times out (``LockNotAvailable``), the transaction, which
        holds nothing yet, is rolled back and the error raised (the caller keeps the rows).
        Once the lock is held, only a row lock can make a ``COPY`` wait (a unique key another
        transaction inserts): that waits up to ``lock_timeout_ms`` and then fails the task with
        :class:`SinkLockTimeoutError` (the epoch's transaction is lost; the failover replays
        it)."""
        sql, conn, first = self.psycopg.sql, self.conn, self.rows == 0
        try:
            with conn.cursor() as cur, cur.copy(
                    sql.SQL("COPY {} ({}) FROM STDIN").format(self._table(), self._cols())) as copy:
                for row in rows:
                    copy.write_row(row)
        except self.psycopg.errors.LockNotAvailable as exc:
            if not first:
                raise self.locks.failure(f"a write of the open epoch waited "
                                         f"lock_timeout_ms={self.sink.lock_timeout_ms} for a "
                                         "lock", exc) from exc
            conn.rollback()
            raise
        if first:  # the epoch holds its table lock now: its later waits are row locks
            self.locks.wait_lock_timeout()
        self.rows += len(rows)

    # -- upsert mode -------------------------------------------------------------------------
    def _compact(self, records: list[dict]) -> None:
        """Keep each key's last record of the epoch (in arrival order: re-inserted last)."""
        latest, key = self.latest, self.sink.key
        for r in records:
            row_kind(r, self.sink_name)
            try:
                k = tuple(r[c] for c in key)
            except KeyError as exc:
                raise BadRecordError(f"{self.sink_name}: a record has no key column "
                                     f"{exc.args[0]!r} (fields: {', '.join(r)})") from None
            latest.pop(k, None)
            latest[k] = r

    def _apply_changes(self) -> None:
        """The compacted epoch as ``INSERT ... ON CONFLICT DO UPDATE`` and ``DELETE`` in the
        open transaction."""
        upserts = [r for r in self.latest.values() if r.get(OP_FIELD) not in RETRACT]
        deletes = [k for k, r in self.latest.items() if r.get(OP_FIELD) in RETRACT]
        if self.columns is None and upserts:
            self.columns = [c for c in upserts[0] if c != OP_FIELD]
        cols, key, sql = self.columns or list(self.sink.key), self.sink.key, self.psycopg.sql
        # a record (also a -U/-D) with a field the table does not get is of another schema
        # (with explicit columns=, other fields are ignored, as in 2pc mode)
        for r in self.latest.values() if self.sink.columns is None and upserts else ():
            extra = set(r) - set(cols) - {OP_FIELD}
            if extra:
                raise BadRecordError(f"{self.sink_name}: field {sorted(extra)[0]!r} of a "
                                     f"{r.get(OP_FIELD, '+I')} record is not one of the "
                                     f"columns {', '.join(cols)}")
        try:
            rows = [tuple(r[c] for c in cols) for r in upserts]
        except KeyError as exc:
            raise BadRecordError(f"{self.sink_name}: a {OP_FIELD} +I/+U record has no field "
                                 f"{exc.args[0]!r} (columns: {', '.join(cols)})") from None
        self.latest = {}
        names = sql.SQL(", ").join(sql.Identifier(k) for k in key)
        with self.conn.cursor() as cur:
            if rows:
                updates = sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                    for c in cols if c not in key)
                stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO {}").format(
                    self._table(), sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                    sql.SQL(", ").join(sql.Placeholder() * len(cols)), names,
                    sql.SQL("UPDATE SET {}").format(updates) if len(cols) > len(key)
                    else sql.SQL("NOTHING"))
                cur.executemany(stmt, rows)
            if deletes:
                cur.executemany(sql.SQL("DELETE FROM {} WHERE ({}) = ({})").format(
                    self._table(), names, sql.SQL(", ").join(sql.Placeholder() * len(key))),
                    deletes)
        self.rows += len(rows) + len(deletes)

    def _check_unlocked(self, checkpoint_id: int) -> None:
        """A prepared transaction keeps its row locks until it is committed; a key of the
        epoch it holds would wait for them in this thread, the one that must process the
        notification that commits it: fail (the failover resolves every prepared
        transaction) instead of waiting forever. Happens when a savepoint, or a second
        concurrent checkpoint, reaches the sink before the previous one's notification."""
        for gid, changes in self.unresolved.items():
            for k in self.latest:
                if k in changes:
                    held = parse_gid(gid)
                    raise SinkTransactionConflictError(
                        f"{self.sink_name}: the prepared transaction of checkpoint "
                        f"{held.checkpoint_id if held else gid} is neither committed nor "
                        "aborted yet "
                        f"and holds the row lock of key {k!r}, which checkpoint "
                        f"{checkpoint_id} changes again; failing over resolves it (keep "
                        "max_concurrent=1 and trigger savepoints between checkpoints to avoid it)")

    def abort(self, transactions: Sequence[Transaction]) -> bool:
        """Upsert mode: roll back the aborted checkpoint's prepared transaction (its locks
        would block the next epoch's changes of the same keys until another checkpoint
        completes) and carry its changes into the open epoch, ahead of the newer ones."""
        if self.sink.mode != "upsert" or not all(t in self.unresolved for t in transactions):
            return False
        carried: dict[tuple, dict] = {}
        for gid in transactions:
            _finish(self.admin, str(gid), "ROLLBACK")
            carried.update(self.unresolved.pop(str(gid)))
        for k, r in self.latest.items():
            carried.pop(k, None)
            carried[k] = r
        self.latest = carried
        return True

    def pre_commit(self, checkpoint_id: int) -> list[Transaction]:
        if self.sink.mode == "upsert":
            if self.sink.prepared:
                self._check_unlocked(checkpoint_id)
            changes = self.latest
            self.locks.wait_lock_timeout()
            try:
                self._apply_changes()
            except self.psycopg.errors.LockNotAvailable as exc:
                raise self.locks.barrier_failure(checkpoint_id, "apply the epoch's changes",
                                                 exc) from exc
            if not self.sink.prepared:
                self.conn.commit()
                self.rows = 0
                return []
        elif self.kept:  # rows the table's lock kept from being written: now or fail
            rows, self.kept = self.kept, []
            self.locks.write_kept(rows, checkpoint_id, self._copy)
        if not self.rows or self.fenced:
            # nothing written, or a fenced epoch (validated, never published): no
            # transaction to prepare
            self.conn.rollback()
            self.rows = 0
            return []
        txn = make_gid(self.ctx.job_id, self.uid_hash, self.ctx.subtask_index, checkpoint_id)
        own(txn, parse_gid(txn), sink=self.sink_name)  # never a gid a restore would refuse
        try:
            self.conn.execute(self.psycopg.sql.SQL("PREPARE TRANSACTION {}").format(
                self.psycopg.sql.Literal(txn)))
        except self.psycopg.errors.ObjectNotInPrerequisiteState as exc:
            raise ConfigurationError(
                f"PostgresSink {self.sink.table!r}: the server refuses prepared transactions "
                f"({exc}); set max_prepared_transactions > 0 or use mode='upsert'") from exc
        # after PREPARE the session is outside any transaction: the next write opens one
        self.rows = 0
        if self.sink.mode == "upsert":
            self.unresolved[txn] = changes
        return [txn]

    def commit(self, transactions: Sequence[Transaction]) -> None:
        pending = _prepared(self.admin)
        gone = [str(g) for g in transactions if g not in pending]
        if gone:
            self._refuse_prepared_elsewhere(gone)
        for gid in transactions:
            if gid in pending:
                _finish(self.admin, str(gid), "COMMIT")
            self.unresolved.pop(str(gid), None)

    def _refuse_prepared_elsewhere(self, gids: list[str]) -> None:
        """A transaction to commit that is not prepared in this database is committed
        already (an earlier attempt, another subtask), unless another database of the
        server holds it: the sink's URL then names another database than the job that
        prepared it, and taking it as committed would never publish its rows."""
        rows = self.admin.execute(
            "SELECT gid, database, current_database() FROM pg_prepared_xacts "
            "WHERE gid = ANY(%s) AND database <> current_database() ORDER BY gid",
            (gids,)).fetchall()
        if rows:
            gid, elsewhere, here = rows[0]
            which = (f"transaction {gid!r} of the restored checkpoint was" if len(rows) == 1
                     else f"{len(rows)} transactions of the restored checkpoint (e.g. {gid!r})"
                     " were")
            raise ConfigurationError(
                f"PostgresSink {self.sink.table!r}: {which} prepared in database "
                f"{elsewhere!r}, but the sink writes to {here!r}, and a "
                f"prepared transaction commits only from its own database. Restore with the "
                f"sink URL of {elsewhere!r}, then move the sink from a savepoint taken after "
                f"that")

    def discard_held(self, transactions: Sequence[Transaction]) -> None:
        """Fenced (a blue-green validation run): roll back the prepared transactions of an
        epoch whose checkpoint completed or aborted; they are never published, and keeping
        them would exhaust the server's ``max_prepared_transactions``."""
        for gid in transactions:
            _finish(self.admin, str(gid), "ROLLBACK")

    def _check_restored(self, transactions: Sequence[Transaction]) -> None:
        rule = RestoredTransactions(operator_uid=self.ctx.operator_uid, job_id=self.ctx.job_id,
                                    location=f"snapshot restored into {self.sink_name}")
        for i, t in enumerate(transactions):
            rule.check(parse_gid(t), t, f"transactions[{i}]", uid_is_hash=self.uid_hash)

    def recover(self, transactions: Sequence[Transaction]) -> None:
        if not self.sink.prepared:
            return
        self._check_restored(transactions)
        self.commit(transactions)
        if self.ctx.subtask_index == 0:
            # what an earlier attempt of this job prepared for checkpoints that never
            # completed (those of the job restored from: discard_staged_of_job, once it ended)
            _rollback_of_job(self.admin, self.ctx.job_id, self.ctx.operator_uid,
                             keep=set(map(str, transactions)))

    def close(self) -> None:
        for conn in (self.conn, self.admin):
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass


def prepared_transactions(url: str) -> list[tuple[str, object]]:
    """``(gid, prepared_at)`` of every prepared transaction of a checkpointed sink in the
    database at ``url`` (``ckpt leftovers``)."""
    require("postgres")
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT gid, prepared {_OURS} ORDER BY prepared")
        return [(g, t) for g, t in cur.fetchall()]


def rollback_prepared(url: str, gids: Sequence[str]) -> None:
    """Roll back these prepared transactions (finished ones are skipped)."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        for g in gids:
            _finish(conn, g, "ROLLBACK")
