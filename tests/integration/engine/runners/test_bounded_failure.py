"""Failures are bounded: a job that can never checkpoint fails over and then FAILS with the
checkpoint error (instead of running forever without committing); deterministic errors
(bad input) fail at once without using up restarts."""

from __future__ import annotations

import os
import time

import pytest
from pipelines import KeylessSource, never_checkpointing_pipeline

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    JobFailedError,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)


@pytest.mark.timeout(120)
def test_a_job_that_can_never_checkpoint_fails_over_then_fails_with_the_checkpoint_error(workdir):
    p = never_checkpointing_pipeline(str(workdir), RestartStrategy.fixed_delay(attempts=2,
                                                                               delay_ms=0))
    t0 = time.monotonic()
    with pytest.raises(JobFailedError) as failed:
        p.run()
    result = failed.value.result

    assert result.status == "FAILED"
    assert result.restarts == 2
    assert "tolerable number of failed checkpoints (10)" in result.failure_reason
    assert "Not a directory" in result.failure_reason  # the storage error, as it happened
    assert result.checkpoints_completed == 0
    assert time.monotonic() - t0 < 60


class PassThrough(KeyedProcessFunction):
    def process_element(self, record, ctx):
        return record


@pytest.mark.timeout(120)
def test_a_record_without_its_key_field_fails_the_job_at_once_naming_the_field(workdir):
    p = Pipeline("keyless", checkpoint=CheckpointConfig(interval_ms=100,
                                                        directory=str(workdir / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=5, delay_ms=0),
                 metadata_url=f"sqlite:///{workdir}/meta.db")
    (p.source(KeylessSource(1000), uid="gen").key_by("key")
      .process(PassThrough(), uid="pass").sink(FileSink(os.path.join(workdir, "out")), uid="out"))

    with pytest.raises(JobFailedError) as failed:
        p.run()
    result = failed.value.result

    assert result.status == "FAILED"
    assert result.restarts == 0  # deterministic: restarting would fail the same way
    assert "BadRecordError" in result.failure_reason
    assert "key_by field 'key' is missing from a record" in result.failure_reason


class ExitsHard(KeyedProcessFunction):
    def process_element(self, record, ctx):
        if record["id"] == 50:
            os._exit(3)
        return record


@pytest.mark.timeout(120)
def test_a_slot_that_exits_is_reported_with_its_exit_code(workdir):
    p = Pipeline("exits", checkpoint=CheckpointConfig(interval_ms=100,
                                                      directory=str(workdir / "ckpt")),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url=f"sqlite:///{workdir}/meta.db")
    (p.source(GeneratorSource(200), uid="gen").key_by("key")
      .process(ExitsHard(), uid="exit").sink(FileSink(os.path.join(workdir, "out")), uid="out"))

    with pytest.raises(JobFailedError) as failed:
        p.run()

    assert "exited with code 3" in failed.value.result.failure_reason
