""":class:`LockWatch`, the lock handling of :class:`~.sink.PostgresSink`'s writer, which
holds one (issue 54; the rules are in :mod:`.sink`' docstring): the short lock wait of an epoch's writes between barriers
(:data:`WRITE_LOCK_WAIT_MS`; the rows are kept and retried after :data:`WRITE_RETRY_S`), the
barrier's write of the kept rows (failing at once on a cycle through this sink's own prepared
transactions, else after ``lock_timeout_ms``), and the :class:`~...errors.SinkLockTimeoutError`
that names the table, the lock and the backends holding or waiting for a conflicting one
(:func:`_lock_report`: ``pg_locks``, ``pg_stat_activity``, ``pg_blocking_pids``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import SinkLockTimeoutError
from ..sink_names import parse_gid

if TYPE_CHECKING:
    from ..base import ConnectorContext

#: the longest an epoch's write waits for a lock between barriers; then it keeps the rows and
#: retries (the task thread must stay free to commit completed checkpoints)
WRITE_LOCK_WAIT_MS = 100
#: how soon after a write found the table locked the next write tries again
WRITE_RETRY_S = 0.25
#: lock modes that conflict with the ROW EXCLUSIVE lock a write takes on its table
_CONFLICTING = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")


def _lock_report(admin, regclass: str, table: str, own_pid: int) -> tuple[str, list[str]]:
    """One line: the backends that hold or wait for a lock on ``table`` conflicting with
    ROW EXCLUSIVE (not ``own_pid``), with their statements and blockers; and the gids of the
    prepared transactions that hold a lock on it."""
    with admin.cursor() as cur:
        cur.execute(
            "SELECT l.pid, l.mode, l.granted, a.state, "
            "  extract(epoch FROM clock_timestamp() - coalesce(a.query_start, a.xact_start)), "
            "  left(regexp_replace(a.query, '\\s+', ' ', 'g'), 200), pg_blocking_pids(l.pid) "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'relation' AND l.relation = %s::regclass AND l.pid <> %s "
            "  AND l.mode = ANY(%s) ORDER BY l.granted DESC, a.query_start",
            [regclass, own_pid, list(_CONFLICTING)])
        lockers = cur.fetchall()
        cur.execute(
            # a prepared transaction's locks have no pid; its xid is on its transactionid lock
            "SELECT DISTINCT p.gid, p.prepared FROM pg_locks l JOIN pg_locks x "
            "  ON x.virtualtransaction = l.virtualtransaction AND x.locktype = 'transactionid' "
            "  AND x.pid IS NULL JOIN pg_prepared_xacts p ON p.transaction = x.transactionid "
            "WHERE l.locktype = 'relation' AND l.relation = %s::regclass AND l.pid IS NULL "
            "ORDER BY p.prepared",
            [regclass])
        prepared = [g for g, _ in cur.fetchall()]
        others = {p for row in lockers for p in row[6] if p} - {row[0] for row in lockers}
        statements = {}
        if others:
            cur.execute("SELECT pid, state, left(regexp_replace(query, '\\s+', ' ', 'g'), 200) "
                        "FROM pg_stat_activity WHERE pid = ANY(%s)", [sorted(others)])
            statements = {pid: (state, query) for pid, state, query in cur.fetchall()}
    if not lockers:
        held = (f"; prepared transaction(s) {', '.join(prepared)} hold a lock on it"
                if prepared else "")
        return (f"a RowExclusiveLock on table {table} (or a row lock) was not granted in time, "
                f"and no session holds or waits for a conflicting table lock now{held}",
                prepared)
    parts = []
    first_waiting = None
    for pid, mode, granted, state, seconds, query, blockers in lockers:
        where = "holds" if granted else "waits for"
        text = (f"backend pid {pid} {where} {mode} on table {table} "
                f"({state}, {float(seconds or 0):.1f} s) running {query!r}")
        behind = []
        for b in blockers:
            if not b:
                continue  # a prepared transaction: named below
            if b in statements:
                behind.append(f"pid {b} ({statements[b][0]}: {statements[b][1]!r})")
            else:
                behind.append(f"pid {b}")
        if 0 in blockers or (not granted and prepared):
            behind.append(f"prepared transaction(s) {', '.join(prepared) or '(unnamed)'}")
        if behind:
            text += f" behind {', '.join(behind)}"
        if not granted and first_waiting is None:
            first_waiting = pid
        parts.append(text)
    advice = (f"end it (SELECT pg_cancel_backend({first_waiting})) or run DDL on this table "
              "while the job is stopped; a prepared transaction of this sink commits when its "
              "checkpoint completes" if first_waiting is not None else
              f"end that session (SELECT pg_cancel_backend({lockers[0][0]}))")
    return (f"the RowExclusiveLock on table {table} is blocked: {'; '.join(parts)}; {advice}",
            prepared)


class LockWatch:
    """The lock handling of one ``_PostgresWriter``: a collaborator the writer holds as
    ``locks`` (not a base class). It sets how long the open transaction's statements wait for
    a lock, writes the rows an epoch kept at the barrier (:meth:`write_kept`), and builds the
    :class:`~...errors.SinkLockTimeoutError` that names who holds or waits for a conflicting
    lock (:meth:`failure`, :meth:`report`).

    :param psycopg: the ``psycopg`` module (its ``errors.LockNotAvailable``).
    :param conn: the writer's connection of the open epoch's transaction.
    :param admin: the writer's autocommit connection (``pg_locks`` is read there).
    :param table: the sink's ``table`` or ``schema.table``, as the messages name it.
    :param target: the table as a ``psycopg.sql`` composable (the live table, also when
        fenced: the one whose locks matter).
    :param lock_timeout_ms: the sink's ``lock_timeout_ms`` (``None``: without limit).
    :param sink_name: how the messages name the sink.
    :param ctx: the writer's connector context (job id, subtask index).
    :param uid_hash: the hashed operator uid in this sink's transaction ids.
    """

    def __init__(self, *, psycopg: Any, conn: Any, admin: Any, table: str, target: Any,
                 lock_timeout_ms: int | None, sink_name: str, ctx: ConnectorContext,
                 uid_hash: str) -> None:
        self.psycopg = psycopg
        self.conn = conn
        self.admin = admin
        self.table = table
        self.target = target
        self.lock_timeout_ms = lock_timeout_ms
        self.sink_name = sink_name
        self.ctx = ctx
        self.uid_hash = uid_hash

    def wait_at_most(self, ms: int | None) -> None:
        """The open transaction's statements wait up to ``ms`` for a lock (``None``: without
        limit); this transaction only: the next epoch's first write waits WRITE_LOCK_WAIT_MS."""
        self.conn.execute("SELECT set_config('lock_timeout', %s, true)",
                          [str(ms) if ms is not None else "0"])

    def wait_lock_timeout(self) -> None:
        """The open transaction's statements wait up to the sink's ``lock_timeout_ms``."""
        self.wait_at_most(self.lock_timeout_ms)

    def write_kept(self, rows: list[tuple], checkpoint_id: int,
                   copy: Callable[[list[tuple]], None]) -> None:
        """The barrier writes (with ``copy``) the ``rows`` the epoch kept while the table was
        locked. A short wait first; if the lock waits for a prepared transaction of this sink
        that cannot commit before this barrier is through (this subtask's own: its commit runs
        in this thread; another subtask's of this checkpoint or a later one: it commits once
        this checkpoint completes), waiting is futile: fail at once. Else wait up to
        ``lock_timeout_ms``, then fail naming the lock."""
        what = f"write the {len(rows)} rows the epoch kept while the table was locked"
        self.wait_at_most(WRITE_LOCK_WAIT_MS)
        try:
            copy(rows)
            return
        except self.psycopg.errors.LockNotAvailable as exc:
            report, prepared = self.state(exc)
            cycle = [g for g in prepared if self._commits_after_this_barrier(g, checkpoint_id)]
            if cycle:
                raise SinkLockTimeoutError(
                    f"{self.sink_name}: the barrier of checkpoint {checkpoint_id} cannot {what}: "
                    f"the lock waits for prepared transaction(s) {', '.join(cycle)} of this "
                    f"sink, which cannot commit before this barrier is through (a cycle; the "
                    f"failover resolves it): {report}") from exc
        self.wait_lock_timeout()
        try:
            copy(rows)
        except self.psycopg.errors.LockNotAvailable as exc:
            raise self.barrier_failure(checkpoint_id, what, exc) from exc

    def _commits_after_this_barrier(self, gid: str, checkpoint_id: int) -> bool:
        p = parse_gid(gid)
        return (p is not None and p.job_id == self.ctx.job_id and p.operator_uid == self.uid_hash
                and (p.subtask == self.ctx.subtask_index
                     or (p.checkpoint_id is not None and p.checkpoint_id >= checkpoint_id)))

    def failure(self, what: str, exc: Exception) -> SinkLockTimeoutError:
        """The error of a lock wait that timed out: ``what`` the sink could not do, and
        :meth:`report`."""
        return SinkLockTimeoutError(f"{self.sink_name}: {what}: {self.report(exc)}")

    def barrier_failure(self, checkpoint_id: int, what: str,
                        exc: Exception) -> SinkLockTimeoutError:
        """:meth:`failure` of the barrier of ``checkpoint_id``, which waited
        ``lock_timeout_ms``."""
        return self.failure(
            f"the barrier of checkpoint {checkpoint_id} waited lock_timeout_ms="
            f"{self.lock_timeout_ms} for a lock and could not {what}", exc)

    def report(self, exc: Exception) -> str:
        """Who holds or waits for a lock on the table that conflicts with the RowExclusiveLock
        a write takes: each backend's pid, lock, statement and what blocks it (prepared
        transactions by gid). Read right after the wait timed out, on the admin connection."""
        return self.state(exc)[0]

    def state(self, exc: Exception) -> tuple[str, list[str]]:
        """:meth:`report` and the gids of the prepared transactions locking the table."""
        table = self.table
        try:
            return _lock_report(self.admin, self.target.as_string(self.admin),
                                table, self.conn.info.backend_pid)
        except Exception as diag:  # noqa: BLE001 - the report must not hide the lock error
            return (f"the RowExclusiveLock on table {table} was not granted ({exc}); "
                    f"reading pg_locks failed: {diag}", [])
