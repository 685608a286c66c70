"""Issue 36, items 2 and 4: PostgreSQL prepared transactions are a server resource
(``max_prepared_transactions``, 100 on the test server); no job may keep them without bound.

* A fenced job (a blue-green validation run) never publishes: two 2PC sinks at parallelism
  3 with 1 s checkpoints prepared 6 transactions a second and exhausted the server in ~17 s
  before; now a fenced 2PC sink writes a temporary copy of its table and prepares nothing.
* A cancelled job rolls back what it prepared for checkpoints that never completed (before,
  ``ckpt~<job>~...~43`` stayed prepared after ``ckpt cancel``); ``ckpt leftovers`` reports
  what ended jobs left and ``--abort`` rolls the never-completed ones back.

Real PostgreSQL (tests/support/pg_server.py), local runner. ~40 s for the first test, seconds for
the others.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner
from pipelines import Background
from postgres_pipelines import sql, totals_pipeline

from airflow_checkpoint_provider.engine import Pipeline
from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

#: the old code prepared 6 transactions per 1 s checkpoint and never rolled one back: past
#: the bound of 18 after 3 checkpoints, and the window asks for at least 20 // 3 = 6 (was
#: 40 s, which only added checkpoints that prove nothing more)
WINDOW_S = 20


def _pipeline(root: str, url: str, *, name: str, interval_ms: int = 1000,
              num_records: int | None = None, rate: float | None = 300) -> Pipeline:
    return totals_pipeline(url, name=name, checkpoints=os.path.join(root, "ckpt"),
                           metadata_db=os.path.join(root, "meta.db"),
                           sinks={"sink-a": "a", "sink-b": "b"}, parallelism=3,
                           num_records=num_records, num_keys=30, seed=3, rate=rate,
                           interval_ms=interval_ms, restarts=3, delay_ms=200)


def _db(postgres_server) -> str:
    url = postgres_server.create_database()
    for t in ("a", "b"):
        sql(url, f"CREATE TABLE {t} (id bigint, key text, total bigint)")
    return url


def _prepared(url: str, job_id: str | None = None) -> list[str]:
    """The prepared transactions of ``url``'s database (the server's hold other tests')."""
    gids = [g for (g,) in sql(url, "SELECT gid FROM pg_prepared_xacts "
                                   "WHERE database = current_database()")]
    return [g for g in gids if job_id is None or job_id in g]


@pytest.mark.timeout(240)
def test_a_fenced_job_keeps_its_prepared_transactions_bounded(tmp_path, postgres_server):
    url = _db(postgres_server)
    bg = Background(_pipeline(str(tmp_path), url, name="fenced-green"), fence_sinks=True)
    job = bg.wait_running(min_checkpoints=1, timeout=90)
    samples, deadline = [], time.monotonic() + WINDOW_S
    while time.monotonic() < deadline:
        samples.append(len(_prepared(url, job.job_id)))
        time.sleep(0.25)
    rec = bg.store.get_job(job.job_id)
    done = [c for c in bg.store.list_checkpoints(job.job_id) if c.status in ("COMPLETED",
                                                                              "SUBSUMED")]
    cancel = bg.request(job.job_id, "CANCEL")
    assert cancel.status == "SUCCEEDED", cancel.error
    result = bg.result()
    print(f"fenced job, 2 sinks x 3 subtasks, 1 s checkpoints, {WINDOW_S} s: "
          f"{len(done)} checkpoints, prepared transactions max {max(samples)}, "
          f"restarts {result.restarts}")
    assert len(done) >= WINDOW_S // 3, "it checkpointed all along"
    # a fenced 2PC sink writes a temporary copy of the table and prepares nothing (it
    # would collide with blue's rows otherwise: tests/integration/engine/connectors/test_postgres_fenced.py)
    assert max(samples) == 0, f"a fenced sink prepares nothing, saw {max(samples)}"
    assert rec.status == "RUNNING" and rec.attempt == 0 and result.restarts == 0
    assert _prepared(url, job.job_id) == [], "the fenced job's end discards the rest"
    with __import__("psycopg").connect(libpq_dsn(url)) as conn:
        assert conn.execute("SELECT count(*) FROM a").fetchone()[0] == 0, "nothing published"


def _inject(url: str, gid: str) -> None:
    """A transaction prepared under ``gid``, as a sink subtask would at a barrier."""
    import psycopg

    with psycopg.connect(libpq_dsn(url)) as conn:
        conn.execute("INSERT INTO a VALUES (-1, 'ghost', 0)")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")


@pytest.mark.timeout(180)
def test_cancel_rolls_back_what_the_job_prepared_for_checkpoints_that_never_completed(
        tmp_path, postgres_server):
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import _uid_hash
    from airflow_checkpoint_provider.engine.connectors.sink_names import gid

    url = _db(postgres_server)
    bg = Background(_pipeline(str(tmp_path), url, name="cancelled"))
    job = bg.wait_running(min_checkpoints=1, timeout=90)
    # a barrier's PREPARE of a checkpoint that will never complete (the job is cancelled
    # before): what `ckpt cancel` left behind
    never = gid(job.job_id, _uid_hash("sink-a"), 0, 1_000_000)
    _inject(url, never)
    assert bg.request(job.job_id, "CANCEL").status == "SUCCEEDED"
    assert bg.result().status == "CANCELED"
    assert _prepared(url, job.job_id) == [], "nothing it prepared stays prepared"


@pytest.mark.timeout(120)
def test_ckpt_leftovers_reports_and_aborts_what_ended_jobs_left(tmp_path, postgres_server):
    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from airflow_checkpoint_provider.engine.connectors.sink_names import gid

    url = _db(postgres_server)
    db = f"sqlite:///{tmp_path / 'meta.db'}"
    store = MetadataStore(db)
    store.create_job(job_id="d" * 32, job_name="gone", parallelism=1)
    store.set_job_status("d" * 32, "CANCELED")
    store.create_job(job_id="e" * 32, job_name="live", parallelism=1)
    store.set_job_status("e" * 32, "RUNNING")
    left, live = gid("d" * 32, "0" * 12, 0, 43), gid("e" * 32, "0" * 12, 0, 7)
    # the same ended job's leftover in another database of the same server: a URL names a
    # database, and a prepared transaction can be finished only from its own database
    # (before: listed under both URLs, and `--abort` on `url` failed on it)
    other = _db(postgres_server)
    elsewhere = gid("d" * 32, "1" * 12, 0, 44)
    _inject(url, left)
    _inject(url, live)
    _inject(other, elsewhere)
    try:
        runner = CliRunner()
        report = runner.invoke(main, ["leftovers", "--postgres", url, "--db", db, "--json"])
        assert report.exit_code == 1, report.output
        [row] = json.loads(report.output)
        assert row["gid"] == left and row["abortable"] and row["job_status"] == "CANCELED"
        text = runner.invoke(main, ["leftovers", "--postgres", url, "--db", db])
        assert f"{left}  job {'d' * 32} (CANCELED), checkpoint 43" in text.output
        assert "never completed" in text.output and live not in text.output
        aborted = runner.invoke(main, ["leftovers", "--postgres", url, "--db", db, "--abort"])
        assert aborted.exit_code == 0, aborted.output
        assert left not in _prepared(url) and live in _prepared(url), "a live job's stays"
        assert _prepared(other) == [elsewhere], "another database's is not touched"
        both = runner.invoke(main, ["leftovers", "--postgres", url, "--postgres", other,
                                    "--db", db, "--abort", "--json"])
        assert both.exit_code == 0, both.output
        assert [(r["url"], r["gid"]) for r in json.loads(both.output)] == [(other, elsewhere)]
        assert _prepared(other) == []
    finally:
        from airflow_checkpoint_provider.engine.connectors.postgres.sink import rollback_prepared

        rollback_prepared(url, [left, live])
        rollback_prepared(other, [elsewhere])
        store.close()
