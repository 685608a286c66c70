"""Runners by name (engine/execution.py): the DSL asks for a runner by name and never
imports one (tests/unit/architecture/test_layers.py checks the imports)."""

from __future__ import annotations

import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    ConfigurationError,
    GeneratorSource,
    Pipeline,
    execution,
)
from airflow_checkpoint_provider.engine.connectors.discard import DiscardSink
from airflow_checkpoint_provider.engine.plan.graph import ExecutionGraph
from airflow_checkpoint_provider.engine.plan.job import JobConfig, Restore, RestoreKind


def _pipeline(tmp_path) -> Pipeline:
    p = Pipeline("by-name", checkpoint=CheckpointConfig(directory=str(tmp_path / "ckpt")))
    p.source(GeneratorSource(num_records=10, num_keys=2, seed=1), uid="gen").sink(
        DiscardSink(), uid="out"
    )
    return p


def test_an_unknown_runner_is_refused_by_name(tmp_path):
    with pytest.raises(
        ConfigurationError, match="runner 'flink' is unknown; use 'local' or 'spark'"
    ):
        _pipeline(tmp_path).run(runner="flink")


def test_a_registered_runner_gets_the_options_and_the_plan(tmp_path):
    seen: dict = {}

    class RecordingRunner:
        def __init__(self, **options):
            seen["options"] = options

        def run(self, graph, config, **kwargs):
            seen.update(graph=graph, config=config, kwargs=kwargs)
            return "ran"

    execution.register_runner("recording", RecordingRunner)
    try:
        assert execution.runner_names() == ["local", "recording", "spark"]
        assert _pipeline(tmp_path).run(runner="recording", slots=3, restore="latest") == "ran"
    finally:
        del execution._RUNNERS["recording"]
    assert seen["options"] == {"slots": 3}
    assert isinstance(seen["graph"], ExecutionGraph) and isinstance(seen["config"], JobConfig)
    assert seen["config"].name == "by-name"
    # the text form is parsed once, by Pipeline.run: a runner gets the tagged Restore
    assert seen["kwargs"]["restore"] == Restore(RestoreKind.LATEST)


def test_the_local_runner_is_built_only_when_asked_for():
    runner = execution.create_runner("local")
    assert type(runner).__module__ == "airflow_checkpoint_provider.engine.runners.local"
