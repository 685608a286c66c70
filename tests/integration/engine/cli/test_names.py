"""Names that become paths are validated in one place (engine/names.py) at every entry."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from pipelines import running_sum_pipeline

from airflow_checkpoint_provider.engine import (
    InvalidNameError,
    JobIdInUseError,
    Pipeline,
    read_committed,
)
from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.names import (
    ensure_under,
    validate_job_id,
    validate_job_name,
    validate_uid,
)

EXAMPLE = "airflow_checkpoint_provider.examples.running_sum:build"


@pytest.mark.parametrize("bad", ["", "../../../escaped-job", "a/b", ".hidden", "-x", "a..b",
                                 "x" * 129, "a b", "a\x00b", "naïve", "a\\b"])
def test_bad_names_are_refused_with_the_pattern(bad):
    with pytest.raises(InvalidNameError, match="job name"):
        validate_job_name(bad)


def test_good_names_pass_and_ids_are_at_most_64_characters():
    for good in ("orders", "orders-v2.1", "A_b-c.d", "x" * 128, "nightly-2024-01-01"):
        assert validate_job_name(good) == good
    assert validate_job_id("a" * 64)
    with pytest.raises(InvalidNameError, match="1 to 64 characters"):
        validate_job_id("a" * 65)
    with pytest.raises(InvalidNameError, match="operator uid"):
        validate_uid("../sink")


def test_ensure_under_resolves_dot_dot_and_symlinks(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    assert ensure_under(str(root), str(root / "job" / "id"))
    with pytest.raises(InvalidNameError, match="escapes its root"):
        ensure_under(str(root), str(root / ".." / "elsewhere"))
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(InvalidNameError, match="escapes its root"):
        ensure_under(str(root), str(root / "link" / "x"))
    assert ensure_under("s3://b/ckpt", "s3://b/ckpt/job/id")
    with pytest.raises(InvalidNameError):
        ensure_under("s3://b/ckpt", "s3://b/ckpt/../other")


@pytest.mark.parametrize("flag, value", [("--job-name", "../../../escaped-job"),
                                         ("--job-name", "x" * 300),
                                         ("--job-id", "../id")])
def test_ckpt_run_refuses_bad_names_cleanly_and_writes_nothing(tmp_path, monkeypatch, flag, value):
    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(tmp_path / "root"))
    monkeypatch.setenv("CKPT_EXAMPLE_RECORDS", "100")
    res = CliRunner().invoke(main, ["run", EXAMPLE, flag, value])
    assert res.exit_code != 0
    assert "Traceback" not in res.output and flag in res.output, res.output
    assert not (tmp_path / "escaped-job").exists() and not (tmp_path / "root").exists()


def test_pipeline_names_and_uids_are_validated_at_definition():
    with pytest.raises(InvalidNameError, match="pipeline name"):
        Pipeline("../x")
    p = Pipeline("ok")
    p.name = "../../../escaped"  # changed after construction: caught when it runs
    with pytest.raises(InvalidNameError):
        p.run()


@pytest.mark.timeout(120)
def test_job_ids_sharing_a_prefix_keep_all_their_rows(workdir):
    out = str(workdir / "shared-out")
    totals = []
    for job_id in ("nightly-2024-01-01", "nightly-2024-01-02"):
        p = running_sum_pipeline(str(workdir / job_id), num_records=2000, out=out,
                                 source_parallelism=1, keyed_parallelism=1)
        assert p.run(job_id=job_id).status == "FINISHED"
        totals.append(sum(1 for _ in read_committed(out)))
    assert totals == [2000, 4000]
    names = os.listdir(out)
    assert any("nightly-2024-01-01" in n for n in names)
    assert any("nightly-2024-01-02" in n for n in names)


@pytest.mark.timeout(120)
def test_reusing_a_job_id_is_a_clean_error(workdir):
    p = running_sum_pipeline(str(workdir), num_records=200, source_parallelism=1,
                             keyed_parallelism=1)
    assert p.run(job_id="once").status == "FINISHED"
    with pytest.raises(JobIdInUseError, match="job id 'once' already exists.*pick another id"):
        p.run(job_id="once")
