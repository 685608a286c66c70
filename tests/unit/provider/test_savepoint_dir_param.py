"""The savepoint_dir param takes S3 savepoint directories under the DAG author's roots
(issue 54 item 6), refuses the rest with a message naming the roots (not the whole regex),
and the worker's check_directory applies the same rule to S3 URLs."""

from __future__ import annotations

import pytest
from airflow.sdk.definitions.param import ParamValidationError

from airflow_checkpoint_provider.params import (
    DirectoryNotAllowedError,
    check_directory,
    directory_param,
    env_roots,
    normalized_roots,
)

ROOTS = ["/data/sp", "s3://team-bucket/savepoints"]


def test_s3_savepoint_dirs_under_a_root_are_accepted_at_run_creation_and_in_the_worker():
    param = directory_param("savepoint directory", ROOTS)
    for value in ("", "s3://team-bucket/savepoints", "s3://team-bucket/savepoints/v2",
                  "/data/sp/x"):
        assert param.resolve(value) == value
        assert check_directory("savepoint_dir", value, ROOTS) in (value, value.rstrip("/"))


@pytest.mark.parametrize("value", [
    "s3://other-bucket/savepoints", "s3://team-bucket/savepoints-x",
    "s3://team-bucket/savepoints/../other", "s3://team-bucket/savepoints/\n", "/etc",
    "file:///data/sp"])
def test_other_values_are_refused_with_a_message_naming_the_roots(value):
    param = directory_param("savepoint directory", ROOTS)
    with pytest.raises(ParamValidationError) as refused:
        param.resolve(value)
    first = str(refused.value).splitlines()[0]
    assert "(?!" not in first and len(first) < 240, first  # not the old lookahead regex
    # it names the roots, or what is never allowed
    assert "|s3://team-bucket/savepoints)" in first or "'..' path component" in first, first
    with pytest.raises(DirectoryNotAllowedError, match="is not under the allowed roots "
                       r"\(/data/sp, s3://team-bucket/savepoints\)"):
        check_directory("savepoint_dir", value, ROOTS)


def test_s3_roots_are_checked_and_read_from_the_environment_with_their_colon(monkeypatch):
    assert normalized_roots(["s3://b-1/sp/"]) == ("s3://b-1/sp",)
    for bad in ("s3://", "s3://UPPER/x", "s3://b-1/../x", "gs://b/x"):
        with pytest.raises(ValueError):
            normalized_roots([bad])
    monkeypatch.setenv("CKPT_ALLOWED_SAVEPOINT_ROOTS", "/data/sp:s3://team-bucket/sp")
    assert env_roots("CKPT_ALLOWED_SAVEPOINT_ROOTS") == ("/data/sp", "s3://team-bucket/sp")


def test_the_bundled_dags_worker_roots_take_an_s3_root_from_the_deployment(monkeypatch, tmp_path):
    """The example DAGs' savepoint_dir: roots read in the worker (example_savepoint_roots),
    where the deployment's $CKPT_ALLOWED_SAVEPOINT_ROOTS may name an S3 prefix."""
    from airflow_checkpoint_provider.params import check_run_params, example_savepoint_roots

    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("CKPT_ALLOWED_SAVEPOINT_ROOTS", "s3://team-bucket/savepoints")
    schemas = {"savepoint_dir": directory_param("savepoint directory")}
    check_run_params({"savepoint_dir": "s3://team-bucket/savepoints/orders"}, schemas,
                     {"savepoint_dir": example_savepoint_roots})
    with pytest.raises(DirectoryNotAllowedError, match="s3://team-bucket/savepoints"):
        check_run_params({"savepoint_dir": "s3://other/savepoints"}, schemas,
                         {"savepoint_dir": example_savepoint_roots})
