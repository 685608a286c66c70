"""One run request from the DAG to the coordinator (issue 53 item 4): the submit operator
builds the engine's RunRequest, the hook serializes it once (the arguments of ``ckpt run``),
and the CLI (or spark-submit's launch script) reads back an equal request, which sets the
pipeline's CheckpointConfig."""

from __future__ import annotations

import pytest

from airflow_checkpoint_provider.engine import CheckpointConfig, ConfigurationError
from airflow_checkpoint_provider.engine.cli import load_pipeline
from airflow_checkpoint_provider.engine.cli.jobs import parse_run_argv
from airflow_checkpoint_provider.engine.client import (
    CheckpointOverrides,
    Restore,
    RestoreKind,
    RunRequest,
)
from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

PIPELINE = "airflow_checkpoint_provider.examples.versioned_sum:build_v1"


def _operator(**options) -> SubmitCheckpointedJobOperator:
    return SubmitCheckpointedJobOperator(task_id="submit", pipeline=PIPELINE,
                                         job_name="versioned-sum", runner="local", **options)


def _through_the_cli(request: RunRequest, tmp_path) -> tuple[RunRequest, CheckpointConfig]:
    """The hook's command for ``request``, read back as ``ckpt run`` reads it, and the
    pipeline's CheckpointConfig once the CLI applied it."""
    hook = CheckpointSubmitHook(request=request, metadata_url=f"sqlite:///{tmp_path}/m.db",
                                log_dir=str(tmp_path / "logs"))
    command = hook.command()
    argv = command[command.index("run") + 1:]
    parsed = parse_run_argv(argv)
    pipeline = parsed.apply(load_pipeline(parsed.pipeline))
    return parsed, pipeline.checkpoint


class _Launched(Exception):
    """Raised where the hook would start the job: the test reads what it would run."""


def test_the_interval_travels_from_execute_to_the_checkpoint_config(tmp_path, monkeypatch,
                                                                     metadata_url):
    """SubmitCheckpointedJobOperator.execute() -> its launch -> the hook's ckpt-run argv ->
    the CLI's parse -> the pipeline's CheckpointConfig: every step the options take."""
    from savepoint_helpers import FakeTI

    import airflow_checkpoint_provider.operators.submit as submit_module

    launched: list[CheckpointSubmitHook] = []

    class CapturingHook(CheckpointSubmitHook):
        def submit_detached(self, **kwargs):
            launched.append(self)
            raise _Launched

        submit_blocking = submit_detached

    monkeypatch.setattr(submit_module, "CheckpointSubmitHook", CapturingHook)
    op = _operator(interval_ms=250, checkpoint_dir=str(tmp_path / "ckpt"),
                   savepoint_dir=str(tmp_path / "sp"), restart="fixed:2:100",
                   fence_sinks="true", restore="latest")
    with pytest.raises(_Launched):
        op.execute({"ti": FakeTI("orders_dag", "submit")})
    (hook,) = launched
    command = hook.command()
    assert metadata_url not in " ".join(command)  # the DB URL travels in the environment
    parsed = parse_run_argv(command[command.index("run") + 1:])
    assert parsed == hook.request
    assert parsed.job_id == op.job_id_for({"ti": FakeTI("orders_dag", "submit")}, 1)
    assert parsed.checkpoint == CheckpointOverrides(
        interval_ms=250, directory=str(tmp_path / "ckpt"),
        savepoint_directory=str(tmp_path / "sp"))
    assert parsed.restore == Restore(RestoreKind.LATEST) and parsed.fence_sinks
    config = parsed.apply(load_pipeline(parsed.pipeline)).checkpoint
    assert config.interval_ms == 250
    assert config.directory == str(tmp_path / "ckpt")
    assert config.savepoint_directory == str(tmp_path / "sp")


def test_zero_means_no_periodic_checkpoints_everywhere(tmp_path):
    request = _operator(interval_ms="0").run_request("b" * 32, None)  # a rendered template
    assert request.checkpoint.interval_ms == 0 and request.restore.kind == RestoreKind.NONE
    parsed, config = _through_the_cli(request, tmp_path)
    assert parsed.checkpoint.interval_ms == 0
    assert config.interval_ms is None  # CheckpointConfig stores "off" as None
    untouched = _operator().run_request("c" * 32, None)
    _, config = _through_the_cli(untouched, tmp_path)
    assert config.interval_ms == load_pipeline(PIPELINE).checkpoint.interval_ms


def test_zero_is_accepted_by_the_checkpoint_config_with_the_same_meaning():
    assert CheckpointConfig(interval_ms=0).interval_ms is None
    assert CheckpointConfig(interval_ms=0) == CheckpointConfig(interval_ms=None)
    assert CheckpointOverrides(interval_ms=0).apply(CheckpointConfig()).interval_ms is None
    assert CheckpointOverrides(interval_ms=None).apply(CheckpointConfig()).interval_ms == 1000
    with pytest.raises(ConfigurationError, match=r"must be 0 \(no periodic checkpoints\) or >= 10"):
        CheckpointConfig(interval_ms=5)


@pytest.mark.parametrize("text, kind, target", [
    (None, RestoreKind.NONE, None), ("", RestoreKind.NONE, None),
    ("none", RestoreKind.NONE, None), ("latest", RestoreKind.LATEST, None),
    ("standby:blue", RestoreKind.STANDBY, "blue"), ("/sp/savepoint-1", RestoreKind.PATH, "/sp/savepoint-1"),
])
def test_restore_is_one_tagged_value_with_one_text_form(text, kind, target):
    restore = Restore.parse(text)
    assert (restore.kind, restore.target) == (kind, target)
    assert Restore.parse(restore.text) == restore


def test_bad_requests_are_refused_naming_the_option():
    with pytest.raises(ConfigurationError, match="standby:JOB_ID"):
        Restore.parse("standby:")
    with pytest.raises(ConfigurationError, match="interval_ms -5"):
        CheckpointOverrides(interval_ms=-5)
    with pytest.raises(ConfigurationError, match="restart strategy 'sometimes'"):
        RunRequest(pipeline=PIPELINE, restart="sometimes")
    with pytest.raises(ConfigurationError, match="runner must be"):
        RunRequest(pipeline=PIPELINE, runner="yarn")


def test_an_option_beside_the_request_is_refused_naming_it(tmp_path):
    request = _operator(interval_ms=250).run_request("d" * 32, None)
    url = f"sqlite:///{tmp_path}/m.db"
    with pytest.raises(ValueError, match=r"^interval_ms given beside request="):
        CheckpointSubmitHook(request=request, metadata_url=url, interval_ms=500)
    with pytest.raises(ValueError, match=r"^restore, runner given beside request="):
        CheckpointSubmitHook(request=request, metadata_url=url, restore="latest",
                             runner="spark")
    hook = CheckpointSubmitHook(request=request, metadata_url=url)  # the request alone
    assert hook.request is request and hook.runner == "local"
    assert "--interval-ms" in hook.engine_args
