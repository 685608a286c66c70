"""PostgresSink (two-phase commit) and DDL on its live table (issue 54, item 3).

``ALTER TABLE`` needs an ACCESS EXCLUSIVE lock, so it queues behind the sink's prepared
transaction (``PREPARE TRANSACTION`` keeps the transaction's ROW EXCLUSIVE lock until
``COMMIT PREPARED``). The next epoch's ``COPY`` queued behind the ``ALTER``, inside the task
thread -- the thread that has to process the notification whose ``COMMIT PREPARED`` ends the
wait: a cycle. The job stayed RUNNING with its input frozen, every checkpoint "expired before
completing", nothing named the lock. Now the epoch's writes never wait on a lock (they keep
the records and retry, so the notification commits and the ``ALTER`` runs); a barrier that
cannot get the lock within the sink's ``lock_timeout_ms`` fails the task with a
:class:`SinkLockTimeoutError` naming the table, the lock, the blocking backend's pid and its
statement, and that is the reason of the checkpoint it fails and of the failover."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from click.testing import CliRunner
from pipelines import (
    Background,
    check_exactly_once_rows,
    expected_running_sums,
    open_sink_operator,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import RestartStrategy
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.errors import JobFailedError, SinkLockTimeoutError
from airflow_checkpoint_provider.engine.runtime.operators.edges import SinkOperator

pytestmark = pytest.mark.slow

N, KEYS, SEED = 30_000, 30, 11
COLUMNS = ["id", "key", "count", "sum"]


def _sql(url: str, statement: str) -> list[tuple]:
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def _prepared(url: str) -> list[str]:
    return [g for (g,) in _sql(url, "SELECT gid FROM pg_prepared_xacts "
                                    "WHERE database = current_database()")]


def _unwedge(url: str, pid: int | None = None) -> None:
    """End what a test left waiting: cancel backend ``pid`` and roll back what is prepared."""
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        if pid is not None:
            conn.execute("SELECT pg_cancel_backend(%s)", [pid])
        for gid in _prepared(url):
            conn.execute(psycopg.sql.SQL("ROLLBACK PREPARED {}").format(psycopg.sql.Literal(gid)))


class Ddl:
    """One DDL statement in its own session, in a thread: its backend pid, when it started
    and ended (``time.monotonic()``), and its error."""

    def __init__(self, url: str, statement: str) -> None:
        self.url, self.statement = url, statement
        self.conn = psycopg.connect(libpq_dsn(url), autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.started = time.monotonic()
        self.ended: float | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.conn.execute(self.statement)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            self.ended = time.monotonic()
            self.conn.close()

    def wait_queued(self, timeout: float = 10.0) -> None:
        """Until the statement waits for a lock (it queued behind the sink's transaction)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.ended is None:
            if _sql(self.url, f"SELECT 1 FROM pg_stat_activity WHERE pid = {self.pid} "
                              "AND wait_event_type = 'Lock'"):
                return
            time.sleep(0.02)
        raise AssertionError(f"{self.statement!r} did not queue for a lock")

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


def _operator(url: str, table: str, *, job_id: str | None = None, subtask: int = 0,
              **options) -> SinkOperator:
    return open_sink_operator(PostgresSink(url, table, ["k", "v"], **options),
                              job_id=job_id or uuid.uuid4().hex, job_name="ddl",
                              subtask=subtask, parallelism=2)


def _bounded(fn, seconds: float, unwedge):
    """``fn()`` in a thread; a call still blocked after ``seconds`` is unblocked by
    ``unwedge()`` and reported as a wedge."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    t.start()
    t.join(seconds)
    if t.is_alive():
        unwedge()
        t.join(10)
        pytest.fail(f"the sink's task thread was wedged for {seconds:.0f} s behind the ALTER "
                    "TABLE that waits for the sink's own prepared transaction")
    out["seconds"] = time.monotonic() - started
    if "error" in out:
        raise out["error"]
    return out


@pytest.mark.timeout(90)
def test_the_next_epoch_never_holds_the_commit_of_a_completed_checkpoint_behind_an_alter(
        postgres_server):
    url = postgres_server.create_database()
    _sql(url, "CREATE TABLE t (k bigint, v bigint)")
    op = _operator(url, "t")
    op.process([{"k": 1, "v": 1}])
    op.snapshot(1)                                    # prepared: holds its lock on t
    alter = Ddl(url, "ALTER TABLE t ADD COLUMN note text")
    alter.wait_queued()                               # behind the prepared transaction
    try:
        # the next epoch's first write would queue behind the ALTER, in the task thread
        took = _bounded(lambda: op.process([{"k": 2, "v": 2}]), 20,
                        lambda: _unwedge(url, alter.pid))["seconds"]
        assert took < 2.0, f"the write waited {took:.1f} s for the lock"
        op.notify_complete(1)                          # COMMIT PREPARED: the ALTER runs
        assert alter.join(10) and alter.error is None, alter.error
        assert alter.ended - alter.started < 10
        op.process([{"k": 3, "v": 3}])                # written with the records it kept
        op.snapshot(2)
        op.notify_complete(2)
    finally:
        op.close()
        _unwedge(url)
    assert sorted(_sql(url, "SELECT k, v, note FROM t")) == [(1, 1, None), (2, 2, None),
                                                             (3, 3, None)]
    assert _prepared(url) == []


@pytest.mark.timeout(90)
def test_a_barrier_that_cannot_get_the_table_lock_fails_naming_the_alter_and_its_backend(
        postgres_server):
    """The notification of checkpoint 1 has not arrived when barrier 2 comes (a savepoint,
    concurrent checkpoints): barrier 2 cannot write what the epoch kept and must not wait
    forever for the ALTER that waits for checkpoint 1's prepared transaction."""
    url = postgres_server.create_database()
    _sql(url, "CREATE TABLE t (k bigint, v bigint)")
    op = _operator(url, "t", lock_timeout_ms=1_500)
    op.process([{"k": 1, "v": 1}])
    (gid,) = [t for e in op.snapshot(1).operator_state for t in e["transactions"]]
    alter = Ddl(url, "ALTER TABLE t ADD COLUMN note text")
    alter.wait_queued()
    try:
        _bounded(lambda: op.process([{"k": 2, "v": 2}]), 20, lambda: _unwedge(url, alter.pid))
        started = time.monotonic()
        with pytest.raises(SinkLockTimeoutError) as info:
            _bounded(lambda: op.snapshot(2), 20, lambda: _unwedge(url, alter.pid))
        took = time.monotonic() - started
    finally:
        op.close()
    message = str(info.value)
    # at once: the lock waits for checkpoint 1's transaction, which only this (blocked)
    # thread can commit
    assert took < 5.0, f"barrier 2 failed after {took:.1f} s"
    first = message.splitlines()[0]                   # what `ckpt jobs` shows
    for part in ("'out'", "table t", "RowExclusiveLock", f"pid {alter.pid}",
                 "ALTER TABLE t ADD COLUMN note text", "AccessExclusiveLock", gid,
                 f"pg_cancel_backend({alter.pid})"):
        assert part in first, f"{part!r} not in {first!r}"
    # what the failover does (checkpoint 1 completed): commit it; the ALTER then runs
    _sql(url, f"COMMIT PREPARED '{gid}'")
    assert alter.join(10) and alter.error is None
    assert _sql(url, "SELECT k, v, note FROM t") == [(1, 1, None)] and _prepared(url) == []


@pytest.mark.timeout(90)
def test_a_barrier_behind_an_alter_that_waits_for_its_own_checkpoint_fails_at_once(
        postgres_server):
    """Two sink subtasks: the ALTER queued behind subtask 0's open epoch before subtask 1
    wrote. Subtask 0 prepares at barrier 1; subtask 1's barrier 1 cannot write what it kept
    until the ALTER ran, which waits for subtask 0's transaction of checkpoint 1, which commits
    only once subtask 1 acked checkpoint 1: waiting is futile, it fails at once (not after
    lock_timeout_ms) naming the ALTER and the prepared transaction."""
    url = postgres_server.create_database()
    _sql(url, "CREATE TABLE t (k bigint, v bigint)")
    job_id = uuid.uuid4().hex
    op0 = _operator(url, "t", job_id=job_id, subtask=0, lock_timeout_ms=8_000)
    op1 = _operator(url, "t", job_id=job_id, subtask=1, lock_timeout_ms=8_000)
    op0.process([{"k": 1, "v": 1}])                   # subtask 0's open epoch locks t
    alter = Ddl(url, "ALTER TABLE t ADD COLUMN note text")
    alter.wait_queued()
    try:
        _bounded(lambda: op1.process([{"k": 2, "v": 2}]), 20, lambda: _unwedge(url, alter.pid))
        (gid,) = [t for e in op0.snapshot(1).operator_state for t in e["transactions"]]
        started = time.monotonic()
        with pytest.raises(SinkLockTimeoutError) as info:
            _bounded(lambda: op1.snapshot(1), 20, lambda: _unwedge(url, alter.pid))
        took = time.monotonic() - started
    finally:
        op0.close()
        op1.close()
        _unwedge(url)                                 # the failover: checkpoint 1 never completed
    assert took < 4.0, f"barrier 1 of subtask 1 failed after {took:.1f} s"
    for part in ("barrier of checkpoint 1", "a cycle", gid, f"pid {alter.pid}",
                 "ALTER TABLE t ADD COLUMN note text"):
        assert part in str(info.value), f"{part!r} not in {info.value}"
    assert alter.join(10) and alter.error is None
    assert _sql(url, "SELECT count(*) FROM t") == [(0,)]


@pytest.mark.timeout(90)
def test_an_upsert_barrier_behind_an_alter_fails_in_time_naming_it(postgres_server):
    """Upsert mode applies the epoch at the barrier: the same bounded wait and message."""
    url = postgres_server.create_database()
    _sql(url, "CREATE TABLE t (k bigint PRIMARY KEY, v bigint)")
    op = _operator(url, "t", mode="upsert", key=["k"], lock_timeout_ms=1_500)
    op.process([{"_op": "+I", "k": 1, "v": 1}])
    op.snapshot(1)
    alter = Ddl(url, "ALTER TABLE t ADD COLUMN note text")
    alter.wait_queued()
    try:
        op.process([{"_op": "+I", "k": 2, "v": 2}])    # another key: no row lock conflict
        with pytest.raises(SinkLockTimeoutError) as info:
            _bounded(lambda: op.snapshot(2), 20, lambda: _unwedge(url, alter.pid))
    finally:
        op.close()
        _unwedge(url)
    for part in ("'out'", "checkpoint 2", "lock_timeout_ms=1500", f"pid {alter.pid}",
                 "ALTER TABLE t ADD COLUMN note text"):
        assert part in str(info.value), f"{part!r} not in {info.value}"
    assert alter.join(10)


def _rows(url: str) -> list[dict]:
    with psycopg.connect(libpq_dsn(url)) as conn, conn.cursor(
            row_factory=psycopg.rows.dict_row) as cur:
        cur.execute("SELECT id, key, count, sum FROM sums")
        return cur.fetchall()


def _pipeline(workdir, url: str, name: str, restart: RestartStrategy | None = None, **options):
    return running_sum_pipeline(
        str(workdir), name=name, num_records=N, num_keys=KEYS, seed=SEED, rate=3_000,
        interval_ms=200, timeout_ms=20_000, restart=restart,
        sink=PostgresSink(url, "sums", COLUMNS, **options))


@pytest.fixture
def sums(postgres_server):
    url = postgres_server.create_database()
    _sql(url, "CREATE TABLE sums (id bigint, key text, count bigint, sum bigint)")
    return url


@pytest.mark.timeout(240)
def test_a_job_goes_on_through_an_alter_table_on_its_sink_table_without_loss_or_duplicates(
        workdir, sums):
    """The reported case: ``ALTER TABLE ... ADD COLUMN`` on the live 2PC sink table of a
    running job (sink parallelism 3). Mostly the ALTER runs within a second and nothing fails.
    When it queued behind the open transaction of one sink subtask while another subtask's
    epoch had not taken the table's lock yet, the second one's barrier cannot write until
    the checkpoint it is part of completes: after ``lock_timeout_ms`` (10 s) it fails the task
    naming the ALTER, and the failover frees the table. Either way the job finishes and the
    table holds exactly the failure-free reference's rows; no checkpoint silently expires."""
    bg = Background(_pipeline(workdir, sums, "ddl-live"))
    job = bg.wait_running(min_checkpoints=2, timeout=120)
    alter = Ddl(sums, "ALTER TABLE sums ADD COLUMN note text")
    if not alter.join(45):
        store = MetadataStore(bg.pipeline.metadata_url)
        reasons = [c.failure_reason for c in store.list_checkpoints(job.job_id)
                   if c.failure_reason][-3:]
        _unwedge(sums, alter.pid)                     # what the reporter did: cancel the ALTER
        try:
            bg.result(120)
        finally:
            pytest.fail(f"the job wedged: the ALTER still waited after 45 s; last checkpoint "
                        f"failures: {reasons}")
    assert alter.error is None, alter.error
    result = bg.result(180)
    store = MetadataStore(bg.pipeline.metadata_url)
    failed = [c.failure_reason for c in store.list_checkpoints(job.job_id) if c.failure_reason]
    print(f"ALTER TABLE took {alter.ended - alter.started:.2f} s; job {result.status}, "
          f"{result.restarts} restarts; failed checkpoints: {failed}")
    assert alter.ended - alter.started < 30
    for reason in failed:  # a failover: it names the lock, the ALTER and its backend
        for part in ("SinkLockTimeoutError", "table sums", f"pid {alter.pid}",
                     "ALTER TABLE sums ADD COLUMN note text"):
            assert part in reason, f"{part!r} not in {reason!r}"
    assert result.status == "FINISHED", result
    check_exactly_once_rows(_rows(sums), expected_running_sums(N, KEYS, SEED))
    assert _prepared(sums) == []


@pytest.mark.timeout(300)
def test_a_lock_that_stays_fails_the_job_naming_the_backend_and_a_restore_loses_nothing(
        workdir, sums):
    """The ALTER waits for another session too (an open transaction that read the table), so
    the lock stays: the barrier fails after ``lock_timeout_ms``, the failover and the job's
    failure name the ALTER's backend and statement, and a restore once the DDL ran commits
    every row exactly once."""
    reader = psycopg.connect(libpq_dsn(sums))
    reader.execute("SELECT count(*) FROM sums")       # idle in transaction: ACCESS SHARE
    alter = None
    try:
        bg = Background(_pipeline(workdir, sums, "ddl-stuck", lock_timeout_ms=2_000,
                                  restart=RestartStrategy.fixed_delay(attempts=1, delay_ms=0)))
        job = bg.wait_running(min_checkpoints=2, timeout=120)
        alter = Ddl(sums, "ALTER TABLE sums ADD COLUMN note text")
        alter.wait_queued()
        started = time.monotonic()
        try:
            bg.result(90)
        except JobFailedError as exc:
            error = str(exc)
        except AssertionError:                        # wedged: bg cancelled the job
            _unwedge(sums, alter.pid)
            raise
        else:
            pytest.fail("the job finished although its sink table stayed locked")
        took = time.monotonic() - started
        store = MetadataStore(bg.pipeline.metadata_url)
        row = store.get_job(job.job_id)
        failed = [c.failure_reason for c in store.list_checkpoints(job.job_id)
                  if c.failure_reason]
        print(f"the job {row.status} {took:.1f} s after the ALTER: {row.failure_reason}; "
              f"failed checkpoints: {failed}")
        assert row.status == "FAILED" and took < 60
        for reason in (error.splitlines()[0], row.failure_reason.splitlines()[0], failed[-1]):
            for part in ("SinkLockTimeoutError", "table sums", f"pid {alter.pid}",
                         "ALTER TABLE sums ADD COLUMN note text", f"pid {reader.info.backend_pid}"):
                assert part in reason, f"{part!r} not in {reason!r}"
        assert not [r for r in failed if "expired" in r], failed
        # the operator's view: `ckpt jobs` and `ckpt checkpoints JOB` name the lock
        db = bg.pipeline.metadata_url
        for args in (["jobs", "--db", db], ["checkpoints", job.job_id, "--db", db]):
            out = CliRunner().invoke(main, args)
            assert out.exit_code == 0, out.output
            for part in ("SinkLockTimeoutError", f"pid {alter.pid}",
                         "ALTER TABLE sums ADD COLUMN note text"):
                assert part in out.output, f"ckpt {args[0]}: {part!r} not in {out.output}"
    finally:
        reader.close()                                # the ALTER gets its lock and runs
        if alter is not None:
            assert alter.join(20) and alter.error is None, alter.error
    # nothing lost or duplicated: restore the failed job's latest checkpoint
    again = _pipeline(workdir, sums, "ddl-stuck", lock_timeout_ms=2_000)
    assert again.run(restore="latest").status == "FINISHED"
    check_exactly_once_rows(_rows(sums), expected_running_sums(N, KEYS, SEED))
    assert _prepared(sums) == []
