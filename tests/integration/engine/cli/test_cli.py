import json

import pytest
from click.testing import CliRunner

from airflow_checkpoint_provider.engine.cli import main


@pytest.mark.timeout(120)
def test_run_then_list_jobs_checkpoints_and_inspect(workdir, monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(workdir))
    monkeypatch.setenv("CKPT_EXAMPLE_RECORDS", "5000")
    db = f"sqlite:///{workdir}/checkpoints/metadata.db"
    runner = CliRunner()
    res = runner.invoke(main, ["run", "airflow_checkpoint_provider.examples.running_sum:build",
                               "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    result = json.loads(res.output[res.output.index("{"):])
    assert result["status"] == "FINISHED"

    res = runner.invoke(main, ["jobs", "--db", db, "--json"])
    jobs = json.loads(res.output)
    assert [j["job_id"] for j in jobs] == [result["job_id"]]
    assert jobs[0]["status"] == "FINISHED"

    res = runner.invoke(main, ["checkpoints", "running-sum", "--db", db, "--json"])
    rows = json.loads(res.output)
    assert rows and rows[-1]["status"] == "COMPLETED" and rows[-1]["kind"] == "CHECKPOINT"
    assert {"checkpoint_id", "duration_ms", "state_size", "location"} <= set(rows[-1])

    res = runner.invoke(main, ["inspect", result["latest_checkpoint"], "--json"])
    info = json.loads(res.output)
    ops = {o["uid"]: o for o in info["operators"]}
    assert set(ops) == {"generator", "running-sum", "file-sink"}
    assert ops["running-sum"]["states"] == {"count": {"kind": "value", "serializer": "msgpack"},
                                            "sum": {"kind": "value", "serializer": "msgpack"}}
    assert [s["key_group_range"] for s in ops["running-sum"]["subtasks"]] == [[0, 63], [64, 127]]


def test_inspect_of_a_path_that_is_not_a_checkpoint_names_it(tmp_path):
    res = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert res.exit_code == 1
    assert f"restore path {tmp_path} is not a completed checkpoint" in res.output


def test_checkpoints_of_unknown_job_names_it(tmp_path):
    db = f"sqlite:///{tmp_path}/m.db"
    assert CliRunner().invoke(main, ["db", "upgrade", "--db", db]).exit_code == 0
    res = CliRunner().invoke(main, ["checkpoints", "nope", "--db", db])
    assert res.exit_code == 1 and "nope" in res.output


def test_run_with_bad_reference_names_it():
    res = CliRunner().invoke(main, ["run", "no_such_module_xyz:build"])
    assert res.exit_code == 2 and "no_such_module_xyz" in res.output
