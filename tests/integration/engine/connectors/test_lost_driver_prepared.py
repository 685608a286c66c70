"""A driver SIGKILLed while its first checkpoint was being taken leaves the PostgreSQL
transactions its sinks prepared at that barrier (found by the chaos matrix:
``cdc-postgres-agg/local/rocksdb/unaligned`` seed 1001). The job is LOST, no end was
recorded, so nothing rolled them back; the next job of the name (``restore="latest"``, no
completed checkpoint to restore) started empty and its CDC source waited forever for that
transaction, older than its new replication slot: the job never caught up.

Now a job's start rolls back what LOST predecessors prepared for checkpoints after their
newest completed one (what a completed checkpoint names stays: a restore commits it).
Real PostgreSQL (tests/support/pg_server.py), local runner, ~15 s.
"""

from __future__ import annotations

import os

import pytest
from postgres_pipelines import PREPARED_HERE

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.connectors.postgres.sink import (
    PostgresSink,
    _uid_hash,
    rollback_prepared,
)
from airflow_checkpoint_provider.engine.connectors.sink_names import gid

NAME = "lost-driver"


def _prepared(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        return {g for (g,) in conn.execute(PREPARED_HERE).fetchall()}


@pytest.mark.timeout(180)
def test_a_new_job_rolls_back_what_a_lost_driver_prepared_for_a_checkpoint_that_never_completed(
    tmp_path, postgres_server
):
    import psycopg

    url = postgres_server.create_database()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint, key text, value bigint)")
    db = "sqlite:///" + os.path.join(tmp_path, "meta.db")
    lost, older = "a" * 32, "b" * 32
    with MetadataStore(db) as store:
        # two drivers died in a row (the older one too during its first checkpoint)
        for job_id in (older, lost):
            store.create_job(job_id=job_id, job_name=NAME, parallelism=1)
            store.set_job_status(job_id, "RUNNING")
            store.mark_lost_jobs(NAME, timeout=0)
        assert {j.status for j in store.list_jobs(NAME)} == {"LOST"}
    gids = [gid(lost, _uid_hash("sink"), 0, 1), gid(older, _uid_hash("sink"), 0, 1)]
    for n, g in enumerate(gids):
        with psycopg.connect(libpq_dsn(url)) as conn:
            conn.execute(f"INSERT INTO t VALUES (-{n + 1}, 'ghost', 0)")
            conn.execute(f"PREPARE TRANSACTION '{g}'")
    try:
        p = Pipeline(
            NAME,
            checkpoint=CheckpointConfig(interval_ms=200, directory=os.path.join(tmp_path, "ckpt")),
            restart_strategy=RestartStrategy.fixed_delay(attempts=1, delay_ms=0),
            metadata_url=db,
        )
        p.source(GeneratorSource(300, num_keys=5, seed=1), uid="gen", parallelism=1).sink(
            PostgresSink(url, "t", ["id", "key", "value"]), uid="sink"
        )
        result = p.run("local", restore="latest")
        assert result.status == "FINISHED", result.failure_reason
        left = _prepared(url)
        assert not set(gids) & left, "what the LOST drivers prepared stayed prepared"
        with psycopg.connect(libpq_dsn(url)) as conn:
            rows = conn.execute("SELECT count(*), min(id) FROM t").fetchone()
        assert rows == (300, 0), "the job's rows, not the ghost"
    finally:
        rollback_prepared(url, gids)
