"""TRUNCATE recovery into an upsert target (issue 37, item 6) on a real PostgreSQL: the job
fails on the TRUNCATE naming the table; recover_after_truncate drops the slot and empties
the target; the job started without restoring takes a new snapshot and the target equals
the source row for row again (on main the documented recovery left every truncated row in
the target)."""

from __future__ import annotations

import time

import psycopg
import pytest
from cdc_pipelines import items_database
from cdc_upsert_pipelines import (
    cdc_upsert_pipeline,
    create_target,
    dsn,
    make_sink,
    source_rows,
    target_rows,
)
from pipelines import Background

from airflow_checkpoint_provider.engine.connectors.postgres.cdc.recovery import (
    recover_after_truncate,
)
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource


@pytest.fixture
def source(postgres_server):
    yield from items_database(postgres_server, 300, 10)


def _until_equal(url, target, kind, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if target_rows(target) == source_rows(url, kind):
            return
        time.sleep(0.5)
    assert target_rows(target) == source_rows(url, kind)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["postgres", pytest.param("delta", marks=pytest.mark.slow),
                                  pytest.param("iceberg", marks=pytest.mark.slow)])
def test_truncate_recovery_resynchronizes_an_upsert_target(source, postgres_server, tmp_path,
                                                            kind):
    root, name = str(tmp_path), f"cdc-truncate-{kind}"
    target = create_target(kind, root, postgres_server.create_database()
                           if kind == "postgres" else None)
    bg = Background(cdc_upsert_pipeline(root, source, target, name=name))
    bg.wait_running(timeout=90)
    _until_equal(source, target, kind)
    with psycopg.connect(dsn(source), autocommit=True) as conn:
        conn.execute("TRUNCATE items")
        conn.execute("INSERT INTO items SELECT g, g % 7, 'after' FROM generate_series(5001, 5040) g")
    bg.thread.join(90)
    failure = bg.outcome.get("error") or bg.outcome["result"].failure_reason
    assert "TRUNCATE of captured table(s) public.items" in str(failure), bg.outcome
    assert len(target_rows(target)) == 300  # the target still has the truncated rows
    done = recover_after_truncate(PostgresCdcSource(source, ["items"]), name,
                                  [make_sink(target)], metadata_url=f"sqlite:///{root}/meta.db")
    assert any(d.startswith("slot ") for d in done) and any("emptied" in d for d in done), done
    bg = Background(cdc_upsert_pipeline(root, source, target, name=name))
    job = bg.wait_running(timeout=90)
    with psycopg.connect(dsn(source), autocommit=True) as conn:
        conn.execute("UPDATE items SET note = 'streamed' WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 5 = 0")
    _until_equal(source, target, kind)
    assert len(target_rows(target)) == len(source_rows(source, kind)) < 40
    req = bg.request(job.job_id, "CANCEL", {})
    assert req.status == "SUCCEEDED", req.error
    bg.thread.join(60)
