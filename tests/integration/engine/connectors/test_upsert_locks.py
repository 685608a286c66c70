"""PostgreSQL upsert sink (prepared transactions) and the row locks of a prepared epoch.

A prepared transaction keeps the row locks of its ``INSERT ... ON CONFLICT``/``DELETE``
until ``COMMIT PREPARED``. The next epoch touching the same key used to wait for that lock
inside the task thread -- the thread that would have to process the notification that
commits it: a checkpoint aborted after the sink prepared (expired, declined), or a savepoint
barrier arriving while the previous checkpoint's notification was still pending, hung the
sink forever. Now an abort rolls the epoch back into the next one, and an epoch that would
wait on a lock of the sink's own unresolved transaction fails at once (a failover, which
commits or rolls back every prepared transaction) instead of hanging."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from pipelines import open_sink_operator

from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.errors import SinkTransactionConflictError
from airflow_checkpoint_provider.engine.runtime.operators.edges import SinkOperator

pytestmark = pytest.mark.slow


def _table(url: str) -> None:
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute('CREATE TABLE t ("k" bigint PRIMARY KEY, "v" bigint)')


def _rows(url: str) -> dict:
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        return dict(conn.execute("SELECT k, v FROM t").fetchall())


def _prepared(url: str) -> list[str]:
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        return [g for (g,) in conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = "
                                           "current_database()").fetchall()]


def _operator(url: str, job_id: str | None = None, restored: list | None = None) -> SinkOperator:
    sink = PostgresSink(url, "t", ["k", "v"], mode="upsert", key=["k"])
    return open_sink_operator(sink, job_id=job_id or uuid.uuid4().hex, job_name="locks",
                              restored=restored)


def _bounded(fn, url: str, seconds: float = 10.0):
    """``fn()`` in a thread; a call still blocked after ``seconds`` is unblocked (the
    prepared transactions rolled back) and reported as a hang."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            for gid in _prepared(url):
                conn.execute(psycopg.sql.SQL("ROLLBACK PREPARED {}").format(
                    psycopg.sql.Literal(gid)))
        t.join(10)
        pytest.fail(f"blocked for {seconds}s on the row lock of its own prepared transaction")
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.timeout(60)
def test_an_aborted_checkpoint_does_not_block_the_next_epoch_on_its_row_locks(postgres_server):
    url = postgres_server.create_database()
    _table(url)
    op = _operator(url)
    op.process([{"_op": "+I", "k": 1, "v": 1}, {"_op": "+I", "k": 2, "v": 2}])
    op.snapshot(1)                       # prepared: holds the locks of keys 1 and 2
    op.notify_abort(1)                   # checkpoint 1 expired (another task was slow)
    op.process([{"_op": "+U", "k": 1, "v": 10}, {"_op": "+I", "k": 3, "v": 3}])
    state = _bounded(lambda: op.snapshot(2), url)
    # checkpoint 2's transaction now carries epoch 1 as well: one transaction to commit
    assert [t for e in state.operator_state for t in e["transactions"]] == _prepared(url)
    op.notify_complete(2)
    assert _rows(url) == {1: 10, 2: 2, 3: 3}
    assert _prepared(url) == []
    op.close()


@pytest.mark.timeout(60)
def test_an_epoch_waiting_on_its_own_unresolved_transaction_fails_instead_of_hanging(
        postgres_server):
    """A savepoint barrier (savepoints do not wait for a pending checkpoint) or a second
    concurrent checkpoint reaching the sink before the first one's notification."""
    url = postgres_server.create_database()
    _table(url)
    op = _operator(url)
    op.process([{"_op": "+I", "k": 1, "v": 1}])
    op.snapshot(1)
    op.process([{"_op": "+U", "k": 1, "v": 2}])
    with pytest.raises(SinkTransactionConflictError, match=r"'out'.*checkpoint 1.*key"):
        _bounded(lambda: op.snapshot(2), url)
    op.close()
    # what the failover does: checkpoint 1 completed -> its transaction is committed
    restored = [{"checkpoint_id": 1, "transactions": _prepared(url)}]
    op2 = _operator(url, job_id=op.ctx.job_id, restored=restored)
    assert _rows(url) == {1: 1} and _prepared(url) == []
    op2.close()


@pytest.mark.timeout(60)
def test_disjoint_keys_still_prepare_while_an_earlier_transaction_is_unresolved(postgres_server):
    url = postgres_server.create_database()
    _table(url)
    op = _operator(url)
    op.process([{"_op": "+I", "k": 1, "v": 1}])
    op.snapshot(1)
    op.process([{"_op": "+I", "k": 2, "v": 2}])
    _bounded(lambda: op.snapshot(2), url)
    assert len(_prepared(url)) == 2
    op.notify_complete(2)                # commits both, in order
    assert _rows(url) == {1: 1, 2: 2} and _prepared(url) == []
    op.close()
