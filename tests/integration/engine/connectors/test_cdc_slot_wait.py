"""The CDC source's waits for older transactions are bounded and name what they wait for
(issue 37, item 7 follow-up), on a real PostgreSQL: a prepared transaction left by another
tool in another database blocks the replication slot's creation, a session idle in a
transaction blocks a snapshot split's start. Before, both waited without limit (the job
never started); the tests would hang (pytest-timeout fails them)."""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager

import psycopg
import pytest
from cdc_pipelines import cdc_pipeline, dsn, items_database
from pipelines import Background

from airflow_checkpoint_provider.engine import ConfigurationError, JobFailedError
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import (
    PostgresCdcSource,
    SlotWaitTimeoutError,
    job_object_name,
)
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.wait import (
    DEFAULT_SLOT_WAIT_S,
    SLOT_WAIT_ENV,
)


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 50, 10)


@pytest.fixture
def other_db(postgres_server):
    """Another database of the same cluster: what blocks there blocks the CDC job too."""
    url = postgres_server.create_database()
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE audit (x int)")
    return url


@contextmanager
def prepared_transaction(url: str):
    """A prepared transaction (with an xid) as another tool leaves one; rolled back at the
    end if still there (it would block every later CDC test on this server)."""
    gid = f"other-tool-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO audit VALUES (1)")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")
    try:
        yield gid
    finally:
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
                conn.execute(f"ROLLBACK PREPARED '{gid}'")


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _slot_row(url: str, slot: str):
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        return conn.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()


@pytest.mark.timeout(90)
def test_a_prepared_transaction_elsewhere_fails_the_job_within_the_timeout_naming_it(
    db, other_db, tmp_path
):
    """The job (stream + 3 snapshot splits racing to create the slot) fails after
    slot_wait_timeout_s, without restarts, naming the gid, database, owner and age."""
    p = cdc_pipeline(str(tmp_path), db, name="cdc-blocked", slot_wait_timeout_s=3)
    with prepared_transaction(other_db) as gid:
        started = time.monotonic()
        with pytest.raises(JobFailedError) as failed:
            Background(p).result(timeout=75)
        took = time.monotonic() - started
    result = failed.value.result
    assert result.status == "FAILED", result
    assert result.restarts == 0  # a restart would wait for the same transaction
    reason = str(result.failure_reason)
    assert "SlotWaitTimeoutError" in reason, reason
    assert (
        f"prepared transaction gid {gid!r} (database {_database(other_db)}, owner postgres, "
        "prepared " in reason
    ), reason
    assert "slot_wait_timeout_s=3" in reason and "ROLLBACK PREPARED" in reason, reason
    assert took < 60, f"the job took {took:.0f} s to fail with a 3 s limit"
    assert _slot_row(db, job_object_name("cdc-blocked")) is None  # no half-created slot left


@pytest.mark.timeout(120)
def test_a_prepared_transaction_rolled_back_in_time_lets_the_job_start(db, other_db, tmp_path):
    p = cdc_pipeline(str(tmp_path), db, name="cdc-unblocked", slot_wait_timeout_s=60)
    slot = job_object_name("cdc-unblocked")
    with prepared_transaction(other_db) as gid:
        bg = Background(p)
        deadline = time.monotonic() + 60
        while _slot_row(db, slot) is None:  # the creation is waiting (not ready)
            assert time.monotonic() < deadline and "error" not in bg.outcome, bg.outcome
            time.sleep(0.1)
        time.sleep(1.0)
        assert _slot_row(db, slot)[0] is None, "the slot became ready despite the blocker"
        with psycopg.connect(dsn(other_db), autocommit=True) as conn:
            conn.execute(f"ROLLBACK PREPARED '{gid}'")
    job = bg.wait_running(timeout=60)
    assert _slot_row(db, slot)[0] is not None
    bg.request(job.job_id, "CANCEL")
    assert bg.result(timeout=60).status == "CANCELED"


@pytest.mark.timeout(60)
def test_a_session_idle_in_a_transaction_fails_the_snapshot_start_naming_it(db, other_db):
    """The slot exists; a session of another database opened a write transaction before
    the snapshot split started: the split's start waits for it, then fails naming the
    session's pid, database, application_name, state and age."""
    src = PostgresCdcSource(db, ["items"], snapshot_splits=1, buckets=4, slot_wait_timeout_s=2)
    ctx = SourceContext("job", "cdc-idle", "cdc", 0, 1, 0)
    stream = src.open_split("stream", None, ctx)  # creates the slot (nothing blocks yet)
    blocker = psycopg.connect(dsn(other_db), autocommit=True, application_name="batch-loader")
    try:
        blocker.execute("BEGIN")
        blocker.execute("INSERT INTO audit VALUES (1)")
        pid = blocker.info.backend_pid
        with psycopg.connect(dsn(other_db), autocommit=True) as conn:  # later ones commit
            conn.execute("INSERT INTO audit VALUES (2)")
        split = src.open_split("snapshot-0", None, ctx)
        try:
            started = time.monotonic()
            with pytest.raises(SlotWaitTimeoutError) as err:
                while time.monotonic() - started < 30:
                    assert split.read_batch(100) == []  # nothing before the snapshot's start
                    time.sleep(0.05)
            assert time.monotonic() - started < 10
        finally:
            split.close()
    finally:
        blocker.close()
        stream.close()
    msg = str(err.value)
    assert (
        f"session pid {pid} (database {_database(other_db)}, user postgres, "
        "application_name 'batch-loader', state 'idle in transaction', "
        "transaction open "
    ) in msg, msg
    assert "snapshot's start waited" in msg and f"pg_terminate_backend({pid})" in msg, msg
    assert [b.pid for b in err.value.blockers] == [pid]


def test_the_timeout_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(SLOT_WAIT_ENV, raising=False)
    url = "postgresql://u@127.0.0.1:1/db"
    assert PostgresCdcSource(url, ["t"]).slot_wait_timeout_s == DEFAULT_SLOT_WAIT_S
    monkeypatch.setenv(SLOT_WAIT_ENV, "12.5")
    assert PostgresCdcSource(url, ["t"]).slot_wait_timeout_s == 12.5
    assert PostgresCdcSource(url, ["t"], slot_wait_timeout_s=0).slot_wait_timeout_s == 0
    monkeypatch.setenv(SLOT_WAIT_ENV, "soon")
    with pytest.raises(ConfigurationError, match=SLOT_WAIT_ENV):
        PostgresCdcSource(url, ["t"])
    with pytest.raises(ConfigurationError, match="slot_wait_timeout_s=-1"):
        PostgresCdcSource(url, ["t"], slot_wait_timeout_s=-1)


@pytest.mark.timeout(90)
def test_a_publication_created_by_a_concurrent_split_is_used_not_an_error(db):
    """Two splits of a first start create the publication at the same moment: the second
    waits on PostgreSQL's catalog index for the first, then finds the name taken, which
    PostgreSQL reports as a unique violation, not as a duplicate object. It must use the
    publication the other split made (before, the job failed that attempt and restarted)."""
    import threading

    src = PostgresCdcSource(db, ["items"], slot_wait_timeout_s=30)
    ctx = SourceContext("job", "cdc-race", "cdc", 0, 2, 0)
    slot, pub = src.names("cdc-race")
    first = psycopg.connect(dsn(db), autocommit=True)
    failures: list[BaseException] = []
    try:
        first.execute("BEGIN")
        first.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE items')

        def second() -> None:
            try:
                with src.connect() as conn:
                    src.prepare(conn, ctx)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        t = threading.Thread(target=second)
        t.start()
        time.sleep(1.0)  # the second split waits on the first one's uncommitted row
        first.execute("COMMIT")
        t.join(60)
        assert not t.is_alive()
    finally:
        first.close()
    assert failures == []
    assert _slot_row(db, slot) is not None  # dropped by the fixture (items_database)
