"""Issue 42 gap: RocksDB working directories (a job's keyed state on a slot's host) were
created with the umask's default modes (``0755``) under a shared ``/tmp/ckpt-rocksdb`` that
any local user could create first. Now they are ``0700`` like the engine's other
directories: the default root is ``ckpt-rocksdb`` in this user's private temp base (a name
another user cannot pre-empt) and ``$CKPT_LOCAL_DIR`` is created ``0700`` (refused if
another user owns or may write it)."""

from __future__ import annotations

import os
import stat

import pytest

from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.state.keygroups import key_group_range_for
from airflow_checkpoint_provider.engine.state.rocksdb import (
    LOCAL_DIR_ENV,
    RocksDBKeyedStateBackend,
    local_root,
)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _backend() -> RocksDBKeyedStateBackend:
    return RocksDBKeyedStateBackend("op", key_group_range_for(0, 1, 128), 128)


def test_rocksdb_working_directories_are_private(tmp_path, monkeypatch):
    old = os.umask(0o022)
    try:
        root = tmp_path / "a" / "b"
        monkeypatch.setenv(LOCAL_DIR_ENV, str(root))
        backend = _backend()
        try:
            assert backend.workdir.startswith(str(root))
            for d in (tmp_path / "a", root, backend.workdir):
                assert _mode(str(d)) == 0o700, f"{d} is {_mode(str(d)):o}"
        finally:
            backend.close()
        monkeypatch.delenv(LOCAL_DIR_ENV)
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
        os.mkdir(tmp_path / "tmp")
        import tempfile

        monkeypatch.setattr(tempfile, "tempdir", None)  # re-read $TMPDIR
        default = local_root()
        assert default == str(tmp_path / "tmp" / f"airflow-checkpoint-{os.getuid()}" / "ckpt-rocksdb")
        assert _mode(default) == 0o700
    finally:
        os.umask(old)


def test_a_configured_root_others_may_write_is_refused(tmp_path, monkeypatch):
    planted = tmp_path / "shared-rocksdb"
    planted.mkdir()
    os.chmod(planted, 0o777)  # what another user's pre-created directory allows
    monkeypatch.setenv(LOCAL_DIR_ENV, str(planted))
    with pytest.raises(ConfigurationError, match=r"\$CKPT_LOCAL_DIR .* writable by other users"):
        _backend()


def test_a_default_root_another_user_created_is_not_used(tmp_path, monkeypatch):
    # issue 50, break 7: the old predictable name, squatted, failed every job
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(LOCAL_DIR_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    planted = tmp_path / f"ckpt-rocksdb-{os.getuid()}"
    planted.mkdir()
    os.chmod(planted, 0o777)
    backend = _backend()
    try:
        assert not backend.workdir.startswith(str(planted))
        assert os.listdir(planted) == []
    finally:
        backend.close()
