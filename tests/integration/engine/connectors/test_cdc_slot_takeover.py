"""A CDC stream split whose replication slot is still held by the walsender of a superseded
run connects at once (it ends that walsender), on a real PostgreSQL; a slot held by another
reader fails the job at once naming the slot and the PID.

The holder here is a replication connection that stays open and is never read again: what
the server sees of a run whose client vanished without closing its connection (a killed
host, a half-open TCP connection, a frozen process). The server keeps such a walsender until
``wal_sender_timeout`` (60 s by default). Before the fix the new run's stream split retried
``START_REPLICATION`` 8 times in ~27 s ("replication slot ... is active for PID ..."), then
failed the attempt; the job restarted and retried again, RUNNING without progress. Each test
takes a few seconds."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest
from cdc_pipelines import dsn, items_database

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.pgoutput import ReplicationStream
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.slots import slot_state
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.takeover import (
    SlotHeldError,
    application_name,
    parse_application_name,
)

#: how long a connect may take on a loaded machine; the old code needed ~27 s, then failed
CONNECT_S = 8.0


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 20, 5)


def _job(url: str) -> str:
    """The job name of a test: its own per database, since the default slot name derives
    from the job name and a slot is cluster-wide (tests run side by side on one server)."""
    return f"cdc-takeover-{url.rsplit('/', 1)[1]}"


def _ctx(url: str, job_id: str, attempt: int) -> SourceContext:
    return SourceContext(job_id=job_id, job_name=_job(url), operator_uid="cdc", subtask_index=0,
                         parallelism=1, attempt=attempt)


def _holder(url: str, slot: str, app: str) -> ReplicationStream:
    """A replication connection holding ``slot``, never read again (a vanished client)."""
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(dsn(url), autocommit=True) as conn:
        lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    hi, lo = lsn.split("/")
    conninfo = make_conninfo(dsn(url), replication="database", application_name=app)
    return ReplicationStream(conninfo, slot, slot, (int(hi, 16) << 32) | int(lo, 16), 0)


def _connect(reader, seconds: float) -> float:
    """Poll the stream split until it holds a replication connection; the time it took."""
    started = time.monotonic()
    while reader.stream is None:
        assert time.monotonic() - started < seconds, (
            f"the stream split did not connect within {seconds:.0f} s")
        reader.read_batch(100)
    return time.monotonic() - started


def _running(url: str, pid: int) -> bool:
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone() is not None


def _slot_pid(url: str, slot: str) -> int | None:
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        state = slot_state(conn, slot)
    assert state is not None
    return state[1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("previous", ["older attempt", "restored-from job", "older version"])
def test_a_slot_held_by_a_superseded_run_is_taken_over_at_once(db, previous, caplog):
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    slot, _ = src.names(_job(db))
    job, attempt = "0123456789abcdef0123456789abcdef", 1
    held_by = {"older attempt": application_name(job, 0),
               "restored-from job": application_name("f" * 32, 3),
               "older version": "ckpt-cdc"}[previous]
    first = src.open_split("stream", None, _ctx(db, job, 0))  # creates the slot
    first.close()
    stale = _holder(db, slot, held_by)
    reader = src.open_split("stream", None, _ctx(db, job, attempt))
    try:
        assert _slot_pid(db, slot) == stale.backend_pid
        with caplog.at_level(logging.WARNING):
            took = _connect(reader, CONNECT_S)
        assert _slot_pid(db, slot) == reader.stream.backend_pid
        assert not _running(db, stale.backend_pid), "the superseded walsender still runs"
        said = caplog.text
        assert f"replication slot {slot} is still held by PID {stale.backend_pid}" in said
        assert repr(held_by) in said
        print(f"{previous}: connected after {took:.2f} s")
    finally:
        reader.close()
        stale.close()


@pytest.mark.timeout(60)
def test_the_current_attempt_does_not_end_a_newer_attempts_walsender(db):
    """A walsender of a *newer* attempt of the same job is not stale: left alone (the split
    retries as before; a superseded attempt must not take the slot from its successor)."""
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    slot, _ = src.names(_job(db))
    job = "0123456789abcdef0123456789abcdef"
    src.open_split("stream", None, _ctx(db, job, 0)).close()
    newer = _holder(db, slot, application_name(job, 5))
    reader = src.open_split("stream", None, _ctx(db, job, 4))
    try:
        assert reader.read_batch(100) == []
        assert reader.stream is None and reader.failures == 1
        assert _running(db, newer.backend_pid) and _slot_pid(db, slot) == newer.backend_pid
    finally:
        reader.close()
        newer.close()


@pytest.mark.timeout(60)
def test_a_slot_held_by_another_reader_fails_at_once_naming_slot_and_pid(db):
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    slot, _ = src.names(_job(db))
    src.open_split("stream", None, _ctx(db, "a" * 32, 0)).close()
    other = _holder(db, slot, "pg_recvlogical")
    reader = src.open_split("stream", None, _ctx(db, "a" * 32, 1))
    try:
        started = time.monotonic()
        with pytest.raises(SlotHeldError) as err:
            reader.read_batch(100)
        assert time.monotonic() - started < CONNECT_S
        msg = str(err.value)
        assert f"replication slot {slot!r} is held by PID {other.backend_pid}" in msg
        assert "'pg_recvlogical'" in msg and f"pg_terminate_backend({other.backend_pid})" in msg
        assert err.value.holder.pid == other.backend_pid
        assert _running(db, other.backend_pid), "another tool's reader must not be ended"
    finally:
        reader.close()
        other.close()


def test_run_names_fit_postgresql_and_parse_back():
    name = application_name("0123456789abcdef0123456789abcdef", 12)
    assert len(name.encode()) <= 63
    assert parse_application_name(name) == ("0123456789abcdef0123456789abcdef", 12)
    assert parse_application_name("ckpt-cdc") == (None, None)
    assert parse_application_name("pg_recvlogical") is None
    assert parse_application_name(None) is None
    assert parse_application_name("ckpt-cdc x") is None
