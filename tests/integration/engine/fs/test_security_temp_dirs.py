"""Issue 50, break 7: temporary directories another local user cannot pre-empt.

The attack: the engine and the provider used predictable names in the shared ``$TMPDIR``
(``checkpoint-code-<uid>``, ``checkpoint-submit-<uid>``, ``checkpoint-jobs-<uid>``,
``ckpt-rocksdb-<uid>``, ``checkpoint-reports-<uid>``). Another local user who created them
first made every job of that uid fail ("belongs to uid 1001 ... refusing to use it"). Now
they all live in one private base directory of this user; when another user holds its
predictable name, the base is an unpredictable ``mkdtemp`` one, found again by ownership.

The attacker is real here: the squatted directories belong to uid 1001 (the tests run as
root) in a ``1777`` directory standing in for ``/tmp``.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile

import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.datastream.api import default_metadata_url
from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.fs import private
from airflow_checkpoint_provider.engine.fs.private import (
    TEMP_DIR_ENV,
    user_temp_base,
    user_temp_dir,
)
from airflow_checkpoint_provider.examples.running_sum import RunningSum

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

ATTACKER = 1001
OLD_NAMES = ("checkpoint-code", "checkpoint-submit", "checkpoint-jobs", "ckpt-rocksdb",
             "checkpoint-reports")


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A ``1777`` directory that is ``$TMPDIR`` for this test and its child processes (the
    real ``/tmp`` is shared with other test runs: they must not see the squatted names)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv(TEMP_DIR_ENV, raising=False)
    monkeypatch.delenv("CKPT_LOCAL_DIR", raising=False)
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    monkeypatch.setattr(private, "_temp_bases", {})
    return str(tmp)


def _squat(tmp: str, name: str, *, world_writable: bool = False) -> str:
    path = os.path.join(tmp, name)
    os.mkdir(path)
    os.chown(path, ATTACKER, ATTACKER)
    os.chmod(path, 0o777 if world_writable else 0o755)
    return path


def _squat_everything(tmp: str) -> None:
    uid = os.getuid()
    for i, name in enumerate(OLD_NAMES):
        _squat(tmp, f"{name}-{uid}", world_writable=bool(i % 2))
    _squat(tmp, f"airflow-checkpoint-{uid}")  # the new predictable base name too
    _squat(tmp, f"airflow-checkpoint-{uid}.aaaaaaaa")  # and a fallback-looking one


def _own_private(path: str) -> None:
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid(), path
    assert stat.S_IMODE(st.st_mode) == 0o700, (path, oct(st.st_mode))


@pytest.mark.timeout(60)
def test_squatted_names_are_never_used_and_the_fallback_base_is_found_again(shared_tmp):
    _squat_everything(shared_tmp)

    base = user_temp_base()
    _own_private(base)
    assert os.path.dirname(base) == shared_tmp
    assert os.path.basename(base).startswith(f"airflow-checkpoint-{os.getuid()}.")
    assert base != os.path.join(shared_tmp, f"airflow-checkpoint-{os.getuid()}.aaaaaaaa")
    for name in OLD_NAMES:
        d = user_temp_dir(name)
        _own_private(d)
        assert os.path.dirname(d) == base
    # another process (no cache) finds the same base: by ownership, not by a name
    private._temp_bases.clear()
    assert user_temp_base() == base


@pytest.mark.timeout(60)
def test_the_configured_temp_root_is_used_and_must_be_private(shared_tmp, tmp_path, monkeypatch):
    root = tmp_path / "configured" / "tmp-root"
    monkeypatch.setenv(TEMP_DIR_ENV, str(root))
    assert user_temp_dir("checkpoint-jobs") == str(root / "checkpoint-jobs")
    _own_private(str(root))
    _own_private(str(root / "checkpoint-jobs"))

    foreign = _squat(shared_tmp, "foreign-root")
    monkeypatch.setenv(TEMP_DIR_ENV, foreign)
    with pytest.raises(ConfigurationError, match=rf"\${TEMP_DIR_ENV}.*belongs to uid {ATTACKER}"):
        user_temp_dir("checkpoint-jobs")


@pytest.mark.timeout(240)
def test_jobs_and_the_submit_hook_work_when_another_user_squatted_the_temp_names(
        shared_tmp, tmp_path, monkeypatch):
    from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook
    from airflow_checkpoint_provider.links.checkpoint import write_history_report

    _squat_everything(shared_tmp)

    # a real job with RocksDB state in its default (temp) working directory
    root = tmp_path / "job"
    p = Pipeline("squat-sum", state_backend="rocksdb",
                 checkpoint=CheckpointConfig(interval_ms=200, directory=str(root / "checkpoints")))
    (p.source(GeneratorSource(2_000, num_keys=10, seed=1), uid="gen", parallelism=2)
      .key_by("key")
      .process(RunningSum(), uid="sum", parallelism=2)
      .sink(FileSink(str(root / "out")), uid="sink"))
    result = p.run(job_id="squat1")
    assert result.status == "FINISHED", result

    # the history report in its default directory
    url = default_metadata_url(str(root / "checkpoints"))
    with MetadataStore(url) as store:
        report = write_history_report(store, "squat1")
    assert os.path.isfile(report) and os.path.dirname(os.path.dirname(report)) == user_temp_base()

    # the hook: code archives, the remote driver's environment, the detached log file
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SQUAT", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))
    hook = CheckpointSubmitHook(
        pipeline="airflow_checkpoint_provider.examples.running_sum:build", job_id="squat2",
        job_name="squat", metadata_url=url, runner="spark", conn_id="spark_squat",
        ship_code=True)
    cmd = hook.command()
    archives = cmd[cmd.index("--py-files") + 1].split(",")
    assert archives and all(a.startswith(user_temp_base() + os.sep) for a in archives), archives
    assert hook.log_file().startswith(user_temp_base() + os.sep)

    # nothing was created in (or through) the squatted directories
    for name in OLD_NAMES:
        assert os.listdir(os.path.join(shared_tmp, f"{name}-{os.getuid()}")) == []
