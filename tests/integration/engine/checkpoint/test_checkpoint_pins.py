"""A pinned checkpoint of a running job survives its subsumption (a last-state hand-over
restores it after the job has moved on), with the RocksDB shared files it references; the
files go once the pin is released. Without the pin the same checkpoint is deleted.

What a job held survives its driver (``engine/checkpoint/held.py``): the next job of the
name adopts the SUBSUMED checkpoints whose files were not deleted, keeps the pinned ones and
deletes the others (after the unpin or the expiry) with the shared files only they
referenced. Until then a restarted driver forgot them and their files stayed forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from pipelines import Background, running_sum_pipeline
from repo_paths import REPO_ROOT, SUPPORT_DIR

from airflow_checkpoint_provider.engine import CheckpointConfig
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.checkpoint.coordinator import (
    CheckpointCoordinator,
    CompletedCheckpoint,
)
from airflow_checkpoint_provider.engine.client import pin_checkpoint, unpin_savepoint
from airflow_checkpoint_provider.engine.fs.storage import canonical_location
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

ROOT = str(REPO_ROOT)
HERE = os.path.dirname(os.path.abspath(__file__))
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _completed(bg, job_id):
    return sorted(
        (c for c in bg.store.list_checkpoints(job_id) if c.status == "COMPLETED"),
        key=lambda c: c.checkpoint_id,
    )


def _wait(predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _pipeline(root: str, name: str, **kwargs):
    p = running_sum_pipeline(root, name=name, rate=2_000, interval_ms=150, retained=1, **kwargs)
    p.state_backend = "rocksdb"  # incremental: checkpoints share SST files
    return p


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_pinned_checkpoint_outlives_its_subsumption_until_unpinned(tmp_path):
    root = str(tmp_path / "blue")
    bg = Background(_pipeline(root, "pinned-blue", num_records=200_000))
    job = bg.wait_running(min_checkpoints=2)
    unpinned = _completed(bg, job.job_id)[-1]
    _wait(
        lambda: bg.store.get_checkpoint(job.job_id, unpinned.checkpoint_id).status == "SUBSUMED",
        "the unpinned checkpoint was never subsumed",
    )
    _wait(
        lambda: not os.path.exists(unpinned.location),
        "a subsumed checkpoint without a pin kept its files",
    )

    pinned = _completed(bg, job.job_id)[-1]
    pin = pin_checkpoint(
        bg.store,
        job.job_id,
        pinned.checkpoint_id,
        holder="handover:test",
        ttl_seconds=600,
        reason="last-state hand-over",
    )
    assert pin is not None, "the newest completed checkpoint could not be pinned"
    _wait(
        lambda: bg.store.get_checkpoint(job.job_id, pinned.checkpoint_id).status == "SUBSUMED",
        "the pinned checkpoint was never subsumed",
    )
    newest = _completed(bg, job.job_id)[-1].checkpoint_id
    _wait(
        lambda: _completed(bg, job.job_id)[-1].checkpoint_id >= newest + 3,
        "the job completed no more checkpoints",
    )
    assert os.path.exists(os.path.join(pinned.location, "_metadata"))
    # a subsumed checkpoint is refused: its files may be gone already
    assert (
        pin_checkpoint(bg.store, job.job_id, unpinned.checkpoint_id, holder="late", ttl_seconds=60)
        is None
    )

    # restored while the job goes on: every shared file it references is still there
    # a fenced green (blue-green validation): the same sink and metadata DB, publishes nothing
    other = _pipeline(
        str(tmp_path / "green"), "pinned-green", num_records=200_000, out=os.path.join(root, "out")
    )
    other.metadata_url = bg.pipeline.metadata_url
    restored = Background(other, restore=pinned.location, fence_sinks=True)
    green = restored.wait_running(min_checkpoints=1)
    restored.request(green.job_id, "CANCEL")
    assert restored.result().status == "CANCELED"
    assert restored.result().restored_from == pinned.location

    assert unpin_savepoint(bg.store, holder="handover:test") == 1
    _wait(
        lambda: not os.path.exists(pinned.location),
        "the released checkpoint's files were not deleted",
    )
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"


# -- a restarted driver: the next job of the name adopts what the dead one held ---------------


def _checkpoint(store, job_id: str, root, name: str, chk: int, status: str, shared=()):
    """A checkpoint row of ``job_id`` with its directory (``_metadata``) and shared files."""
    job_dir = root / name / job_id
    location = job_dir / f"chk-{chk}"
    location.mkdir(parents=True)
    (location / "_metadata").write_bytes(b"{}")
    for key in shared:
        (job_dir / key).parent.mkdir(exist_ok=True)
        (job_dir / key).write_bytes(key.encode())
    store.add_pending_checkpoint(
        job_id, chk, kind="CHECKPOINT", trigger_time=T0, location=str(location)
    )
    store.complete_checkpoint(
        job_id,
        chk,
        complete_time=T0,
        duration_ms=1,
        state_size=1,
        checkpointed_size=1,
        task_stats=[],
    )
    store.register_shared_state(job_id, chk, list(shared))
    if status != "COMPLETED":
        store.set_checkpoint_status(job_id, [chk], status)
    return str(location)


def _coordinator(store, job_id: str, root, name: str) -> CheckpointCoordinator:
    store.create_job(job_id=job_id, job_name=name, parallelism=1)
    return CheckpointCoordinator(
        job_id=job_id,
        job_name=name,
        job_dir=str(root / name / job_id),
        config=CheckpointConfig(interval_ms=100, directory=str(root), retained=1),
        tasks=[(0, 0)],
        operator_info={},
        send_trigger=lambda *a: None,
        send_notify=lambda chk: None,
        send_abort=lambda chk: None,
        store=store,
    )


def _settle(c: CheckpointCoordinator) -> None:
    """Wait for the scheduled deletions, the writes they queued and what those scheduled in
    turn (a CI run under load saw a shared file's deletion land after one round)."""
    for _ in range(2):
        c.cleaner.drain()
        assert c.db.flush(timeout=30)


@pytest.mark.timeout(120)
def test_the_next_job_keeps_what_a_pin_holds_and_deletes_what_its_dead_driver_left(
    tmp_path, metadata_url
):
    """Job 1 died (LOST) holding pinned checkpoint 2, with checkpoint 3 subsumed but not
    deleted yet (no pin), checkpoint 4 held by a pin that expired since, checkpoint 5 its
    latest (retained), and a SUBSUMED row 7 pointing outside its directory. Job 2 of the
    name deletes 3 and 4 at its start, keeps 2 until the unpin, never touches 5 or 7, and
    deletes the shared files only the deleted ones referenced. Seconds, no Spark."""
    store = MetadataStore(metadata_url)
    root, name, dead = tmp_path / "ckpt", "orders", "a" * 32
    store.create_job(job_id=dead, job_name=name, parallelism=1)
    one = _checkpoint(store, dead, root, name, 1, "SUBSUMED", ["shared/s1"])
    store.mark_checkpoint_files_deleted(dead, [1])
    held = _checkpoint(store, dead, root, name, 2, "SUBSUMED", ["shared/s2", "shared/s5"])
    left = _checkpoint(store, dead, root, name, 3, "SUBSUMED", ["shared/s3", "shared/s5"])
    expired = _checkpoint(store, dead, root, name, 4, "SUBSUMED", ["shared/s4", "shared/s5"])
    latest = _checkpoint(store, dead, root, name, 5, "COMPLETED", ["shared/s5"])
    store.add_pending_checkpoint(
        dead, 7, kind="CHECKPOINT", trigger_time=T0, location=str(tmp_path / "elsewhere" / "chk-7")
    )
    store.set_checkpoint_status(dead, [7], "SUBSUMED")
    (tmp_path / "elsewhere" / "chk-7").mkdir(parents=True)
    store.pin_savepoint(canonical_location(held), holder="handover", expires_at=None)
    store.pin_savepoint(
        canonical_location(expired),
        holder="crashed-upgrade",
        expires_at=datetime.now(UTC) - timedelta(seconds=1),
    )
    store.pin_savepoint(str(tmp_path / "other"), holder="someone-else")
    store.set_job_status(dead, "LOST")
    shared = root / name / dead / "shared"

    c = _coordinator(store, "b" * 32, root, name)
    reads = c.holding.pin_reads
    _settle(c)
    assert reads == 1, "the start sweep reads the pins once"
    assert os.path.exists(held) and os.path.exists(latest)
    assert not os.path.exists(left), "a subsumed checkpoint its dead driver left was kept"
    assert not os.path.exists(expired), "a checkpoint whose pin expired was kept"
    assert os.path.exists(tmp_path / "elsewhere" / "chk-7"), "deleted outside the job's dir"
    # held checkpoint 2 may reference what was last used from 2 on: only s1 goes
    assert sorted(os.listdir(shared)) == ["s2", "s3", "s4", "s5"]
    assert [r.checkpoint_id for r in store.unreleased_checkpoints(name, exclude_job_id="x")] == [
        2,
        7,
    ], "deleted checkpoints are marked files_deleted"
    assert os.path.exists(one), "a row marked files_deleted is not adopted"

    # the new job's own checkpoints: one pins read per completed checkpoint, 2 stays held
    def complete(chk: int) -> None:
        location = root / name / c.job_id / f"chk-{chk}"
        location.mkdir(parents=True)
        c.add_completed(CompletedCheckpoint(chk, "CHECKPOINT", str(location), 0, 0, 0))

    for chk in (10, 11, 12):
        before = c.holding.pin_reads
        complete(chk)
        assert c.holding.pin_reads == before + 1
    assert os.path.exists(held)
    assert unpin_savepoint(store, holder="handover") == 1
    complete(13)
    _settle(c)
    assert not os.path.exists(root / name / c.job_id / "chk-12"), "own subsumed one kept"
    assert not os.path.exists(held), "the released checkpoint's files were kept"
    assert os.path.exists(latest), "a retained checkpoint was deleted"
    assert sorted(os.listdir(shared)) == ["s5"], "shared files of the retained one only"
    assert [r.checkpoint_id for r in store.unreleased_checkpoints(name, exclude_job_id="x")] == [7]
    c.cleaner.close()
    c.db.close(timeout=10)
    store.close()


DRIVER = """
from test_checkpoint_pins import _pipeline
p = _pipeline({root!r}, {name!r}, num_records=600_000)
p.metadata_url = {url!r}
p.run()
"""


def _shared_files(location: str) -> set[str]:
    """The shared files (absolute paths) a RocksDB checkpoint's ``_metadata`` references."""
    doc = load_snapshot(location).doc
    job_dir = os.path.dirname(location)
    return {
        os.path.join(job_dir, f["shared"])
        for op in doc["operators"].values()
        for sub in op["subtasks"]
        for f in (sub.get("keyed") or {}).get("files", ())
        if f.get("shared")
    }


def _intact(location: str, shared: set[str]) -> bool:
    return os.path.exists(os.path.join(location, "_metadata")) and all(
        os.path.exists(f) for f in shared
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restarted_driver_keeps_what_its_predecessor_held_and_deletes_it_after_the_unpin(
    tmp_path, monkeypatch
):
    """Blue (RocksDB, retained 1) holds two pinned checkpoints A and B when its driver is
    SIGKILLed; the next job of the name restores ``latest`` (L). A and B keep every file,
    and a fenced green restores A. After A's unpin the new job deletes A and the shared
    files only A referenced; after B's pin expired, B and its own shared files; L (the
    retained checkpoint it restored) keeps every file throughout. Local runner, ~60 s; on
    SQLite only (PostgreSQL's adoption queries run in the test above, without a driver)."""
    metadata_url = f"sqlite:///{tmp_path / 'meta' / 'ckpt.db'}"
    os.makedirs(tmp_path / "meta", exist_ok=True)
    root, name = str(tmp_path / "blue"), "held-blue"
    store = MetadataStore(metadata_url)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(root=root, name=name, url=metadata_url)],
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [HERE, str(SUPPORT_DIR), ROOT, os.environ.get("PYTHONPATH", "")])},
    )
    try:

        def blue():
            jobs = [j for j in store.list_jobs(job_name=name) if j.status == "RUNNING"]
            return jobs[0] if jobs else None

        def completed(job_id):
            return sorted(
                (c for c in store.list_checkpoints(job_id) if c.status == "COMPLETED"),
                key=lambda c: c.checkpoint_id,
            )

        _wait(
            lambda: (
                driver.poll() is None and blue() is not None and len(completed(blue().job_id)) >= 1
            ),
            "blue never completed a checkpoint",
            120,
        )
        job = blue()
        pinned = {}
        for holder in ("handover:a", "handover:b"):
            chk = None
            while chk is None:  # the newest one may be subsumed before the pin lands
                newest = completed(job.job_id)[-1]
                if (
                    pin_checkpoint(
                        store, job.job_id, newest.checkpoint_id, holder=holder, ttl_seconds=600
                    )
                    is not None
                ):
                    chk = newest
            pinned[holder] = chk
            _wait(
                lambda c=chk: (
                    store.get_checkpoint(job.job_id, c.checkpoint_id).status == "SUBSUMED"
                ),
                f"the checkpoint pinned by {holder} was never subsumed",
            )
            newest = completed(job.job_id)[-1].checkpoint_id
            # a few more checkpoints: RocksDB compacts the SSTs the pinned one references
            _wait(
                lambda n=newest: completed(job.job_id)[-1].checkpoint_id >= n + 6,
                "blue completed no more checkpoints",
            )
        a, b = pinned["handover:a"].location, pinned["handover:b"].location
        shared_a, shared_b = _shared_files(a), _shared_files(b)
        assert _intact(a, shared_a) and _intact(b, shared_b)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
    latest = completed(job.job_id)[-1].location
    shared_l = _shared_files(latest)
    assert (shared_a | shared_b) - shared_l, (
        "the pinned checkpoints reference no shared file L does not: nothing is tested"
    )

    print(
        f"A {len(shared_a)} shared files, B {len(shared_b)}, L {len(shared_l)}; only A's "
        f"{len(shared_a - shared_b - shared_l)}, not L's {len((shared_a | shared_b) - shared_l)}"
    )
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "2")  # blue's driver is dead: LOST
    time.sleep(2.5)
    blue_again = _pipeline(root, name, num_records=600_000)
    blue_again.metadata_url = metadata_url
    restarted = Background(blue_again, restore="latest")
    again = restarted.wait_running(min_checkpoints=2, timeout=120)
    assert store.get_job(again.job_id).restored_from == latest
    assert _intact(a, shared_a) and _intact(b, shared_b), "a pinned checkpoint lost files"

    # a fenced green (blue-green validation) restores A while the restarted blue runs on
    green_p = _pipeline(
        str(tmp_path / "green"), "held-green", num_records=600_000, out=os.path.join(root, "out")
    )
    green_p.metadata_url = metadata_url
    green = Background(green_p, restore=a, fence_sinks=True)
    green_job = green.wait_running(min_checkpoints=1, timeout=120)
    green.request(green_job.job_id, "CANCEL")
    assert green.result().status == "CANCELED" and green.result().restored_from == a

    assert unpin_savepoint(store, holder="handover:a") == 1
    _wait(lambda: not os.path.exists(a), "the restarted driver kept the released checkpoint")
    _wait(
        lambda: not any(os.path.exists(f) for f in shared_a - shared_b - shared_l),
        "the shared files only the released checkpoint referenced were kept",
    )
    assert _intact(b, shared_b) and _intact(latest, shared_l)

    store.pin_savepoint(
        canonical_location(b),
        holder="handover:b",  # the pin expires
        expires_at=datetime.now(UTC) - timedelta(seconds=1),
    )
    _wait(lambda: not os.path.exists(b), "the checkpoint whose pin expired was kept")
    _wait(
        lambda: not any(os.path.exists(f) for f in (shared_a | shared_b) - shared_l),
        "the shared files only the expired checkpoint referenced were kept",
    )
    assert _intact(latest, shared_l), "a file of the retained checkpoint was deleted"
    assert store.unreleased_checkpoints(name, exclude_job_id=again.job_id) == []
    restarted.request(again.job_id, "CANCEL")
    assert restarted.result().status == "CANCELED"
    assert _intact(latest, shared_l), "a file of the retained checkpoint was deleted"
    # a job that ended marked what it deleted: the next one adopts nothing
    assert store.unreleased_checkpoints(name, exclude_job_id="-") == []
    store.close()


@pytest.mark.timeout(120)
def test_many_pins_do_not_stop_the_deletion_of_subsumed_checkpoints(tmp_path):
    """The sweep read every active pin, once per completed checkpoint: with 20,000 pins on
    SQLite that read took longer than the job master waits for a read (0.5 s), the sweep
    then kept every subsumed checkpoint ("the DB cannot say") and none was ever deleted.
    Now it reads only the pins of its candidates (tools/microbench/pins_read.py). Seconds."""
    from sqlalchemy import insert

    from airflow_checkpoint_provider.engine.catalog.models import SavepointPinRow

    store = MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}")
    now = datetime.now(UTC)
    with store.engine.begin() as conn:
        conn.execute(
            insert(SavepointPinRow),
            [
                dict(location=f"/elsewhere/savepoint-{i}", holder="h", created_at=now)
                for i in range(20_000)
            ],
        )
    root = tmp_path / "ckpt"
    c = _coordinator(store, "d" * 32, root, "many-pins")
    locations = []
    for chk in (1, 2, 3):
        location = root / "many-pins" / c.job_id / f"chk-{chk}"
        location.mkdir(parents=True)
        locations.append(location)
        c.add_completed(CompletedCheckpoint(chk, "CHECKPOINT", str(location), 0, 0, 0))
    _settle(c)
    assert [os.path.exists(loc) for loc in locations] == [False, False, True]
    assert c.holding.held == []
    c.cleaner.close()
    c.db.close(timeout=10)
    store.close()
