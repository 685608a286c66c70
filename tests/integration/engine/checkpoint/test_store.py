"""Tests of the metadata DB store, on SQLite files and on a real PostgreSQL server."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text, update

from airflow_checkpoint_provider.engine.catalog import (
    MetadataSchemaError,
    MetadataStore,
    to_sqlalchemy_url,
    upgrade_database,
)
from airflow_checkpoint_provider.engine.catalog.models import Base, JobRow

TABLES = {"jobs", "job_attempts", "checkpoints", "control_requests", "shared_state",
          "operator_state_sizes"}
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def db_url(metadata_url) -> str:
    return metadata_url


@pytest.fixture
def store(db_url):
    s = MetadataStore(db_url)
    yield s
    s.close()


def _job(store: MetadataStore, job_id: str = "a1b2c3d4e5f6", name: str = "orders"):
    return store.create_job(job_id=job_id, job_name=name, parallelism=2, version="v1")


def _completed(store, job_id, chk, *, at, kind="CHECKPOINT"):
    store.add_pending_checkpoint(job_id, chk, kind=kind, trigger_time=at,
                                 location=f"/ckpt/{job_id}/chk-{chk}")
    store.complete_checkpoint(job_id, chk, complete_time=at + timedelta(seconds=1),
                              duration_ms=1000, state_size=100 * chk, checkpointed_size=10,
                              task_stats=[{"vertex": 0, "subtask": 0, "sync_ms": 1}])


# -- schema ----------------------------------------------------------------------------------


def test_the_schema_head_constant_is_alembics_head():
    """A DB at SCHEMA_HEAD is taken as current without Alembic: a new migration that does
    not move SCHEMA_HEAD would leave every existing DB unmigrated."""
    from alembic.script import ScriptDirectory

    from airflow_checkpoint_provider.engine.catalog import alembic_config
    from airflow_checkpoint_provider.engine.catalog.db import SCHEMA_HEAD

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_current_head() == SCHEMA_HEAD


def test_migration_from_empty_creates_all_tables_at_head(tmp_path, db_url):
    upgrade_database(db_url)
    engine = create_engine(db_url)
    try:
        assert TABLES <= set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0012"
            if db_url.startswith("sqlite"):
                assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            # the migration and the ORM models describe the same schema
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


def test_reopen_is_idempotent_and_keeps_data(db_url):
    with MetadataStore(db_url) as s:
        _job(s)
    upgrade_database(db_url)
    with MetadataStore(db_url) as s:
        assert s.get_job("a1b2c3d4e5f6") is not None


def test_concurrent_first_open_migrates_once(tmp_path):
    url = to_sqlalchemy_url(str(tmp_path / "race.db"))
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            MetadataStore(url).close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with MetadataStore(url) as s:
        assert s.list_jobs() == []


def test_plain_path_becomes_sqlite_url_and_parent_dir_is_created(tmp_path):
    path = tmp_path / "nested" / "dir" / "ckpt.db"
    assert to_sqlalchemy_url(str(path)) == f"sqlite:///{path}"
    assert to_sqlalchemy_url("postgresql+psycopg://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    with MetadataStore(str(path)) as s:
        assert s.url == f"sqlite:///{path}"
    assert path.exists()


# -- jobs and attempts -----------------------------------------------------------------------


def test_job_lifecycle_and_heartbeat(store):
    job = _job(store)
    assert job.status == "CREATED" and job.attempt == 0 and job.heartbeat_at is None
    assert job.created_at.tzinfo is not None

    store.heartbeat(job.job_id)
    beat = store.get_job(job.job_id).heartbeat_at
    assert beat is not None and beat.tzinfo == UTC
    assert beat - datetime.now(UTC) < timedelta(seconds=5)

    store.set_job_status(job.job_id, "RUNNING")
    store.set_job_status(job.job_id, "RESTARTING", failure_reason="task 1.0 failed: boom")
    assert store.get_job(job.job_id).failure_reason == "task 1.0 failed: boom"
    store.set_job_status(job.job_id, "FINISHED")
    final = store.get_job(job.job_id)
    assert final.status == "FINISHED" and final.is_terminal and final.failure_reason is None
    assert final.updated_at >= job.updated_at

    with pytest.raises(ValueError, match="unknown job status 'DONE'"):
        store.set_job_status(job.job_id, "DONE")
    with pytest.raises(ValueError, match="already exists"):
        _job(store)
    with pytest.raises(LookupError):
        store.heartbeat("nope")


def test_attempts_record_every_restart(store):
    job = _job(store)
    store.start_attempt(job.job_id, 0, restored_checkpoint_id=None, restored_from=None)
    store.end_attempt(job.job_id, 0, failure_reason="task 0.1 failed")
    store.start_attempt(job.job_id, 1, restored_checkpoint_id=7, restored_from="/ckpt/chk-7")
    store.end_attempt(job.job_id, 1, failure_reason=None)

    assert store.get_job(job.job_id).attempt == 1
    first, second = store.list_attempts(job.job_id)
    assert (first.attempt, first.failure_reason, first.restored_checkpoint_id) == (
        0, "task 0.1 failed", None)
    assert (second.attempt, second.restored_checkpoint_id, second.restored_from) == (
        1, 7, "/ckpt/chk-7")
    assert second.ended_at is not None and second.failure_reason is None


def test_list_jobs_newest_first_and_by_name(store):
    _job(store, "1111aaaa", "orders")
    store.set_job_status("1111aaaa", "FINISHED")  # one live job per name
    _job(store, "2222bbbb", "payments")
    _job(store, "3333cccc", "orders")
    assert [j.job_id for j in store.list_jobs()] == ["3333cccc", "2222bbbb", "1111aaaa"]
    assert [j.job_id for j in store.list_jobs("orders")] == ["3333cccc", "1111aaaa"]


def test_resolve_job_by_id_prefix_and_name(store):
    _job(store, "abcd1111", "orders")
    store.set_job_status("abcd1111", "FINISHED")  # one live job per name
    _job(store, "abcd2222", "orders")
    _job(store, "ffff0000", "payments")
    assert store.resolve_job("abcd1111").job_id == "abcd1111"
    assert store.resolve_job("abcd2").job_id == "abcd2222"
    assert store.resolve_job("orders").job_id == "abcd2222"  # newest of that name
    assert store.resolve_job("payments").job_id == "ffff0000"
    with pytest.raises(LookupError, match="no job matches 'fff'"):
        store.resolve_job("fff")  # too short to be a prefix
    with pytest.raises(LookupError, match="matches several jobs"):
        store.resolve_job("abcd")
    with pytest.raises(LookupError, match="no job matches 'zzzz'"):
        store.resolve_job("zzzz")


# -- checkpoints -----------------------------------------------------------------------------


def test_checkpoint_pending_completed_subsumed(store):
    job = _job(store)
    store.add_pending_checkpoint(job.job_id, 1, kind="CHECKPOINT", trigger_time=T0,
                                 location="/ckpt/chk-1")
    pending = store.get_checkpoint(job.job_id, 1)
    assert pending.status == "PENDING" and pending.complete_time is None
    assert pending.trigger_time == T0

    stats = [{"vertex": 0, "subtask": 0, "sync_ms": 2, "async_ms": 40}]
    store.complete_checkpoint(job.job_id, 1, complete_time=T0 + timedelta(seconds=2),
                              duration_ms=2000, state_size=4096, checkpointed_size=1024,
                              task_stats=stats)
    done = store.get_checkpoint(job.job_id, 1)
    assert done.status == "COMPLETED"
    assert (done.duration_ms, done.state_size, done.checkpointed_size) == (2000, 4096, 1024)
    assert done.task_stats == stats
    assert done.complete_time == T0 + timedelta(seconds=2)
    assert done.to_dict()["complete_time"] == "2025-03-01T12:00:02+00:00"

    _completed(store, job.job_id, 2, at=T0 + timedelta(minutes=1))
    store.set_checkpoint_status(job.job_id, [1], "SUBSUMED")
    assert [(c.checkpoint_id, c.status) for c in store.list_checkpoints(job.job_id)] == [
        (1, "SUBSUMED"), (2, "COMPLETED")]
    assert [c.checkpoint_id for c in store.list_checkpoints(job.job_id, status="COMPLETED")] == [2]

    store.add_pending_checkpoint(job.job_id, 3, kind="CHECKPOINT", trigger_time=T0,
                                 location="/ckpt/chk-3")
    store.fail_checkpoint(job.job_id, 3, reason="expired before completing (timeout 600000 ms)")
    failed = store.get_checkpoint(job.job_id, 3)
    assert failed.status == "FAILED" and "expired" in failed.failure_reason
    with pytest.raises(ValueError, match="already exists"):
        store.add_pending_checkpoint(job.job_id, 3, kind="CHECKPOINT", trigger_time=T0,
                                     location="/x")


def test_non_utc_timestamps_are_stored_as_utc(store):
    job = _job(store)
    plus2 = datetime(2025, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    store.add_pending_checkpoint(job.job_id, 1, kind="SAVEPOINT", trigger_time=plus2,
                                 location="/sp")
    got = store.get_checkpoint(job.job_id, 1).trigger_time
    assert got == plus2 and got.tzinfo == UTC


def test_latest_completed_across_jobs_of_same_name(store):
    old = _job(store, "0001aaaa", "orders")
    store.set_job_status(old.job_id, "FINISHED")  # one live job per name
    new = _job(store, "0002bbbb", "orders")
    other = _job(store, "0003cccc", "payments")
    _completed(store, old.job_id, 5, at=T0)
    _completed(store, new.job_id, 1, at=T0 + timedelta(minutes=5))
    _completed(store, new.job_id, 2, at=T0 + timedelta(minutes=6))
    _completed(store, other.job_id, 9, at=T0 + timedelta(minutes=9))
    _completed(store, new.job_id, 3, at=T0 + timedelta(minutes=7), kind="SAVEPOINT")
    store.add_pending_checkpoint(new.job_id, 4, kind="CHECKPOINT",
                                 trigger_time=T0 + timedelta(minutes=8), location="/p")

    latest = store.latest_completed_checkpoint(job_name="orders")
    assert (latest.job_id, latest.checkpoint_id) == (new.job_id, 2)
    assert store.latest_completed_checkpoint(job_id=old.job_id).checkpoint_id == 5
    assert store.latest_completed_checkpoint(job_name="orders",
                                             kind="SAVEPOINT").checkpoint_id == 3
    store.set_checkpoint_status(new.job_id, [1, 2], "SUBSUMED")
    assert store.latest_completed_checkpoint(job_name="orders").checkpoint_id == 5
    assert store.latest_completed_checkpoint(job_name="nothing") is None


def test_max_checkpoint_id_counts_every_state(store):
    job = _job(store)
    assert store.max_checkpoint_id(job.job_id) == 0
    _completed(store, job.job_id, 3, at=T0)
    store.add_pending_checkpoint(job.job_id, 4, kind="CHECKPOINT", trigger_time=T0,
                                 location="/p")
    store.fail_checkpoint(job.job_id, 4, reason="declined")
    assert store.max_checkpoint_id(job.job_id) == 4


# -- shared state ----------------------------------------------------------------------------


def test_shared_state_registry(store):
    job = _job(store)
    store.register_shared_state(job.job_id, 1, ["a.sst", "b.sst"])
    store.register_shared_state(job.job_id, 2, ["b.sst", "c.sst"])
    store.register_shared_state(job.job_id, 3, ["c.sst", "d.sst"])
    store.register_shared_state(job.job_id, 1, ["c.sst"])  # late re-register never goes back

    # retaining checkpoints >= 3: a (last used 1) and b (last used 2) are unreferenced
    assert store.unreferenced_shared_state(job.job_id, 3) == ["a.sst", "b.sst"]
    assert store.unreferenced_shared_state(job.job_id, 2) == ["a.sst"]
    store.delete_shared_state(job.job_id, ["a.sst", "b.sst"])
    assert store.unreferenced_shared_state(job.job_id, 4) == ["c.sst", "d.sst"]
    with store.engine.connect() as conn:
        created_by = dict(conn.execute(
            text("SELECT file_key, created_by_checkpoint FROM shared_state")).all())
    assert created_by == {"c.sst": 2, "d.sst": 3}


# -- control requests ------------------------------------------------------------------------


def test_control_request_lifecycle(store):
    job = _job(store)
    rid = store.submit_control_request(job.job_id, "SAVEPOINT", {"directory": "/sp"})
    req = store.get_control_request(rid)
    assert (req.status, req.action, req.params) == ("PENDING", "SAVEPOINT", {"directory": "/sp"})

    claimed = store.claim_control_requests(job.job_id)
    assert [r.request_id for r in claimed] == [rid] and claimed[0].status == "IN_PROGRESS"
    assert store.claim_control_requests(job.job_id) == []

    store.finish_control_request(rid, status="SUCCEEDED",
                                 result={"checkpoint_id": 4, "location": "/sp/savepoint-x"})
    done = store.get_control_request(rid)
    assert done.is_done and done.result == {"checkpoint_id": 4, "location": "/sp/savepoint-x"}
    store.finish_control_request(rid, status="FAILED", error="late")  # already ended: kept
    assert store.get_control_request(rid).status == "SUCCEEDED"

    other = store.submit_control_request(job.job_id, "CANCEL")
    assert store.abort_control_requests(job.job_id, "job ended") == 1
    assert store.get_control_request(other).error == "job ended"
    assert [r.request_id for r in store.list_control_requests(job.job_id)] == [rid, other]


def test_bad_control_action_is_rejected_naming_it(store):
    job = _job(store)
    with pytest.raises(ValueError, match=r"unknown control action 'SNAPSHOT'; expected one of "
                                         r"CHECKPOINT, SAVEPOINT, STOP_WITH_SAVEPOINT, CANCEL"):
        store.submit_control_request(job.job_id, "SNAPSHOT")
    with pytest.raises(LookupError):
        store.submit_control_request("no-such-job", "CANCEL")
    store.set_job_status(job.job_id, "FINISHED")
    with pytest.raises(ValueError, match="FINISHED"):
        store.submit_control_request(job.job_id, "CANCEL")


def test_each_control_request_is_claimed_exactly_once_under_concurrency(db_url):
    """4 claimers, each with its own store on the same file, poll while 50 requests arrive."""
    with MetadataStore(db_url) as s:
        job = _job(s)
    submitted: list[str] = []
    submitting_done = threading.Event()
    claims: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(5)

    def submitter() -> None:
        try:
            with MetadataStore(db_url) as own:
                start.wait()
                for i in range(50):
                    submitted.append(own.submit_control_request(job.job_id, "CHECKPOINT",
                                                                {"n": i}))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            submitting_done.set()

    def claimer(i: int) -> None:
        try:
            with MetadataStore(db_url) as own:
                start.wait()
                while True:
                    finished = submitting_done.is_set()
                    got = own.claim_control_requests(job.job_id)
                    claims[i].extend(r.request_id for r in got)
                    if finished and not got:
                        return
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=submitter)]
    threads += [threading.Thread(target=claimer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    counts = Counter(rid for per_thread in claims for rid in per_thread)
    assert len(submitted) == 50
    assert set(counts) == set(submitted)
    assert set(counts.values()) == {1}
    with MetadataStore(db_url) as s:
        assert {r.status for r in s.list_control_requests(job.job_id)} == {"IN_PROGRESS"}


def test_resolve_job_by_name_prefers_the_active_job_over_a_newer_ended_one(store):
    _job(store, "bbbbbbbb2222", "orders")          # e.g. a v2 that failed on start ...
    store.set_job_status("bbbbbbbb2222", "FAILED", failure_reason="bad code")
    _job(store, "aaaaaaaa1111", "orders")
    store.set_job_status("aaaaaaaa1111", "RUNNING")
    with store.engine.begin() as conn:  # ... after the live one started (one live per name)
        conn.execute(update(JobRow).where(JobRow.job_id == "bbbbbbbb2222")
                     .values(created_at=datetime.now(UTC) + timedelta(hours=1)))
    assert store.resolve_job("orders").job_id == "aaaaaaaa1111"
    store.set_job_status("aaaaaaaa1111", "FINISHED")
    assert store.resolve_job("orders").job_id == "bbbbbbbb2222"  # none active: the newest


def test_read_only_store_refuses_an_unmigrated_db_and_names_the_fix(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(MetadataSchemaError, match=r"empty\.db does not exist.*`ckpt db upgrade --db"):
        MetadataStore(url, migrate=False)
    assert not (tmp_path / "empty.db").exists(), "a read-only client created the DB file"
    engine = create_engine(url)
    engine.connect().close()  # an existing file without the schema
    with pytest.raises(MetadataSchemaError, match=r"does not migrate \(migrate=False\); run `ckpt db upgrade"):
        MetadataStore(url, migrate=False)
    assert not inspect(engine).get_table_names(), "a read-only client created tables"
    engine.dispose()
    upgrade_database(url)
    ro = MetadataStore(url, migrate=False)
    assert ro.list_jobs() == []
    ro.close()


def test_prune_checkpoint_history_keeps_savepoints_retained_and_recent_rows(db_url):
    with MetadataStore(db_url) as store:
        store.create_job(job_id="j1", job_name="orders", parallelism=1)
        for chk in range(1, 13):
            kind = "SAVEPOINT" if chk == 2 else "CHECKPOINT"
            store.add_pending_checkpoint("j1", chk, kind=kind, trigger_time=T0, location=f"/c/{chk}")
            if chk == 5:
                store.fail_checkpoint("j1", chk, reason="declined")
            else:
                store.complete_checkpoint("j1", chk, complete_time=T0, duration_ms=1,
                                          state_size=1, checkpointed_size=1, task_stats=[])
        store.set_checkpoint_status("j1", [c for c in range(1, 10) if c not in (2, 5)], "SUBSUMED")
        store.set_checkpoint_status("j1", [4], "CORRUPT")
        # 3 is held by a pin: its files were not deleted, the next job adopts its row
        store.mark_checkpoint_files_deleted("j1", [1, 6, 7, 8, 9])

        assert store.prune_checkpoint_history("j1", keep=4) == 5  # 1, 5, 6, 7, 8

        kept = {c.checkpoint_id: c.status for c in store.list_checkpoints("j1", kind=None)}
        assert kept == {2: "COMPLETED", 3: "SUBSUMED", 4: "CORRUPT", 9: "SUBSUMED",
                        10: "COMPLETED", 11: "COMPLETED", 12: "COMPLETED"}
        assert store.prune_checkpoint_history("j1", keep=4) == 0


def test_checkpoint_history_must_cover_the_retained_checkpoints():
    from airflow_checkpoint_provider.engine import CheckpointConfig, ConfigurationError

    with pytest.raises(ConfigurationError, match="history must be >= retained"):
        CheckpointConfig(retained=5, history=4)
