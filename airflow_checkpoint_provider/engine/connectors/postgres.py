"""Exactly-once rows into a PostgreSQL table: two-phase commit with prepared transactions.

Each sink subtask writes the rows of a checkpoint epoch into one open transaction (``COPY``).
At the barrier it runs ``PREPARE TRANSACTION '<gid>'``: the rows are durable but invisible,
and the gid goes into the checkpoint. When the checkpoint completes, ``COMMIT PREPARED``
makes them visible (Flink's ``TwoPhaseCommitSinkFunction`` on PostgreSQL's own 2PC). After a
failure the restored checkpoint's gids are committed (again: committing is idempotent), and
every other prepared transaction of this sink from the restored job or this one is rolled
back, so rows of checkpoints that never completed disappear.

gid: ``ckpt~<job id>~<hash of the operator uid>~<subtask>~<checkpoint id>``
(:mod:`..sink_names`; gids of the old ``-`` encoding, which parse one way only, are still
committed and rolled back). A restored gid must name this sink's uid hash and one job (this
one, or the job whose snapshot is restored): a snapshot cannot commit another job's prepared
transaction. A gid this job builds that does not parse back fails the job at once
(:class:`~..sink_names.TransactionIdError`), it never makes a checkpoint look corrupt.

``mode="upsert"`` with ``key=[...]`` is the alternative for tables with a primary key:
``INSERT ... ON CONFLICT (key) DO UPDATE`` committed at the barrier. Rows replayed after a
restore overwrite themselves with the same values, so the table ends up as with exactly-once
(at-least-once writes, idempotent). It needs no ``max_prepared_transactions``.

The server needs ``max_prepared_transactions`` > 0 for the default mode (a clear error says
so at the first checkpoint otherwise).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ..errors import ConfigurationError, CorruptCheckpointError
from ..extras import require
from ..sink_names import RestoredTransactions, one_owner, own, parse_gid
from ..sink_names import gid as make_gid
from .base import Sink, SinkWriter, SourceContext


def _dsn(url: str) -> str:
    """A libpq URI from a SQLAlchemy-style URL (``postgresql+psycopg://`` is accepted)."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def _uid_hash(uid: str) -> str:
    return hashlib.sha1(uid.encode()).hexdigest()[:12]


class PostgresSink(Sink):
    """Rows (dicts, or Arrow batches) into ``table``.

    :param url: ``postgresql://user@host:port/db`` (or the SQLAlchemy form).
    :param table: ``table`` or ``schema.table``; it must exist.
    :param columns: the columns to fill, from the record fields of the same name (default:
        the fields of the first record).
    :param mode: ``"2pc"`` (prepared transactions, exactly-once) or ``"upsert"``.
    :param key: the conflict columns of ``"upsert"`` (a primary key or unique index).
    """

    def __init__(self, url: str, table: str, columns: Sequence[str] | None = None, *,
                 mode: str = "2pc", key: Sequence[str] | None = None) -> None:
        if mode not in ("2pc", "upsert"):
            raise ConfigurationError(f"PostgresSink mode {mode!r} is unknown; use '2pc' or 'upsert'")
        if mode == "upsert" and not key:
            raise ConfigurationError("PostgresSink(mode='upsert') needs key=[conflict columns]")
        if not table or not all(part for part in table.split(".")) or table.count(".") > 1:
            raise ConfigurationError(f"PostgresSink table {table!r} is not 'table' or 'schema.table'")
        self.url = url
        self.table = table
        self.columns = list(columns) if columns else None
        self.mode = mode
        self.key = list(key or [])

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        require("postgres")
        return _PostgresWriter(self, ctx)

    def lineage_dataset(self) -> tuple[str, str]:
        """``("postgres://host:port", "database.schema.table")``, without credentials."""
        from sqlalchemy.engine import make_url

        url = make_url(_dsn(self.url))
        schema, _, table = self.table.rpartition(".")
        return (f"postgres://{url.host or 'localhost'}:{url.port or 5432}",
                f"{url.database}.{schema or 'public'}.{table}")

    def can_discard_committed(self) -> bool:
        """Upsert mode rewrites the same rows when records are replayed (idempotent), so a
        restore may fall back past committed output; 2PC mode appends and cannot undo."""
        return self.mode == "upsert"

    def can_hold_commits(self) -> bool:
        """Upsert mode commits at the barrier: a fenced job could not hold its rows back."""
        return self.mode == "2pc"

    def describe(self) -> str:
        return f"postgres({self.table}, {self.mode})"

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str]:
        """Roll back what ended job ``job_id`` prepared and never committed (called once a
        job restored from its checkpoint runs; the rows are replayed by the new job)."""
        if self.mode == "upsert":
            return []
        import psycopg

        with psycopg.connect(_dsn(self.url), autocommit=True) as conn:
            return _rollback_of_job(conn, job_id, operator_uid)

    def check_restored_transactions(self, transactions: list[object], *, location: str) -> None:
        owners = set()
        for t in transactions:
            p = parse_gid(t)
            if p is None:
                raise CorruptCheckpointError(
                    f"{location}: PostgresSink transaction {t!r:.100} is not a prepared "
                    "transaction id of this sink")
            owners.add((p.job_id, p.operator_uid))
        one_owner(owners, location)


def _prepared(conn) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'ckpt~%%' OR gid LIKE 'ckpt-%%'")
        return {g for (g,) in cur.fetchall()}


def _finish(conn, gid: str, how: str) -> None:
    import psycopg

    try:
        conn.execute(psycopg.sql.SQL(f"{how} PREPARED {{}}").format(psycopg.sql.Literal(gid)))
    except psycopg.errors.UndefinedObject:
        pass  # finished already (by another subtask, or before a failure): idempotent


def _rollback_of_job(conn, job_id: str, operator_uid: str, keep: set[str] = frozenset()) -> list[str]:
    uid, done = _uid_hash(operator_uid), []
    for g in sorted(_prepared(conn) - keep):
        p = parse_gid(g)
        if p is not None and p.job_id == job_id and p.operator_uid == uid:
            _finish(conn, g, "ROLLBACK")
            done.append(g)
    return done


class _PostgresWriter(SinkWriter):
    accepts_arrow = False

    def __init__(self, sink: PostgresSink, ctx: SourceContext) -> None:
        import psycopg

        self.sink, self.ctx = sink, ctx
        self.psycopg = psycopg
        self.conn = psycopg.connect(_dsn(sink.url))          # the open epoch's transaction
        self.admin = psycopg.connect(_dsn(sink.url), autocommit=True)  # COMMIT/ROLLBACK PREPARED
        self.uid_hash = _uid_hash(ctx.operator_uid)
        self.sink_name = f"PostgresSink {ctx.operator_uid!r} ({sink.table})"
        self.columns = sink.columns
        self.rows = 0

    # -- SQL --------------------------------------------------------------------------------
    def _table(self):
        sql = self.psycopg.sql
        return sql.SQL(".").join(sql.Identifier(p) for p in self.sink.table.split("."))

    def _cols(self):
        sql = self.psycopg.sql
        return sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)

    def write(self, records: list[dict]) -> None:
        if not records:
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
        sql = self.psycopg.sql
        with self.conn.cursor() as cur:
            if self.sink.mode == "upsert":
                updates = sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                    for c in cols if c not in self.sink.key)
                stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}").format(
                    self._table(), self._cols(), sql.SQL(", ").join(sql.Placeholder() * len(cols)),
                    sql.SQL(", ").join(sql.Identifier(k) for k in self.sink.key), updates)
                cur.executemany(stmt, rows)
            else:
                with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(self._table(), self._cols())) as copy:
                    for row in rows:
                        copy.write_row(row)
        self.rows += len(rows)

    def pre_commit(self, checkpoint_id: int) -> list[object]:
        if self.sink.mode == "upsert":
            self.conn.commit()
            return []
        if not self.rows:
            self.conn.rollback()  # nothing written: no transaction to prepare
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
        return [txn]

    def commit(self, transactions: list[object]) -> None:
        pending = _prepared(self.admin)
        for gid in transactions:
            if gid in pending:
                _finish(self.admin, str(gid), "COMMIT")

    def _check_restored(self, transactions: list[object]) -> None:
        rule = RestoredTransactions(operator_uid=self.ctx.operator_uid, job_id=self.ctx.job_id,
                                    location=f"snapshot restored into {self.sink_name}")
        for i, t in enumerate(transactions):
            rule.check(parse_gid(t), t, f"transactions[{i}]", uid_is_hash=self.uid_hash)

    def recover(self, transactions: list[object]) -> None:
        if self.sink.mode == "upsert":
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
