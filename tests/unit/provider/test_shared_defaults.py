"""The Airflow side and the engine share their defaults (issue 53 item 4). The submit operator
and the engine agree on when a job is LOST (the heartbeat timeout was 60 s in the engine and
30 s in the operator): without an explicit ``heartbeat_timeout`` the operator uses the
engine's, read when the task runs. The triggers poll as often as ``ckpt`` does."""

from __future__ import annotations

from airflow_checkpoint_provider.engine.client import (
    CLIENT_POLL_SECONDS,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
)
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.triggers.checkpoint import FAST_POLL_SECONDS, poll_delay


def _op(**kwargs) -> SubmitCheckpointedJobOperator:
    return SubmitCheckpointedJobOperator(task_id="submit", pipeline="m:build", job_name="j",
                                         **kwargs)


def test_the_default_is_the_engines_heartbeat_timeout(monkeypatch):
    monkeypatch.delenv("CKPT_HEARTBEAT_TIMEOUT_S", raising=False)
    op = _op()
    assert op.stale_after() == DEFAULT_HEARTBEAT_TIMEOUT_S == 60.0
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "12")  # the deployment's, read when used
    assert op.stale_after() == 12.0


def test_an_explicit_timeout_wins(monkeypatch):
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "12")
    assert _op(heartbeat_timeout=5.0).stale_after() == 5.0
    assert _op(heartbeat_timeout=0).stale_after() == 0


def test_the_triggers_poll_as_often_as_the_engines_clients():
    assert FAST_POLL_SECONDS == CLIENT_POLL_SECONDS
    assert poll_delay(0.0, 5.0) == CLIENT_POLL_SECONDS
