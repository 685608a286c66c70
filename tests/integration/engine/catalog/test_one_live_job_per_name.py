"""One live job per name is a database guarantee (issue 25, item 1): processes that create a
job of one name at the same moment -- directly or through ``Pipeline.run()`` -- cannot both
succeed, on SQLite and on PostgreSQL (where a read-then-insert under READ COMMITTED let six
of six through)."""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from datetime import UTC, datetime, timedelta

import pytest
from pipelines import check_exactly_once, expected_running_sums, running_sum_pipeline
from sqlalchemy import update

from airflow_checkpoint_provider.engine import JobNameInUseError
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.catalog.models import JobRow

RACERS = 6
_fork = mp.get_context("fork")


def _create(url: str, name: str, i: int, barrier, results) -> None:
    try:
        store = MetadataStore(url)
        barrier.wait(timeout=60)
        try:
            store.create_job(job_id=f"racer{i}", job_name=name, parallelism=1,
                             exclusive_name=True)
            results.put((i, "created"))
        finally:
            store.close()
    except JobNameInUseError as exc:
        results.put((i, f"in use: {exc}"))
    except BaseException:  # noqa: BLE001 - reported to the test
        results.put((i, traceback.format_exc()))


def _race(target, args: tuple, n: int) -> dict[int, str]:
    barrier, results = _fork.Barrier(n), _fork.Queue()
    procs = [_fork.Process(target=target, args=(*args, i, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stale_predecessor", [False, True], ids=["fresh", "takeover"])
def test_concurrent_create_job_for_one_name_lets_exactly_one_through(metadata_url,
                                                                     stale_predecessor):
    store = MetadataStore(metadata_url)  # the schema exists before the race
    try:
        if stale_predecessor:  # a RUNNING row whose driver died an hour ago: taken over once
            store.create_job(job_id="ghost", job_name="orders", parallelism=1)
            store.set_job_status("ghost", "RUNNING")
            with store.engine.begin() as conn:
                conn.execute(update(JobRow).where(JobRow.job_id == "ghost").values(
                    created_at=datetime.now(UTC) - timedelta(hours=1)))
        results = _race(_create, (metadata_url, "orders"), RACERS)
        created = sorted(i for i, r in results.items() if r == "created")
        refused = [r for r in results.values() if r.startswith("in use: ")]
        assert len(created) == 1, results
        assert len(refused) == RACERS - 1, results
        assert all(f"in use by live job racer{created[0]}" in r or "taken by another job" in r
                   for r in refused), refused
        live = [j for j in store.list_jobs("orders") if j.status in ("CREATED", "RUNNING")]
        assert [j.job_id for j in live] == [f"racer{created[0]}"]
        if stale_predecessor:
            assert store.get_job("ghost").status == "LOST"
    finally:
        store.close()


def _run(root: str, url: str, i: int, barrier, results) -> None:
    try:
        p = running_sum_pipeline(root, num_records=N, rate=1000, source_parallelism=1,
                                 keyed_parallelism=1, interval_ms=200)
        p.metadata_url = url
        p.name = p._graph.name = f"running-sum-{os.path.basename(root)}"
        barrier.wait(timeout=60)
        result = p.run()
        results.put((i, result.status))
    except JobNameInUseError:
        results.put((i, "in use"))
    except BaseException:  # noqa: BLE001 - reported to the test
        results.put((i, traceback.format_exc()))


N = 3000


@pytest.mark.timeout(300)
def test_concurrent_pipeline_runs_of_one_name_run_once_and_write_once(workdir, postgres_server):
    """The issue's scenario: drivers start the same job at once with a file sink and a
    PostgreSQL metadata DB. One runs (for about 3 s, so every other one reaches its
    create_job while it is live), the others are refused; the output is not doubled. Four
    rounds (a fresh job name each): before the fix a round let two or more run about half
    of the time."""
    url = postgres_server.create_database()
    MetadataStore(url).close()
    for round_ in range(4):
        root = os.path.join(workdir, f"round{round_}")
        results = _race(_run, (root, url), 5)
        assert sorted(results.values()) == ["FINISHED"] + ["in use"] * 4, (round_, results)
        check_exactly_once(os.path.join(root, "out"), expected_running_sums(N, 50, 7))


def test_upgrade_to_0005_keeps_the_newest_live_job_of_a_name(metadata_url):
    """A DB where the race already happened (two live jobs of one name, schema 0004): the
    upgrade keeps the newest live and marks the older LOST, then creates the index."""
    from alembic import command
    from sqlalchemy import insert

    from airflow_checkpoint_provider.engine.catalog import alembic_config, create_metadata_engine

    engine = create_metadata_engine(metadata_url)  # (creates a SQLite file's directory)
    command.upgrade(alembic_config(metadata_url), "0004")
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for i, (job_id, status) in enumerate([("old", "RUNNING"), ("new", "RUNNING"),
                                              ("done", "FINISHED"), ("other", "RUNNING")]):
            conn.execute(insert(JobRow).values(
                job_id=job_id, job_name="other" if job_id == "other" else "orders",
                status=status, parallelism=1, attempt=0, created_at=now + timedelta(seconds=i),
                updated_at=now))
    engine.dispose()
    with MetadataStore(metadata_url) as store:  # upgrades to head
        status = {j.job_id: j.status for j in store.list_jobs()}
        assert status == {"old": "LOST", "new": "RUNNING", "done": "FINISHED",
                          "other": "RUNNING"}
        assert "newer live job" in store.get_job("old").failure_reason
        with pytest.raises(JobNameInUseError, match="in use by live job new"):
            store.create_job(job_id="third", job_name="orders", parallelism=1)
