"""Security issue 50: a location read from the metadata DB is deleted or restored only as
the job whose ``_metadata`` it holds (checkpoint/ownership.py).

Break 4: a metadata-DB writer inserts a savepoint row of job A whose location is job B's
savepoint; retention, dispose and the clean-ups must keep B's files and say why.
Break 5: another job's checkpoint copied over a job's latest one (validly signed: same DB
key) must not be restored as that job's state through ``restore="latest"``.

Real SQLite metadata DB, real files, real jobs (local runner) where a job is needed."""

from __future__ import annotations

import logging
import os
import shutil
import time
from datetime import UTC, datetime

import pytest
from checkpoint_damage import completed_chk_dirs
from click.testing import CliRunner
from pipelines import (
    Background,
    InjectedFailure,
    RunningSum,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)
from savepoint_helpers import NOW, make_job, make_savepoint

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.checkpoint.deleter import CheckpointCleaner
from airflow_checkpoint_provider.engine.checkpoint.ownership import (
    ForeignSnapshotError,
    deletion_refusal,
)
from airflow_checkpoint_provider.engine.checkpoint.partial import discard_partial_checkpoints
from airflow_checkpoint_provider.engine.checkpoint.trust import SnapshotTrust
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.lifecycle.savepoints import (
    DisposeRefused,
    apply_savepoint_retention,
    dispose_savepoint,
)
from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata

N, KEYS, SEED = 4000, 50, 7


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path}/metadata.db"


@pytest.fixture
def store(db_url):
    with MetadataStore(db_url) as s:
        yield s


def _foreign_row(store, job_a: str, location: str, checkpoint_id: int, when: datetime) -> None:
    """What a metadata-DB writer inserts: a COMPLETED savepoint row of ``job_a`` at
    ``location`` (another job's savepoint)."""
    store.add_pending_checkpoint(job_a, checkpoint_id, kind="SAVEPOINT", trigger_time=when,
                                 location=location)
    store.complete_checkpoint(job_a, checkpoint_id, complete_time=when, duration_ms=1,
                              state_size=1, checkpointed_size=1, task_stats=[])


# -- break 4: deletion --------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_cli_retention_keeps_another_jobs_savepoint_a_row_points_at(db_url, store, tmp_path):
    job_a = make_job(store, "orders")
    job_b = make_job(store, "payments", status="RUNNING")
    b_savepoint = make_savepoint(store, tmp_path / "sp", job_b, 318, hours_old=1)
    _foreign_row(store, job_a, b_savepoint, 1, datetime(2000, 1, 1, tzinfo=UTC))
    own = make_savepoint(store, tmp_path / "sp", job_a, 2, hours_old=0, now=datetime.now(UTC))

    res = CliRunner().invoke(ckpt, ["savepoints", job_a, "--max-age", "259200", "--db", db_url])

    assert res.exit_code == 0, res.output
    assert os.path.exists(os.path.join(b_savepoint, "_metadata")), res.output
    assert "disposed" not in res.output.split("\n")[0]
    first = res.output.splitlines()[0]
    assert first.startswith(f"kept (foreign) savepoint 1 of {job_a[:8]}: {b_savepoint} -- ")
    assert job_a in first and job_b in first and b_savepoint in first
    assert store.get_checkpoint(job_b, 318).status == "COMPLETED"
    assert store.get_checkpoint(job_a, 1).status == "COMPLETED"  # kept: a human looks at it
    assert os.path.exists(own)


@pytest.mark.timeout(60)
def test_retention_reports_the_foreign_location_and_still_disposes_the_jobs_own(store, tmp_path,
                                                                                 caplog):
    job_a = make_job(store, "orders")
    job_b = make_job(store, "payments")
    b_savepoint = make_savepoint(store, tmp_path / "b", job_b, 318, hours_old=50)
    own_old = make_savepoint(store, tmp_path / "a", job_a, 1, hours_old=48)
    _foreign_row(store, job_a, b_savepoint, 2, NOW.replace(year=2000))
    newest = make_savepoint(store, tmp_path / "a", job_a, 3, hours_old=1)
    caplog.set_level(logging.INFO)

    report = apply_savepoint_retention(store, job_name="orders", max_age_seconds=3600, now=NOW)

    by_loc = {d.location: d for d in report.decisions}
    assert (by_loc[b_savepoint].decision, by_loc[b_savepoint].rule) == ("kept", "foreign")
    assert job_a in by_loc[b_savepoint].reason and job_b in by_loc[b_savepoint].reason
    assert report.disposed == [own_old] and not os.path.exists(own_old)
    assert os.path.exists(b_savepoint) and os.path.exists(newest)
    assert f"kept (foreign) savepoint 2 of {job_a[:8]}: {b_savepoint}" in caplog.text
    assert report.to_dict()["savepoints"][0]["rule"] == "foreign"


@pytest.mark.timeout(60)
def test_retention_refuses_a_wrong_name_or_a_location_outside_the_savepoint_roots(
        store, tmp_path, monkeypatch):
    job_a = make_job(store, "orders")
    own = make_savepoint(store, tmp_path / "a", job_a, 1, hours_old=48)
    renamed = str(tmp_path / "a" / "elsewhere")
    os.rename(own, renamed)
    with store.engine.begin() as conn:  # the DB writer moved the row with it
        from sqlalchemy import text
        conn.execute(text("UPDATE checkpoints SET location=:l WHERE job_id=:j"),
                     {"l": renamed, "j": job_a})
    make_savepoint(store, tmp_path / "a", job_a, 2, hours_old=47)
    make_savepoint(store, tmp_path / "a", job_a, 3, hours_old=1)
    monkeypatch.setenv("CKPT_ALLOWED_SAVEPOINT_ROOTS", str(tmp_path / "allowed"))

    report = apply_savepoint_retention(store, job_name="orders", max_age_seconds=3600, now=NOW)

    # every one is kept: the renamed one, and the others outside the configured roots
    assert [(d.rule) for d in report.decisions] == ["foreign", "foreign", "foreign"]
    assert "not named savepoint-<job-id>-1" in report.decisions[0].reason
    assert "outside the allowed savepoint roots" in report.decisions[1].reason
    assert os.path.exists(renamed) and report.disposed == []
    monkeypatch.setenv("CKPT_ALLOWED_SAVEPOINT_ROOTS", str(tmp_path / "a"))
    report = apply_savepoint_retention(store, job_name="orders", max_age_seconds=3600, now=NOW)
    assert [(d.rule) for d in report.decisions] == ["foreign", "disposed", "newest"]


@pytest.mark.timeout(60)
def test_dispose_through_a_row_checks_ownership_an_explicit_path_does_not(store, tmp_path):
    job_a = make_job(store, "orders")
    job_b = make_job(store, "payments")
    b_savepoint = make_savepoint(store, tmp_path, job_b, 318, hours_old=1)
    _foreign_row(store, job_a, b_savepoint, 1, NOW.replace(year=2000))
    row = store.get_checkpoint(job_a, 1)

    with pytest.raises(DisposeRefused, match=f"for job {job_a}; its _metadata names job {job_b}"):
        dispose_savepoint(row.location, store, record=row)
    assert os.path.exists(b_savepoint)
    assert store.get_checkpoint(job_a, 1).status == "COMPLETED"

    # the operator names B's savepoint explicitly: disposed, and only B's row is marked
    dispose_savepoint(b_savepoint, store)
    assert not os.path.exists(b_savepoint)
    assert store.get_checkpoint(job_b, 318).status == "DISCARDED"
    assert store.get_checkpoint(job_a, 1).status == "COMPLETED"


def _checkpoint_dir(root, job_name, job_id, n, owner=None) -> str:
    d = os.path.join(str(root), job_name, job_id, f"chk-{n}")
    os.makedirs(d)
    if owner is not None:
        with open(os.path.join(d, "_metadata"), "wb") as f:
            f.write(encode_metadata({"kind": "CHECKPOINT", "job_id": owner, "job_name": job_name,
                                     "checkpoint_id": n, "timestamp_ms": 0, "operators": {}}))
    with open(os.path.join(d, "state.bin"), "wb") as f:
        f.write(b"x")
    return d


@pytest.mark.timeout(60)
def test_cleaner_keeps_a_directory_whose_metadata_names_another_job(tmp_path, caplog):
    own = _checkpoint_dir(tmp_path, "orders", "job-a", 1, owner="job-a")
    partial = _checkpoint_dir(tmp_path, "orders", "job-a", 2)  # no _metadata yet
    swapped = _checkpoint_dir(tmp_path, "orders", "job-a", 3, owner="job-b")
    cleaner = CheckpointCleaner("orders")
    caplog.set_level(logging.WARNING)
    for d in (own, partial, swapped):
        cleaner.remove_tree(d, owner="job-a")
    cleaner.close()
    assert not os.path.exists(own) and not os.path.exists(partial)
    assert os.path.exists(swapped)
    assert "belongs to job job-b" in caplog.text and "not to job job-a" in caplog.text


@pytest.mark.timeout(60)
def test_partial_checkpoint_cleanup_keeps_another_jobs_completed_checkpoint(store, tmp_path):
    job_a = make_job(store, "orders", status="FAILED")
    job_b = make_job(store, "orders", status="RUNNING")
    b_chk = _checkpoint_dir(tmp_path, "orders", job_a, 5, owner=job_b)
    store.add_pending_checkpoint(job_a, 5, kind="CHECKPOINT", trigger_time=NOW, location=b_chk)
    partial = _checkpoint_dir(tmp_path, "orders", job_a, 6)
    store.add_pending_checkpoint(job_a, 6, kind="CHECKPOINT", trigger_time=NOW, location=partial)

    removed = discard_partial_checkpoints(store, job_a, roots=(str(tmp_path),))

    assert removed == [partial]
    assert os.path.exists(os.path.join(b_chk, "_metadata"))


@pytest.mark.timeout(60)
def test_s3_savepoint_locations_are_refused_by_name_and_root(monkeypatch):
    job = "0123456789abcdef"
    monkeypatch.setenv("CKPT_ALLOWED_SAVEPOINT_ROOTS", "s3://bucket/savepoints")
    assert "outside the allowed savepoint roots" in deletion_refusal(
        "s3://bucket/other/savepoint-0123456789abcdef-3", job_id=job, kind="SAVEPOINT",
        checkpoint_id=3)
    assert "not named" in deletion_refusal(
        "s3://bucket/savepoints/savepoint-fedcba9876543210-3", job_id=job, kind="SAVEPOINT",
        checkpoint_id=3)


# -- break 5: restore ---------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_trust_refuses_a_signed_snapshot_of_another_job_found_through_a_row(store, tmp_path):
    trust = SnapshotTrust(store)
    job_a = make_job(store, "orders", status="FINISHED")
    d = _checkpoint_dir(tmp_path, "orders", job_a, 4)
    with open(os.path.join(d, "_metadata"), "wb") as f:  # signed with this DB's key, by B
        f.write(encode_metadata({"kind": "CHECKPOINT", "job_id": "job-b", "job_name": "pay",
                                 "checkpoint_id": 4, "timestamp_ms": 0, "operators": {}},
                                hmac_key=trust.key))
    store.add_pending_checkpoint(job_a, 4, kind="CHECKPOINT", trigger_time=NOW, location=d)
    store.complete_checkpoint(job_a, 4, complete_time=NOW, duration_ms=1, state_size=1,
                              checkpointed_size=1, task_stats=[])
    row = store.get_checkpoint(job_a, 4)

    with pytest.raises(ForeignSnapshotError) as err:
        trust.load(d, record=row)
    assert d in str(err.value) and job_a in str(err.value) and "job-b" in str(err.value)
    assert trust.load(d, owner="job-b").doc["job_id"] == "job-b"
    assert trust.load(d).doc["job_id"] == "job-b"  # an explicit path: the user's choice


def _pipeline(root, name, out, seed=SEED):
    return running_sum_pipeline(str(root), name=name, num_records=N, num_keys=KEYS, seed=seed,
                                interval_ms=None, out=str(out), source_parallelism=1,
                                keyed_parallelism=2)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_restore_latest_skips_another_jobs_checkpoint_copied_over_the_latest(workdir, caplog):
    a = _pipeline(workdir, "orders", workdir / "out-a")
    first = a.run()
    assert first.status == "FINISHED"
    b = _pipeline(workdir, "payments", workdir / "out-b", seed=SEED + 1)
    other = b.run()
    assert other.status == "FINISHED"
    target = first.latest_checkpoint
    shutil.rmtree(target)
    shutil.copytree(other.latest_checkpoint, target)  # validly signed: the same DB key
    caplog.set_level(logging.WARNING)

    second = a.run(restore="latest")

    assert second.status == "FINISHED"
    assert second.restored_from != target
    assert (f"was found through the history of job {first.job_id}, but its signed _metadata "
            f"names job {other.job_id}") in caplog.text
    check_exactly_once(str(workdir / "out-a"), expected_running_sums(N, KEYS, SEED))
    with MetadataStore(a.metadata_url) as store:
        chk = int(os.path.basename(target).split("-")[1])
        row = store.get_checkpoint(first.job_id, chk)
        assert row.status == "CORRUPT" and other.job_id in row.failure_reason
    # B's state passes the trust checks only by its path, explicitly (restoring it into
    # this pipeline is then the user's choice; its file sink's transactions are B's)
    with MetadataStore(a.metadata_url) as store:
        assert SnapshotTrust(store).load(target).doc["job_id"] == other.job_id


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_standby_refuses_another_jobs_checkpoint_in_the_history_of_the_job_it_waited_for(
        workdir):
    """The job a standby waits for (here only a row: its driver is elsewhere) left a
    checkpoint row whose directory holds job B's checkpoint (same pipeline, same DB key):
    the standby refuses it, naming the path and both job ids."""
    b = _pipeline(workdir, "payments", workdir / "out-b")
    other = b.run()
    assert other.status == "FINISHED"
    with MetadataStore(b.metadata_url) as store:
        v1 = make_job(store, "rs", status="RUNNING")
        location = os.path.join(str(workdir), "ckpt", "rs", v1, "chk-3")
        shutil.copytree(other.latest_checkpoint, location)
        store.add_pending_checkpoint(v1, 3, kind="CHECKPOINT", trigger_time=NOW,
                                     location=location)
        store.complete_checkpoint(v1, 3, complete_time=NOW, duration_ms=1, state_size=1,
                                  checkpointed_size=1, task_stats=[])
        v2 = Background(_pipeline(workdir, "rs", workdir / "out-b"), restore=f"standby:{v1}")
        time.sleep(0.5)
        store.set_job_status(v1, "CANCELED")  # v1 ended: the standby takes over
        v2.thread.join(timeout=120)
    error = v2.outcome.get("error")
    assert isinstance(error, ForeignSnapshotError), v2.outcome
    assert location in str(error) and v1 in str(error) and other.job_id in str(error)


class CopyForeignOverLatest(RunningSum):
    """Once, at the first record >= ``at_id`` with two completed checkpoints of this job:
    replace the newest one with job B's checkpoint ``foreign`` (validly signed) and fail the
    task, so the job fails over (the pattern of checkpoint_damage.CorruptLatest)."""

    def __init__(self, root: str, foreign: str, at_id: int) -> None:
        super().__init__(None)
        self.root, self.foreign, self.at_id = root, foreign, at_id

    def process_element(self, record, ctx):
        if record["id"] >= self.at_id:
            marker = os.path.join(self.root, "swapped")
            done = completed_chk_dirs(os.path.join(self.root, "ckpt", "orders"))
            if len(done) >= 2 and not os.path.exists(marker):
                try:  # one subtask of all wins
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    return super().process_element(record, ctx)
                time.sleep(1.0)  # a checkpoint this task acked may still be finalizing
                newest = completed_chk_dirs(os.path.join(self.root, "ckpt", "orders"))[-1]
                shutil.rmtree(newest)
                shutil.copytree(self.foreign, newest)
                with open(marker + ".tmp", "w") as f:
                    f.write(newest)
                os.replace(marker + ".tmp", marker + ".info")
                raise InjectedFailure(f"copied {self.foreign} over {newest}")
        return super().process_element(record, ctx)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failover_skips_another_jobs_checkpoint_copied_over_the_newest(workdir, caplog):
    b = _pipeline(workdir, "payments", workdir / "out-b", seed=SEED + 1)
    other = b.run()
    assert other.status == "FINISHED"
    a = running_sum_pipeline(
        str(workdir), name="orders", num_records=N, num_keys=KEYS, seed=SEED, rate=2000,
        interval_ms=100, out=str(workdir / "out-a"), source_parallelism=1, keyed_parallelism=2,
        function=CopyForeignOverLatest(str(workdir), other.latest_checkpoint, at_id=2500))
    caplog.set_level(logging.WARNING)

    result = a.run()

    assert result.status == "FINISHED" and result.restarts >= 1, result.failure_reason
    swapped = open(os.path.join(str(workdir), "swapped.info")).read()
    assert f"names job {other.job_id}" in caplog.text and swapped in caplog.text
    check_exactly_once(str(workdir / "out-a"), expected_running_sums(N, KEYS, SEED))
    with MetadataStore(a.metadata_url) as store:
        row = store.get_checkpoint(result.job_id, int(os.path.basename(swapped)[4:]))
        assert row.status == "CORRUPT" and other.job_id in row.failure_reason
    assert os.path.exists(os.path.join(swapped, "_metadata"))  # B's copy is never deleted


@pytest.mark.timeout(60)
def test_a_foreign_row_dated_newest_does_not_push_the_jobs_newest_savepoint_out(store, tmp_path):
    """max_count ranks only the job's own savepoints: a foreign row dated newest is kept and
    reported, and the job's real newest savepoint stays the newest."""
    job_a = make_job(store, "orders")
    job_b = make_job(store, "payments")
    b_savepoint = make_savepoint(store, tmp_path / "b", job_b, 318, hours_old=50)
    old = make_savepoint(store, tmp_path / "a", job_a, 1, hours_old=48)
    newest = make_savepoint(store, tmp_path / "a", job_a, 2, hours_old=1)
    _foreign_row(store, job_a, b_savepoint, 3, NOW)  # "newer" than every real one

    report = apply_savepoint_retention(store, job_name="orders", max_count=1, now=NOW)

    assert [(d.checkpoint_id, d.rule) for d in report.decisions] == [
        (1, "disposed"), (2, "newest"), (3, "foreign")]
    assert report.disposed == [old]
    assert os.path.exists(newest) and os.path.exists(b_savepoint)
