"""The submit operator and the engine agree on when a job is LOST (issue 53 item 4: the
heartbeat timeout was 60 s in the engine and 30 s in the operator): without an explicit
``heartbeat_timeout`` the operator uses the engine's, read when the task runs."""

from __future__ import annotations

from airflow_checkpoint_provider.engine.client import DEFAULT_HEARTBEAT_TIMEOUT_S
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator


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
