"""Issue 42, item 2: what the engine creates is private to its owner.

The attack: the SQLite metadata DB was ``-rw-r--r--``; another local user read
``snapshot_keys``, forged a savepoint, and ``ckpt run --restore`` accepted it as signed.
Now the DB file (and its -wal/-shm), checkpoint and savepoint files, reports and detached
job logs are created ``0600`` in directories created ``0700``. "Another local user" is a
real one here: ``cat`` run as uid 65534 (nobody) in a directory everyone may traverse."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.fs.storage import LocalFileSystem

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


@pytest.fixture
def shared_base():
    """A directory under /tmp that every user may traverse (like a deployment's data dir)."""
    base = tempfile.mkdtemp(prefix="ckpt-modes-", dir="/tmp")
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _other_user_reads(path: str) -> bool:
    proc = subprocess.run(["cat", path], user=NOBODY, capture_output=True, timeout=30)
    return proc.returncode == 0


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_metadata_db_and_its_signing_key_are_private(shared_base):
    old = os.umask(0o022)  # the usual umask: the old code's DB was 0644
    try:
        db = os.path.join(shared_base, "meta", "catalog.db")
        with MetadataStore(f"sqlite:///{db}") as store:
            assert store.snapshot_key() is not None  # the key is in this file now
            store.create_job(job_id="j1", job_name="j", parallelism=1)
            wal = db + "-wal"
            assert os.path.exists(wal)
            assert _mode(wal) == 0o600
    finally:
        os.umask(old)
    assert _mode(db) == 0o600 and _mode(os.path.dirname(db)) == 0o700
    assert not _other_user_reads(db)


def test_checkpoint_files_and_their_directories_are_private(shared_base):
    old = os.umask(0o022)
    try:
        path = os.path.join(shared_base, "ckpt", "j", "job1", "chk-1", "_metadata")
        LocalFileSystem().write_bytes(path, b"state", atomic=True)
        part = os.path.join(shared_base, "ckpt", "j", "job1", "chk-1", "op-0.state")
        LocalFileSystem().write_bytes(part, b"state")
    finally:
        os.umask(old)
    assert _mode(path) == 0o600 and _mode(part) == 0o600
    for d in ("ckpt", "ckpt/j", "ckpt/j/job1", "ckpt/j/job1/chk-1"):
        assert _mode(os.path.join(shared_base, d)) == 0o700, d
    os.chmod(os.path.join(shared_base, "ckpt", "j", "job1", "chk-1"), 0o755)
    for d in ("ckpt", "ckpt/j", "ckpt/j/job1"):
        os.chmod(os.path.join(shared_base, d), 0o755)
    assert not _other_user_reads(path)  # even with the directories opened up: the file


def test_a_report_is_private(shared_base):
    pytest.importorskip("matplotlib")
    from airflow_checkpoint_provider.engine.lifecycle.report import render_report

    db = os.path.join(shared_base, "meta.db")
    with MetadataStore(f"sqlite:///{db}") as store:
        store.create_job(job_id="j1", job_name="j", parallelism=1)
        out = render_report(store, "j1", os.path.join(shared_base, "reports", "r.html"))
    assert _mode(str(out)) == 0o600 and _mode(os.path.dirname(str(out))) == 0o700


def test_an_existing_world_readable_db_is_reported(shared_base, caplog):
    db = os.path.join(shared_base, "loose.db")
    MetadataStore(f"sqlite:///{db}").close()
    os.chmod(db, 0o644)
    with caplog.at_level(logging.WARNING), MetadataStore(f"sqlite:///{db}"):
        pass
    assert f"metadata DB {db} has mode 644: other local users can read" in caplog.text
