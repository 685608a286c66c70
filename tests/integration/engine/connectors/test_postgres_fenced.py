"""Issue 37 ("also"): a fenced green writing into a PostgreSQL 2PC sink whose table has a
primary key, where blue already committed the same rows (green restores a savepoint of blue
and re-reads what blue wrote after it). Before, the fenced sink COPYed into the target
table: ``UniqueViolation`` at every attempt, the fenced job failed over in a loop until its
restarts ran out; and a row blue had prepared but not yet committed made green's COPY wait
on its lock. Now a fenced 2PC sink writes a private temporary copy of the table (types,
NOT NULL and CHECK constraints validated) and prepares nothing.

Real PostgreSQL (tests/support/pg_server.py), local runner; about 10 s.
"""

from __future__ import annotations

import os

import pytest
from postgres_pipelines import PREPARED_HERE, totals_pipeline
from postgres_pipelines import sql as _query

from airflow_checkpoint_provider.engine import Pipeline
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.errors import JobFailedError

N = 400


def _pipeline(root: str, url: str, name: str, table: str = "t", restarts: int = 2) -> Pipeline:
    return totals_pipeline(url, name=name, checkpoints=os.path.join(root, name, "ckpt"),
                           metadata_db=os.path.join(root, "meta.db"), sinks={"sink": table},
                           parallelism=2, num_records=N, num_keys=10, seed=5, rate=400,
                           interval_ms=300, restarts=restarts, delay_ms=100)


@pytest.mark.timeout(180)
def test_a_fenced_2pc_sink_never_collides_with_rows_blue_committed_or_prepared(
        tmp_path, postgres_server):
    import psycopg

    url = postgres_server.create_database()
    _query(url, "CREATE TABLE t (id bigint PRIMARY KEY, key text NOT NULL, total bigint)")
    blue = _pipeline(str(tmp_path), url, "blue").run()
    assert blue.status == "FINISHED"
    published = sorted(_query(url, "SELECT id, key, total FROM t"))
    assert len(published) == N
    # blue's next epoch, prepared and not yet committed, holds a row green writes too
    _query(url, "DELETE FROM t WHERE id = 7")
    with psycopg.connect(libpq_dsn(url)) as conn:
        conn.execute("INSERT INTO t VALUES (7, 'k', 0)")
        conn.execute("PREPARE TRANSACTION 'blue-epoch'")
    try:
        # before: JobFailedError after its restarts (UniqueViolation on each attempt)
        green = _pipeline(str(tmp_path), url, "green").run(fence_sinks=True)
    except JobFailedError as exc:
        pytest.fail(f"the fenced green failed: {exc}")
    finally:
        prepared = [g for (g,) in _query(url, PREPARED_HERE)]
        _query(url, "ROLLBACK PREPARED 'blue-epoch'")
    assert green.status == "FINISHED" and green.restarts == 0, green
    assert prepared == ["blue-epoch"], "the fenced green prepares nothing"
    assert sorted(_query(url, "SELECT id, key, total FROM t")) == [
        r for r in published if r[0] != 7], "the fenced green published nothing"


@pytest.mark.timeout(120)
def test_a_fenced_2pc_sink_still_validates_rows_against_the_table(tmp_path, postgres_server):
    """The temporary copy keeps the target's NOT NULL / CHECK constraints and types: a row
    the live job could not write fails the fenced run too (what validation runs are for)."""
    url = postgres_server.create_database()
    _query(url, "CREATE TABLE t (id bigint, key text, total bigint CHECK (total < 0))")
    # no restarts: each attempt would fail the same way (it took 3 attempts, ~25 s)
    with pytest.raises(JobFailedError, match="CheckViolation|violates check constraint"):
        _pipeline(str(tmp_path), url, "green", restarts=0).run(fence_sinks=True)
    assert _query(url, "SELECT count(*) FROM t") == [(0,)]
    assert _query(url, PREPARED_HERE) == []
