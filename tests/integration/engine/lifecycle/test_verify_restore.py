"""ckpt verify-restore: a pipeline's compatibility with a snapshot, checked without starting
the job (uids, operator kinds, state kinds, parallelism, corrupt files)."""

import json
import os

import pytest
from click.testing import CliRunner
from pipelines import Background, versioned_pipeline
from repo_paths import SUPPORT_DIR

from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.lifecycle.verify import verify_restore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("sp")
    bg = Background(versioned_pipeline(str(root), "v1", num_records=10**9, rate=3000))
    job = bg.wait_running()
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    bg.result()
    return root, req.result["location"]


def test_compatible_upgrades_and_rescales_pass(savepoint, tmp_path):
    root, location = savepoint
    report = verify_restore(versioned_pipeline(str(tmp_path), "v1"), location, parallelism=3)
    assert report.ok, report.describe()
    assert report.parallelism["sum"] == 3
    assert {o.split("[")[0] for o in report.operators_opened} >= {"gen", "sum", "audit"}
    # v2 drops 'audit': fine only with allow_non_restored_state
    refused = verify_restore(versioned_pipeline(str(tmp_path), "v2"), location)
    assert not refused.ok and refused.problems[0].uid == "audit"
    assert verify_restore(versioned_pipeline(str(tmp_path), "v2"), location,
                          allow_non_restored_state=True).ok


def test_a_changed_state_kind_is_named_with_its_operator_and_state(savepoint, tmp_path):
    _, location = savepoint
    report = verify_restore(versioned_pipeline(str(tmp_path), "v2-bad"), location,
                            allow_non_restored_state=True)
    assert not report.ok
    problem = report.problems[0]
    assert problem.uid == "sum" and problem.state == "sum", problem


def test_cli_reports_and_exits_nonzero_on_a_corrupt_snapshot(savepoint, tmp_path, monkeypatch):
    import shutil

    _, location = savepoint
    monkeypatch.syspath_prepend(str(SUPPORT_DIR))
    res = CliRunner().invoke(ckpt, ["verify-restore", "pipelines_ref:v1", location, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["ok"] is True
    broken = tmp_path / "broken"
    shutil.copytree(location, broken)
    state = next(f for f in os.listdir(broken) if f != "_metadata")
    with open(broken / state, "ab") as f:
        f.write(b"x")
    res = CliRunner().invoke(ckpt, ["verify-restore", "pipelines_ref:v1", str(broken)])
    assert res.exit_code == 1 and "CANNOT RESTORE" in res.output and state in res.output


def test_cli_reports_a_declared_key_type_change(savepoint, monkeypatch):
    _, location = savepoint
    monkeypatch.syspath_prepend(str(SUPPORT_DIR))
    res = CliRunner().invoke(ckpt, ["verify-restore", "pipelines_ref:v1", location,
                                    "--key-type", "sum=str", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["key_types"]["sum"] == "str"
    res = CliRunner().invoke(ckpt, ["verify-restore", "pipelines_ref:v1", location,
                                    "--key-type", "sum=int"])
    assert res.exit_code == 1 and "the job keys this operator by int" in res.output, res.output
    res = CliRunner().invoke(ckpt, ["verify-restore", "pipelines_ref:v1", location,
                                    "--key-type", "sum"])
    assert res.exit_code == 2 and "UID=TYPE" in res.output
