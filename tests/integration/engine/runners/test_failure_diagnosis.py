"""Failures name their place (issue 35, item 2): the operator's name, uid and class, the
subtask, the phase and the remote traceback reach the driver log, the job's and the
attempts' failure reasons in the metadata DB (``ckpt jobs``), the checkpoint report and the
typed error of ``Pipeline.run``; a failure that repeats identically right after each
restore fails fast (RepeatedFailureAfterRestoreError) instead of spending every restart.

Local runner, real processes, FileSink; each job runs a few seconds."""

from __future__ import annotations

import json
import logging
import os
import sys
from html import unescape

import cloudpickle
import pytest
from click.testing import CliRunner
from pipelines import FaultPlan, InjectedFailure, running_sum_pipeline

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    JobFailedError,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.connectors.generator import GeneratorSource
from airflow_checkpoint_provider.engine.errors import (
    ConfigurationError,
    RepeatedFailureAfterRestoreError,
)
from airflow_checkpoint_provider.engine.lifecycle.report import render_report
from airflow_checkpoint_provider.engine.runners.jobmaster.attempt import AttemptOutcome
from airflow_checkpoint_provider.engine.runners.jobmaster.failover import RepeatedFailureGuard

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # slots need BrokenAfterRestore


class BrokenAfterRestore(KeyedProcessFunction):
    """Runs until a checkpoint completed, then fails once (InjectedFailure); every attempt
    that restores state fails in ``open`` the way an unrestorable state value does."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def open(self, ctx):
        self.count = ctx.value_state("count", 0)
        if ctx.attempt > 0:
            raise TypeError("unhashable type: 'list'")
        self.completed = False

    def process_element(self, record, ctx):
        if self.completed and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise InjectedFailure("first failure, after a completed checkpoint")
        self.count.update(self.count.value() + 1)
        return {"key": ctx.current_key, "id": record["id"]}

    def notify_checkpoint_complete(self, checkpoint_id):
        self.completed = True


def _pipeline(root, restart: RestartStrategy) -> Pipeline:
    p = Pipeline(
        "broken-after-restore",
        max_parallelism=16,
        checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(root, "ckpt")),
        restart_strategy=restart,
        metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
    )
    (
        p.source(
            GeneratorSource(200_000, num_keys=20, seed=3, splits=1, records_per_second=2000),
            uid="gen",
            parallelism=1,
        )
        .key_by("key")
        .process(
            BrokenAfterRestore(os.path.join(root, "failed-once")),
            uid="broken-op",
            name="seen-keys",
            parallelism=1,
        )
        .sink(FileSink(os.path.join(root, "out")), uid="out", parallelism=1)
    )
    return p


@pytest.mark.timeout(180)
def test_a_failure_after_each_restore_fails_fast_naming_operator_phase_and_traceback(
    workdir, caplog
):
    caplog.set_level(logging.ERROR)
    p = _pipeline(str(workdir), RestartStrategy.fixed_delay(attempts=6, delay_ms=0))
    with pytest.raises(RepeatedFailureAfterRestoreError) as err:
        p.run()
    assert isinstance(err.value, JobFailedError)  # what callers already catch
    result = err.value.result  # type: ignore[attr-defined]
    # attempt 0 failed once (InjectedFailure); attempts 1 and 2 restored and failed the
    # same way: the job stops there instead of using all 6 restarts
    assert result.restarts == 2
    where = (
        "in phase restore of process 'seen-keys' (BrokenAfterRestore), uid 'broken-op', "
        "subtask 1/1, slot 0: "
    )
    reason = result.failure_reason
    first = reason.splitlines()[0]
    assert first.startswith(
        "RepeatedFailureAfterRestoreError: the same failure followed each "
        "of the last 2 restores of checkpoint "
    ), first
    assert where in first and first.endswith("TypeError: unhashable type: 'list'"), first
    # the remote traceback, down to the line that raised
    assert "Remote traceback (task " in reason
    assert "self.fn.open(self.ctx)" in reason and ", in open\nTypeError: unhashable" in reason

    with MetadataStore(p.metadata_url) as store:
        job = store.get_job(result.job_id)
        assert job.status == "FAILED" and job.failure_reason == reason
        attempts = store.list_attempts(result.job_id)
        assert len(attempts) == 3
        assert "phase processing of process 'seen-keys'" in attempts[0].failure_reason
        assert "InjectedFailure" in attempts[0].failure_reason
        for a in attempts[1:]:
            assert where in a.failure_reason and "Remote traceback" in a.failure_reason
        report = render_report(store, result.job_id, workdir / "report.html")
    html = report.read_text()
    assert "Failures" in html and "uid 'broken-op'" in unescape(html)
    assert "uid 'broken-op'" not in html  # escaped, whichever entity the template uses
    assert "self.fn.open(self.ctx)" in html

    # ckpt jobs: the first line in the table, the whole reason in --json
    url = p.metadata_url
    out = CliRunner().invoke(ckpt, ["jobs", "--db", url]).output
    assert first in out, out
    rows = json.loads(CliRunner().invoke(ckpt, ["jobs", "--db", url, "--json"]).output)
    assert rows[0]["failure_reason"] == reason

    # the driver log: the place and the traceback of each failure, at ERROR
    logged = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert where in logged and "Remote traceback" in logged and "self.fn.open" in logged


@pytest.mark.timeout(180)
def test_snapshot_and_commit_failures_name_their_phase(workdir):
    faults = FaultPlan(str(workdir / "faults"), [("snapshot", 2), ("notify", 5)])
    p = running_sum_pipeline(
        str(workdir),
        num_records=10_000,
        rate=2000,
        faults=faults,
        keyed_parallelism=2,
        restart=RestartStrategy.fixed_delay(attempts=4, delay_ms=0),
    )
    result = p.run()
    assert result.status == "FINISHED" and result.restarts == 2
    with MetadataStore(p.metadata_url) as store:
        reasons = [a.failure_reason for a in store.list_attempts(result.job_id) if a.failure_reason]
    assert len(reasons) == 2, reasons
    expected = {
        phase: f"in phase {phase} of process 'Process: RunningSum', uid 'sum', subtask "
        for phase in ("snapshot", "commit")
    }
    for phase, where in expected.items():
        hit = [r for r in reasons if where in r]
        assert len(hit) == 1, (phase, reasons)
        assert "InjectedFailure: injected failure" in hit[0].splitlines()[0]
        assert (
            "snapshot_state" in hit[0]
            if phase == "snapshot"
            else "notify_checkpoint_complete" in hit[0]
        )


def _failed(sig) -> AttemptOutcome:
    return AttemptOutcome("FAILED", "x", signature=sig)


def test_repeated_failure_guard_counts_identical_failures_after_restores_only():
    a, b = ("op", "restore", "TypeError: x"), ("op", "processing", "TypeError: x")
    guard = RepeatedFailureGuard(2)
    assert not guard.observe(_failed(a), restored=False, completed=False)  # from scratch
    assert not guard.observe(_failed(a), restored=True, completed=False)
    assert guard.observe(_failed(a), restored=True, completed=False)

    guard = RepeatedFailureGuard(2)
    assert not guard.observe(_failed(a), restored=True, completed=False)
    assert not guard.observe(_failed(b), restored=True, completed=False)  # another phase
    assert not guard.observe(_failed(b), restored=True, completed=True)  # made progress
    assert not guard.observe(_failed(None), restored=True, completed=False)  # a lost slot
    assert not guard.observe(_failed(b), restored=True, completed=False)
    assert guard.observe(_failed(b), restored=True, completed=False)

    off = RepeatedFailureGuard(0)
    assert not any(off.observe(_failed(a), restored=True, completed=False) for _ in range(5))


def test_identical_failures_is_part_of_the_restart_strategy():
    assert RestartStrategy.fixed_delay().identical_failures == 2
    assert RestartStrategy.exponential_backoff(identical_failures=3).identical_failures == 3
    with pytest.raises(ConfigurationError, match="identical_failures"):
        RestartStrategy.fixed_delay(identical_failures=-1)
    # ckpt run --restart (and the Airflow operator's restart=)
    assert RestartStrategy.parse("fixed:5:100").identical_failures == 2
    assert RestartStrategy.parse("fixed:5:100:identical=0").identical_failures == 0
    parsed = RestartStrategy.parse("exponential:10:500:60000:identical=3")
    assert (parsed.attempts, parsed.max_delay_ms, parsed.identical_failures) == (10, 60000, 3)
    with pytest.raises(ConfigurationError, match="optionally ending in :identical=N"):
        RestartStrategy.parse("fixed:5:identical=x")


def test_task_failure_message_carries_the_place_over_the_wire_and_keeps_the_traceback_tail():
    from airflow_checkpoint_provider.engine.protocol import messages as M
    from airflow_checkpoint_provider.engine.runners.jobmaster.attempt import (
        TRACEBACK_LINES,
        describe_task_failure,
    )

    tb = "Traceback (most recent call last):\n" + "".join(
        f'  File "f.py", line {i}, in g\n' for i in range(200)) + "ValueError: bad\n"
    sent = M.TaskFailed(vertex=3, subtask=1, slot=1, attempt=2, error="ValueError: bad",
                        traceback=tb, operator="window_aggregate 'per-minute'",
                        uid="per-minute", phase="timer", parallelism=2)
    msg = M.decode(M.encode(sent))
    assert msg == sent
    summary, detail = describe_task_failure(msg)
    assert summary == ("task 3.1 failed in phase timer of window_aggregate 'per-minute', "
                       "uid 'per-minute', subtask 2/2, slot 1: ValueError: bad")
    lines = detail.splitlines()
    assert lines[0] == "Remote traceback (task 3.1, slot 1):"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[2] == f"  ... ({201 - TRACEBACK_LINES} lines left out)"
    assert lines[-1] == "ValueError: bad" and len(lines) == TRACEBACK_LINES + 3
    # a message of an older slot (no place): the old one-line form
    old = M.TaskFailed(vertex=3, subtask=1, error="ValueError: bad")
    assert describe_task_failure(old) == ("task 3.1 failed: ValueError: bad", None)
