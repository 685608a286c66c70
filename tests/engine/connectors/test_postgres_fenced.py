"""Issue 37 ("also"): a fenced green writing into a PostgreSQL 2PC sink whose table has a
primary key, where blue already committed the same rows (green restores a savepoint of blue
and re-reads what blue wrote after it). Before, the fenced sink COPYed into the target
table: ``UniqueViolation`` at every attempt, the fenced job failed over in a loop until its
restarts ran out; and a row blue had prepared but not yet committed made green's COPY wait
on its lock. Now a fenced 2PC sink writes a private temporary copy of the table (types,
NOT NULL and CHECK constraints validated) and prepares nothing.

Real PostgreSQL (tests/pg_server.py), local runner; about 10 s.
"""

from __future__ import annotations

import os

import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.postgres import PostgresSink, _dsn
from airflow_checkpoint_provider.engine.errors import JobFailedError

N = 400


class Total(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.value_state("total", 0)

    def process_element(self, record, ctx):
        t = self.total.value() + record["value"]
        self.total.update(t)
        return {"id": record["id"], "key": ctx.current_key, "total": t}


def _pipeline(root: str, url: str, name: str, table: str = "t") -> Pipeline:
    p = Pipeline(name, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=300,
                                             directory=os.path.join(root, name, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=2, delay_ms=100),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(N, num_keys=10, seed=5, splits=2, records_per_second=400),
              uid="gen", parallelism=2)
     .key_by("key").process(Total(), uid="total", parallelism=2)
     .sink(PostgresSink(url, table, ["id", "key", "total"]), uid="sink"))
    return p


def _query(url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


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
    with psycopg.connect(_dsn(url)) as conn:
        conn.execute("INSERT INTO t VALUES (7, 'k', 0)")
        conn.execute("PREPARE TRANSACTION 'blue-epoch'")
    try:
        # before: JobFailedError after its restarts (UniqueViolation on each attempt)
        green = _pipeline(str(tmp_path), url, "green").run(fence_sinks=True)
    except JobFailedError as exc:
        pytest.fail(f"the fenced green failed: {exc}")
    finally:
        prepared = [g for (g,) in _query(url, "SELECT gid FROM pg_prepared_xacts")]
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
    with pytest.raises(JobFailedError, match="CheckViolation|violates check constraint"):
        _pipeline(str(tmp_path), url, "green").run(fence_sinks=True)
    assert _query(url, "SELECT count(*) FROM t") == [(0,)]
    assert _query(url, "SELECT count(*) FROM pg_prepared_xacts") == [(0,)]
