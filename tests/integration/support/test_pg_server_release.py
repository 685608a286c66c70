"""What a test leaves in its PostgreSQL databases is released after it
(tests/support/pg_server.py, ``PostgresServer.release``, called by tests/conftest.py): an open
transaction, a prepared transaction and a replication slot still held by its walsender.

Each is server-wide in effect: logical slot creation anywhere on the server waits for every
open or prepared transaction, and a slot's name is the server's. The CI of stop 65 failed on
a slot a CDC test left behind, found by the next test of the same job name on that worker."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import make_conninfo


def _server_wide(conn, name: str, pids: set[int]) -> dict:
    """What is left in database ``name``; ``sessions``: how many of ``pids`` still run (a
    connection closed just before may linger a moment; an autovacuum worker may come)."""
    return {
        "sessions": conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                 "AND pid = ANY(%s)", (name, list(pids))).fetchone()[0],
        "prepared": conn.execute("SELECT count(*) FROM pg_prepared_xacts WHERE database = %s",
                                 (name,)).fetchone()[0],
        "slots": conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s",
                              (name,)).fetchone()[0],
        "held": conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s "
                             "AND active", (name,)).fetchone()[0],
    }


@pytest.mark.timeout(60)
def test_release_ends_sessions_prepared_transactions_and_held_slots(postgres_server):
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.pgoutput import (
        ReplicationStream,
    )

    url = postgres_server.create_database()
    name = url.rsplit("/", 1)[1]
    dsn = f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k int)")
        conn.execute("CREATE PUBLICATION left_pub FOR TABLE t")
        lsn = conn.execute("SELECT lsn::text FROM pg_create_logical_replication_slot("
                           "'left_slot', 'pgoutput')").fetchone()[0]
    hi, lo = lsn.split("/")
    holder = ReplicationStream(make_conninfo(dsn, replication="database"), "left_slot",
                               "left_pub", (int(hi, 16) << 32) | int(lo, 16), 0)
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("PREPARE TRANSACTION 'left-behind'")
    idle = psycopg.connect(dsn)
    idle.execute("INSERT INTO t VALUES (2)")  # idle in transaction, never ended
    pids = {idle.info.backend_pid, holder.backend_pid}
    admin = f"postgresql://postgres@127.0.0.1:{postgres_server.port}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        assert _server_wide(conn, name, pids) == {"sessions": 2, "prepared": 1, "slots": 1,
                                                  "held": 1}
        released = postgres_server.release([name])
        assert _server_wide(conn, name, pids) == {"sessions": 0, "prepared": 0, "slots": 0,
                                                  "held": 0}, conn.execute(
            "SELECT pid, backend_type, state, query FROM pg_stat_activity WHERE datname = %s",
            (name,)).fetchall()
    assert f"{name}: prepared transaction left-behind" in released
    assert f"{name}: replication slot left_slot" in released
    assert {f"{name}: session {pid}" for pid in pids} <= set(released)
    idle.close()
    holder.close()
