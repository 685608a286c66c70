"""Replication slot safety of PostgresCdcSource (issue 37, items 1 and 5) on a real
PostgreSQL (wal_level=logical): default names that cannot collide, slot ownership in the
metadata DB, the slot's confirmed position checked on every (re)connect, a dropped slot or
publication failing the job, lag unknown (never 0) while not connected."""

from __future__ import annotations

import time

import psycopg
import pytest
from cdc_pipelines import cdc_pipeline, dsn, items_database
from pipelines import Background

from airflow_checkpoint_provider.engine import ConfigurationError
from airflow_checkpoint_provider.engine.catalog import SlotInUseError
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.rows import CdcError
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.slots import SlotAheadError
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import (
    PostgresCdcSource,
    check_name,
    job_object_name,
)


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 50, 10)


def _ctx(name: str) -> SourceContext:
    return SourceContext("job", name, "cdc", 0, 1, 0)


def test_default_names_cannot_collide_and_fit_postgres_identifiers():
    pairs = [("orders-eu", "Orders-EU"),
             ("x" * 60 + "-production-blue", "x" * 60 + "-production-green")]
    for a, b in pairs:
        na, nb = job_object_name(a), job_object_name(b)
        assert na != nb, (a, b)
        for n in (na, nb):
            assert len(n.encode()) <= 63 and n == n.lower()
            assert check_name(n, "slot") == n
    assert job_object_name("orders-eu") == job_object_name("orders-eu")  # stable
    with pytest.raises(ConfigurationError, match="slot='Orders'.*lower case"):
        check_name("Orders", "slot")
    with pytest.raises(ConfigurationError, match="at most 63"):
        check_name("a" * 64, "slot")


def _wait(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _confirmed_text(url, slot):
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE "
                           "slot_name = %s", (slot,)).fetchone()
    return row[0] if row else None


def _slot_active(url, slot):
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
    return row[0] if row else None


def _kill_walsender(url, slot):
    pid = _slot_active(url, slot)
    assert pid is not None, "the reader holds no walsender"
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    _wait(lambda: _slot_active(url, slot) is None, what="the walsender to end")


def _read_until(reader, n, timeout=20.0):
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(reader.read_batch(100) or [])
    return out


@pytest.mark.timeout(90)
def test_a_slot_confirmed_past_the_reader_on_reconnect_fails_instead_of_skipping(db):
    """Another reader (a second job after a walsender kill) acknowledges past our position
    while we are disconnected: the server would start at its confirmed position and skip
    the changes in between; the reader must fail (on main it reconnected and skipped)."""
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    slot = job_object_name("cdc-ahead")
    reader = src.open_split("stream", None, _ctx("cdc-ahead"))
    try:
        assert reader.lag() == {"lag_bytes": None, "lag_seconds": None}  # not connected yet
        reader.read_batch(100)
        with psycopg.connect(dsn(db), autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 0, 'skip' FROM generate_series(1001, 1010) g")
        _kill_walsender(db, slot)
        with psycopg.connect(dsn(db), autocommit=True) as conn:  # the other reader's ack
            conn.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (slot,))
        with pytest.raises(SlotAheadError, match=f"slot {slot!r} was confirmed up to .* past "
                           "this job's position"):
            _read_until(reader, 10)
    finally:
        reader.close()


@pytest.mark.timeout(90)
def test_a_reconnect_at_our_own_position_resumes_without_loss(db):
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    reader = src.open_split("stream", None, _ctx("cdc-reconnect"))
    try:
        reader.read_batch(100)
        with psycopg.connect(dsn(db), autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 0, 'x' FROM generate_series(2001, 2010) g")
        _kill_walsender(db, job_object_name("cdc-reconnect"))
        rows = _read_until(reader, 10)
        assert sorted(r["id"] for r in rows) == list(range(2001, 2011))
        assert reader.lag()["lag_bytes"] is not None
    finally:
        reader.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("dropped", ["slot", "publication"])
def test_a_slot_or_publication_dropped_while_streaming_fails_at_once_naming_it(db, dropped):
    """A dropped slot fails the read at once (within 10 s) and the lag becomes unknown (never
    0); a dropped publication fails the next read naming it."""
    job = f"cdc-dropped-{dropped}"
    src = PostgresCdcSource(db, ["items"], snapshot=False)
    name = job_object_name(job)  # the slot's and the publication's default name
    reader = src.open_split("stream", None, _ctx(job))
    try:
        reader.read_batch(100)
        with psycopg.connect(dsn(db), autocommit=True) as conn:
            if dropped == "slot":
                _kill_walsender(db, name)
                conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
            else:
                conn.execute(f"DROP PUBLICATION {name}")
                conn.execute("INSERT INTO items VALUES (3001, 0, 'lost')")
        t0 = time.monotonic()
        with pytest.raises(CdcError, match=f"{dropped} {name!r} was dropped"):
            _read_until(reader, 1, timeout=30)
        if dropped == "slot":
            assert time.monotonic() - t0 < 10
            assert reader.lag() == {"lag_bytes": None, "lag_seconds": None}  # unknown, never 0
    finally:
        reader.close()


@pytest.mark.timeout(180)
def test_a_second_job_on_an_owned_slot_is_refused_before_it_starts(db, tmp_path):
    a = Background(cdc_pipeline(str(tmp_path / "a"), db, name="cdc-owner-a", snapshot=False,
                                slot="shared_slot"))
    job = a.wait_running(timeout=90)
    try:
        b = cdc_pipeline(str(tmp_path / "a"), db, name="cdc-owner-b", snapshot=False,
                         slot="shared_slot")
        with pytest.raises(SlotInUseError, match="'shared_slot' .* belongs to job cdc-owner-a"):
            b.run()
    finally:
        req = a.request(job.job_id, "CANCEL", {})
        assert req.status == "SUCCEEDED", req.error
        a.thread.join(60)
    # the owner's next job (same name) keeps the slot
    again = Background(cdc_pipeline(str(tmp_path / "a"), db, name="cdc-owner-a", snapshot=False,
                                    slot="shared_slot"))
    job = again.wait_running(timeout=90)
    again.request(job.job_id, "CANCEL", {})
    again.thread.join(60)
