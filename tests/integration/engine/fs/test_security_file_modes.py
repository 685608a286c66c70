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


# -- issue 50, break 8: sink output is private by default ---------------------------------------


def _sink_job(root: str, sink, job_id: str):
    from airflow_checkpoint_provider.engine import CheckpointConfig, GeneratorSource, Pipeline

    p = Pipeline("modes", checkpoint=CheckpointConfig(interval_ms=100,
                                                      directory=os.path.join(root, "ckpt")))
    p.source(GeneratorSource(2_000, num_keys=5, seed=3), uid="gen", parallelism=2).sink(
        sink, uid="out")
    return p.run(job_id=job_id)


def _tree_modes(directory: str) -> tuple[set[int], set[int], int]:
    """Modes of the directories (``directory`` itself too) and files below it; file count."""
    dirs, files, n = {_mode(directory)}, set(), 0
    for dirpath, dirnames, filenames in os.walk(directory):
        dirs.update(_mode(os.path.join(dirpath, d)) for d in dirnames)
        files.update(_mode(os.path.join(dirpath, f)) for f in filenames)
        n += len(filenames)
    return dirs, files, n


@pytest.mark.timeout(180)
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_file_sink_output_is_private_by_default(shared_base, monkeypatch, partitioned):
    from airflow_checkpoint_provider.engine import FileSink
    from airflow_checkpoint_provider.engine.connectors.files.sink import read_committed

    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    out = os.path.join(shared_base, "out")
    old = os.umask(0o022)  # the usual umask: part files were 0644, _staging 0755
    try:
        sink = FileSink(out, partition_by=["key"] if partitioned else None)
        assert _sink_job(shared_base, sink, "modes-private").status == "FINISHED"
    finally:
        os.umask(old)
    dirs, files, n = _tree_modes(out)
    assert n >= 2 and files == {0o600}, sorted(map(oct, files))
    assert dirs == {0o700}, sorted(map(oct, dirs))
    assert len(list(read_committed(out))) == 2_000  # its owner reads the committed output
    part = next(os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs
                if f.startswith("part-"))
    os.chmod(out, 0o755)
    for d, _, _ in os.walk(out):
        os.chmod(d, 0o755)
    assert not _other_user_reads(part)  # even with the directories opened up: the file


@pytest.mark.timeout(180)
def test_file_sink_modes_can_be_widened(shared_base, monkeypatch):
    from airflow_checkpoint_provider.engine import FileSink
    from airflow_checkpoint_provider.engine.connectors.files.sink import read_committed

    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    out = os.path.join(shared_base, "shared-out")
    old = os.umask(0o077)  # the options are exact: a strict umask does not narrow them
    try:
        sink = FileSink(out, partition_by=["key"], file_mode=0o644, dir_mode=0o755)
        assert _sink_job(shared_base, sink, "modes-wide").status == "FINISHED"
    finally:
        os.umask(old)
    dirs, files, n = _tree_modes(out)
    assert n >= 2 and files == {0o644} and dirs == {0o755}, (dirs, files)
    assert len(list(read_committed(out))) == 2_000
    part = next(os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs
                if f.startswith("part-"))
    assert _other_user_reads(part)


def test_file_sink_modes_must_let_the_owner_read_and_write():
    from airflow_checkpoint_provider.engine import FileSink
    from airflow_checkpoint_provider.engine.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="file_mode 0o400"):
        FileSink("/tmp/x", file_mode=0o400)
    with pytest.raises(ConfigurationError, match="dir_mode 0o600"):
        FileSink("/tmp/x", dir_mode=0o600)
    with pytest.raises(ConfigurationError, match="file_mode"):
        FileSink("/tmp/x", file_mode=0o10644)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("widened", [False, True], ids=["default", "widened"])
def test_delta_sink_table_files_are_private_by_default(shared_base, monkeypatch, widened):
    pytest.importorskip("deltalake")
    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    table = os.path.join(shared_base, "table")
    modes = {"file_mode": 0o640, "dir_mode": 0o750} if widened else {}
    old = os.umask(0o022)  # delta-rs creates its files with the umask's modes: 0644 before
    try:
        result = _sink_job(shared_base, DeltaSink(table, **modes), f"delta-{widened}")
        assert result.status == "FINISHED"
        assert os.umask(0o022) == 0o022  # the sink left the process's umask as it was
    finally:
        os.umask(old)
    dirs, files, n = _tree_modes(table)
    data = [f for d, _, fs in os.walk(table) for f in fs if f.endswith(".parquet")]
    assert data and n > len(data)  # data files and the _delta_log
    if widened:  # the table; its staging directory (uncommitted epochs) stays the engine's
        staging = os.path.join(table, "_ckpt_staging")
        assert _mode(staging) == 0o700
        os.chmod(staging, 0o750)
        dirs, files, n = _tree_modes(table)
        assert files == {0o640} and dirs == {0o750}, (sorted(map(oct, dirs)), sorted(map(oct, files)))
    else:
        assert files == {0o600} and dirs == {0o700}, (sorted(map(oct, dirs)), sorted(map(oct, files)))
    import deltalake

    assert deltalake.DeltaTable(table).to_pyarrow_table().num_rows == 2_000
