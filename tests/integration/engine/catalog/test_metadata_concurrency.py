"""The metadata DB under concurrency and outages (PostgreSQL, as in production)."""

import threading
import time

import pytest
from pipelines import Background, check_exactly_once, expected_running_sums, versioned_pipeline

from airflow_checkpoint_provider.engine.catalog import MetadataStore

pytestmark = pytest.mark.slow
N = 20_000


def shared_db(pipeline, url):
    pipeline.metadata_url = url
    return pipeline


@pytest.mark.timeout(300)
def test_three_jobs_two_pollers_fifty_concurrent_control_requests(tmp_path, postgres_server):
    url = postgres_server.create_database()
    jobs = []
    for i in range(3):
        p = shared_db(versioned_pipeline(str(tmp_path / f"j{i}"), "v1", num_records=10**9,
                                         rate=2000, source_parallelism=1, keyed_parallelism=1,
                                         interval_ms=300), url)
        p.name = p._graph.name = f"job-{i}"
        bg = Background(p)
        jobs.append((bg, bg.wait_running(timeout=120)))
    store = MetadataStore(url)
    stop = threading.Event()
    seen: list[int] = []

    def poll():  # what Airflow sensors do
        s = MetadataStore(url)
        while not stop.is_set():
            for _, job in jobs:
                seen.append(len(s.list_checkpoints(job.job_id)))
            time.sleep(0.05)
        s.close()

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    for t in pollers:
        t.start()
    request_ids: list[tuple[str, str]] = []
    lock = threading.Lock()

    def submit(k):  # what operators do, concurrently
        s = MetadataStore(url)
        for j in range(k, 50, 5):
            _, job = jobs[j % 3]
            rid = s.submit_control_request(job.job_id, "CHECKPOINT", {})
            with lock:
                request_ids.append((job.job_id, rid))
        s.close()

    submitters = [threading.Thread(target=submit, args=(k,)) for k in range(5)]
    for t in submitters:
        t.start()
    for t in submitters:
        t.join()
    assert len(request_ids) == 50
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        reqs = [store.get_control_request(rid) for _, rid in request_ids]
        if all(r.status in ("SUCCEEDED", "FAILED") for r in reqs):
            break
        time.sleep(0.5)
    stop.set()
    for t in pollers:
        t.join()
    assert all(r.status == "SUCCEEDED" for r in reqs), [r.error for r in reqs if r.status != "SUCCEEDED"]
    # every request was executed once: its own checkpoint, recorded, never shared with another
    ids = [(r.job_id, r.result["checkpoint_id"]) for r in reqs]
    assert len(set(ids)) == 50
    for job_id, chk in ids:
        row = store.get_checkpoint(job_id, chk)
        assert row is not None and row.status in ("COMPLETED", "SUBSUMED")
    for bg, job in jobs:
        rows = store.list_checkpoints(job.job_id)
        assert [r.checkpoint_id for r in rows] == list(range(1, len(rows) + 1)), "no row lost"
        bg.request(job.job_id, "CANCEL")
        assert bg.result().status == "CANCELED"
    assert seen


@pytest.mark.timeout(300)
def test_db_outage_fails_only_checkpoints_in_flight(tmp_path):
    from pg_server import PostgresServer

    server = PostgresServer().start()
    try:
        url = server.create_database()
        p = shared_db(versioned_pipeline(str(tmp_path), "v1", num_records=N, rate=2000,
                                         interval_ms=200), url)
        bg = Background(p)
        job = bg.wait_running(min_checkpoints=2, timeout=120)
        server.pause()                      # the DB is gone for ~3 s
        time.sleep(3)
        server.start()
        result = bg.result(240)
        assert result.status == "FINISHED" and result.restarts == 0
        store = MetadataStore(url)
        rows = store.list_checkpoints(job.job_id)
        assert any(r.status == "FAILED" for r in rows) or len(rows) < rows[-1].checkpoint_id, \
            "a checkpoint in flight during the outage failed"
        assert rows[-1].status == "COMPLETED" and rows[-1].is_final
        assert store.get_job(job.job_id).status == "FINISHED"
        assert len(store.list_attempts(job.job_id)) == 1
        check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    finally:
        server.stop()


@pytest.mark.timeout(120)
def test_db_password_never_appears_in_results_logs_or_cli_output(tmp_path, postgres_server, caplog):
    import json
    import logging

    from click.testing import CliRunner
    from sqlalchemy import create_engine, text

    from airflow_checkpoint_provider.engine.cli import main as ckpt

    url = postgres_server.create_database()
    admin = create_engine(postgres_server.url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='ckpt') "
                          "THEN CREATE ROLE ckpt LOGIN SUPERUSER PASSWORD 's3cr3t-pw'; END IF; END$$"))
    admin.dispose()
    secret_url = url.replace("postgres@", "ckpt:s3cr3t-pw@")
    caplog.set_level(logging.DEBUG)
    p = shared_db(versioned_pipeline(str(tmp_path), "v1", num_records=2000), secret_url)
    result = p.run()
    assert "s3cr3t-pw" not in json.dumps(result.__dict__, default=str)
    runner = CliRunner()
    for args in (["jobs", "--db", secret_url, "--json"], ["db", "upgrade", "--db", secret_url],
                 ["checkpoints", "versioned", "--db", secret_url, "--json"]):
        res = runner.invoke(ckpt, args)
        assert res.exit_code == 0, res.output
        assert "s3cr3t-pw" not in res.output
    assert "s3cr3t-pw" not in caplog.text
