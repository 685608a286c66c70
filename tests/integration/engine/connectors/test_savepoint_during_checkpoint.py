"""A savepoint requested while a checkpoint is pending, into the PostgreSQL upsert sink.

Checkpoint N's prepared transaction holds the row locks of every key of its epoch until the
notification of N commits it. A savepoint barrier that reached the sink before that
notification made the sink's next epoch change the same keys: it hung on its own locks,
later it failed over with ``SinkTransactionConflictError`` and the savepoint failed. The
coordinator now triggers a savepoint only once no checkpoint is pending (and starts no
periodic checkpoint while one waits), so the savepoint completes and the job runs on."""

from __future__ import annotations

import time

import psycopg
import pytest
from pipelines import Background, expected_running_sums
from postgres_pipelines import PREPARED_HERE, SlowPrepareSink, running_sum_upsert_pipeline

from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

pytestmark = pytest.mark.slow
N, KEYS = 6_000, 5


def _rows(url: str) -> dict:
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        assert conn.execute(PREPARED_HERE).fetchall() == []
        return {k: (c, s) for k, c, s in conn.execute('SELECT "key", "count", "sum" FROM t')}


def _wait_pending(store, job_id: str, timeout: float = 30.0) -> int:
    """The id of a checkpoint that is PENDING right now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = [c for c in store.list_checkpoints(job_id) if c.status == "PENDING"]
        if pending:
            return pending[0].checkpoint_id
        time.sleep(0.01)
    raise AssertionError("no checkpoint became pending")


@pytest.mark.timeout(300)
def test_a_savepoint_requested_while_a_checkpoint_is_pending_waits_for_it(workdir,
                                                                        postgres_server):
    url = postgres_server.create_database()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute('CREATE TABLE t ("key" text PRIMARY KEY, "count" bigint, "sum" bigint)')
    # every checkpoint stays pending >= 0.6 s in the sink's pre-commit, and the next one is
    # triggered 50 ms after: a request claimed (every 0.25 s) almost always finds one pending;
    # 5 keys at 500 records/s: every epoch changes every key (the locks of the pending one)
    sink = SlowPrepareSink(url, "t", ["key", "count", "sum"], mode="upsert", key=["key"],
                           delay_s=0.6)
    bg = Background(running_sum_upsert_pipeline(str(workdir), sink, num_records=N,
                                                num_keys=KEYS, rate=500))
    job = bg.wait_running(min_checkpoints=1)
    savepoints = []
    for _ in range(2):
        pending = _wait_pending(bg.store, job.job_id)
        req = bg.request(job.job_id, "SAVEPOINT", {})
        assert req.status == "SUCCEEDED", req.error
        assert req.result["checkpoint_id"] > pending
        savepoints.append(req.result["checkpoint_id"])
    # the job keeps running: a later checkpoint completes, nothing failed over
    deadline = time.monotonic() + 60
    while not any(c.checkpoint_id > savepoints[-1] and c.status in ("COMPLETED", "SUBSUMED")
                  for c in bg.store.list_checkpoints(job.job_id)):
        assert time.monotonic() < deadline, "no checkpoint after the savepoint"
        time.sleep(0.05)
    assert bg.store.get_job(job.job_id).status == "RUNNING"
    result = bg.result(timeout=120)
    assert result.status == "FINISHED" and result.restarts == 0, result.failure_reason
    # no savepoint overlapped a checkpoint (it was triggered after the previous one ended)
    rows = sorted(bg.store.list_checkpoints(job.job_id), key=lambda c: c.checkpoint_id)
    for sp in savepoints:
        before = next(c for c in rows if c.checkpoint_id == sp - 1)
        this = next(c for c in rows if c.checkpoint_id == sp)
        assert this.kind == "SAVEPOINT" and before.complete_time is not None
        assert before.complete_time <= this.trigger_time
    expected = {k: (len(v["ids"]), v["sum"]) for k, v in expected_running_sums(N, KEYS, 7).items()}
    assert _rows(url) == expected
