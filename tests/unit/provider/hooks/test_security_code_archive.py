"""Issue 42, item 3: the code archives shipped to executors (``ship_code=True``) came from
the shared ``$TMPDIR/checkpoint-code`` and any existing file of the right name was reused;
another local user who planted ``airflow_checkpoint_provider-<hash>.zip`` there had the job
import their code. Now the directory is private (``checkpoint-code`` in this user's private temp base, ``0700``,
owner and mode checked) and an archive is reused only if its full SHA-256 matches."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zipfile

import pytest

from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.fs.private import user_temp_base, user_temp_dir
from airflow_checkpoint_provider.engine.packaging import code_archives
from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook

REF = "airflow_checkpoint_provider.examples.versioned_sum:build_v1"
OTHER_UID = 4242


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """``$TMPDIR`` (what tempfile.gettempdir() says) is a fresh directory."""
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def _forged(path) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("airflow_checkpoint_provider/__init__.py", "import os; os.system('id')\n")


def _hook(tmp_path, **kw) -> CheckpointSubmitHook:
    return CheckpointSubmitHook(
        pipeline=REF,
        job_id="j1",
        job_name="x",
        runner="spark",
        metadata_url=f"sqlite:///{tmp_path}/m.db",
        ship_code=True,
        **kw,
    )


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_an_archive_planted_in_the_shared_temp_dir_is_never_shipped(tmpdir_env, tmp_path):
    genuine = code_archives(REF, str(tmp_path / "scratch"))[0]
    name = os.path.basename(genuine)
    cache = user_temp_dir("checkpoint-code")  # this user's private temp base
    for planted_dir in (
        tmpdir_env / "checkpoint-code",
        tmpdir_env / f"checkpoint-code-{os.getuid()}",
    ):
        planted_dir.mkdir(mode=0o700)
        _forged(planted_dir / name)  # same name, other content (here: owned by this user)
    _forged(os.path.join(cache, name))  # even in the cache itself

    shipped = _hook(tmp_path)._py_files.split(",")[0]

    assert os.path.basename(shipped) == name
    assert _sha(shipped) == _sha(genuine)  # rewritten: the hash is checked on every reuse
    assert os.path.dirname(shipped) == cache
    assert os.path.dirname(cache) == user_temp_base()
    assert stat.S_IMODE(os.stat(os.path.dirname(shipped)).st_mode) == 0o700


def test_a_cache_dir_created_by_another_user_is_refused(tmpdir_env, tmp_path):
    planted = tmpdir_env / "theirs"
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(ConfigurationError, match=rf"{planted} belongs to uid {OTHER_UID}"):
        _hook(tmp_path, code_cache_dir=str(planted))


def test_the_old_predictable_cache_name_of_another_user_is_not_used(tmpdir_env, tmp_path):
    # issue 50, break 7: squatting the predictable name failed every job (a denial of service)
    planted = tmpdir_env / f"checkpoint-code-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    shipped = _hook(tmp_path)._py_files.split(",")[0]
    assert os.path.dirname(shipped) == user_temp_dir("checkpoint-code")


def test_a_group_or_world_writable_cache_dir_is_refused(tmp_path):
    loose = tmp_path / "code"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(ConfigurationError, match=rf"{loose} is writable by other users"):
        _hook(tmp_path, code_cache_dir=str(loose))


def test_a_symlink_in_place_of_an_archive_is_replaced_not_followed(tmp_path):
    cache = tmp_path / "code"
    genuine = code_archives(REF, str(tmp_path / "scratch"))[0]
    cache.mkdir(mode=0o700)
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    os.symlink(target, cache / os.path.basename(genuine))

    shipped = code_archives(REF, str(cache))[0]

    assert not os.path.islink(shipped) and _sha(shipped) == _sha(genuine)
    assert target.read_text() == "keep me"
    assert stat.S_IMODE(os.stat(shipped).st_mode) == 0o600


def test_a_symlinked_cache_dir_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "link")
    with pytest.raises(ConfigurationError, match="is not a directory"):
        code_archives(REF, str(tmp_path / "link"))
