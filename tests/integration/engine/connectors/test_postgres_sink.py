"""PostgresSink on the test PostgreSQL server: exactly-once through prepared transactions
under seeded failures (exceptions, SIGKILLed slots, a failure between pre-commit and
commit), the idempotent upsert mode, and refusals."""

import psycopg
import pytest
from pipelines import (
    FaultPlan,
    check_exactly_once_rows,
    expected_running_sums,
    open_sink_operator,
    running_sum_pipeline,
)
from postgres_pipelines import PREPARED_HERE

from airflow_checkpoint_provider.engine import ConfigurationError, CorruptCheckpointError
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

N, KEYS, SEED = 12_000, 40, 7
pytestmark = pytest.mark.slow


@pytest.fixture
def db(postgres_server):
    url = postgres_server.create_database()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE sums (id bigint, key text, count bigint, sum bigint)")
        conn.execute("CREATE TABLE latest (key text PRIMARY KEY, count bigint, sum bigint)")
    return url


def rows(url: str, query: str) -> list[dict]:
    with psycopg.connect(libpq_dsn(url)) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(query)
        return cur.fetchall()


FAULTS = [("record", 1_500), ("kill", 5_000), ("notify", 3), ("snapshot", 5), ("kill", 9_500)]


@pytest.mark.timeout(300)
def test_prepared_transactions_commit_every_row_exactly_once_under_failures(workdir, db):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    sink = PostgresSink(db, "sums", ["id", "key", "count", "sum"])
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, rate=4_000,
                             faults=faults, interval_ms=150, sink=sink)
    result = p.run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    check_exactly_once_rows(rows(db, "SELECT id, key, count, sum FROM sums"),
                            expected_running_sums(N, KEYS, SEED))
    assert rows(db, PREPARED_HERE) == [], "nothing left prepared"


@pytest.mark.timeout(300)
def test_upsert_mode_converges_to_the_exact_totals(workdir, db):
    faults = FaultPlan(str(workdir / "faults"), [("record", 2_000), ("kill", 7_000)])
    sink = PostgresSink(db, "latest", ["key", "count", "sum"], mode="upsert", key=["key"])
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, rate=4_000,
                             faults=faults, interval_ms=150, sink=sink, keyed_parallelism=1)
    assert p.run().status == "FINISHED" and len(faults.fired()) == 2
    expected = expected_running_sums(N, KEYS, SEED)
    got = {r["key"]: (r["count"], r["sum"]) for r in rows(db, "SELECT * FROM latest")}
    assert got == {k: (len(v["ids"]), v["sum"]) for k, v in expected.items()}


def test_bad_configuration_and_restored_transactions_are_refused():
    with pytest.raises(ConfigurationError, match="needs key="):
        PostgresSink("postgresql://x/y", "t", mode="upsert")
    with pytest.raises(ConfigurationError, match="is not 'table' or 'schema.table'"):
        PostgresSink("postgresql://x/y", "a.b.c")
    sink = PostgresSink("postgresql://x/y", "t")
    sink.check_restored_transactions(["ckpt-job1-0123456789ab-0-7"], location="chk-7")
    with pytest.raises(CorruptCheckpointError, match="not a prepared transaction id"):
        sink.check_restored_transactions(["x'; DROP TABLE t; --"], location="chk-7")


def _sink_operator(url: str, job_id: str, restored: list | None = None):
    """The 2PC sink operator of subtask 0 of job ``job_id`` on table ``latest``."""
    return open_sink_operator(PostgresSink(url, "latest", ["key", "count", "sum"]),
                              job_id=job_id, job_name="moved", restored=restored)


@pytest.mark.timeout(60)
def test_a_restore_into_another_database_than_its_transactions_fails_naming_it(postgres_server):
    """A checkpoint's prepared transactions can be committed only from the database that
    prepared them. Restored with a sink URL that names another database of the same server,
    the sink must not take them as committed (the epoch's rows would never be published):
    it fails naming both databases, and a restore with the first URL still commits them."""
    first, second = postgres_server.create_database(), postgres_server.create_database()
    for url in (first, second):
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE latest (key text, count bigint, sum bigint)")
    job = "a" * 32
    op = _sink_operator(first, job)
    op.process([{"key": "k", "count": 1, "sum": 5}])
    state = op.snapshot(1).operator_state  # prepared; checkpoint 1 completes, not yet notified
    op.close()
    [gid] = [t for e in state for t in e["transactions"]]
    with pytest.raises(ConfigurationError) as err:
        _sink_operator(second, job, restored=state)
    message = str(err.value)
    for part in (gid, first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]):
        assert part in message, message
    assert rows(second, "SELECT * FROM latest") == []
    _sink_operator(first, job, restored=state).close()
    assert rows(first, "SELECT key, count, sum FROM latest") == [
        {"key": "k", "count": 1, "sum": 5}]
    assert rows(first, PREPARED_HERE) == []
