"""The control plane holds a savepoint request until no checkpoint is pending (fake clock,
an in-memory coordinator; the end-to-end case with PostgreSQL is in
tests/integration/engine/connectors/test_savepoint_during_checkpoint.py)."""

from __future__ import annotations

import pytest

from airflow_checkpoint_provider.engine import CheckpointConfig
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.checkpoint import db_writer
from airflow_checkpoint_provider.engine.checkpoint.coordinator import CheckpointCoordinator
from airflow_checkpoint_provider.engine.checkpoint.outcomes import TaskAck
from airflow_checkpoint_provider.engine.runners.jobmaster.control_plane import ControlPlane

TASKS = [(0, 0)]


@pytest.fixture(autouse=True)
def _reads_wait_for_their_result(monkeypatch):
    """The job master's DB reads give up after ``READ_WAIT_S`` (their result comes with the
    next poll); on a loaded machine a claim could miss this test's single poll. The order of
    requests is what is tested here, so a read waits for its result."""
    monkeypatch.setattr(db_writer, "READ_WAIT_S", 60.0)


def _setup(tmp_path, **cfg):
    store = MetadataStore(f"sqlite:///{tmp_path}/meta.db")
    store.create_job(job_id="job1", job_name="j", parallelism=1)
    triggers: list = []
    config = CheckpointConfig(
        **{"interval_ms": 100, "initial_delay_ms": 0, "directory": str(tmp_path / "ckpt"), **cfg}
    )
    coord = CheckpointCoordinator(
        job_id="job1",
        job_name="j",
        job_dir=str(tmp_path / "ckpt" / "j" / "job1"),
        config=config,
        tasks=TASKS,
        operator_info={},
        store=store,
        send_trigger=lambda chk, ts, kind, loc, unaligned: triggers.append((chk, kind)),
        send_notify=lambda chk: None,
        send_abort=lambda chk: None,
        now=0.0,
    )
    coord.set_tasks_running(set(TASKS))
    control = ControlPlane(
        store=store, job_id="job1", coordinator=coord, savepoint_root=str(tmp_path / "sp")
    )
    return store, coord, control, triggers


def _ack(coord, chk, now):
    coord.receive_ack(chk, TASKS[0], TaskAck(), now)


def _request(store, coord, rid):
    coord.db.flush(timeout=10)
    return store.get_control_request(rid)


def test_a_savepoint_waits_for_the_pending_checkpoint_and_goes_before_the_next(tmp_path):
    store, coord, control, triggers = _setup(tmp_path)
    assert coord.maybe_trigger_periodic(0.0) == 1
    sp = store.submit_control_request("job1", "SAVEPOINT", {})
    chk = store.submit_control_request("job1", "CHECKPOINT", {})
    control.poll(0.1, True)
    assert triggers == [(1, "CHECKPOINT")], "nothing starts while checkpoint 1 is pending"
    assert coord.queued_savepoints == {sp}
    assert coord.maybe_trigger_periodic(0.3) is None
    _ack(coord, 1, 0.4)
    control.poll(0.5, True)
    assert [k for _, k in triggers] == ["CHECKPOINT", "SAVEPOINT"]
    assert coord.queued_savepoints == set()
    _ack(coord, 2, 0.6)
    control.poll(0.7, True)
    assert [c for c, _ in triggers] == [1, 2, 3], "then the checkpoint request"
    assert _request(store, coord, sp).status == "SUCCEEDED"
    assert _request(store, coord, chk).status == "IN_PROGRESS"
    coord.db.close()
    coord.cleaner.close()
    store.close()


def test_a_savepoint_that_waits_longer_than_the_timeout_fails_naming_the_checkpoint(tmp_path):
    store, coord, control, triggers = _setup(tmp_path, timeout_ms=1000)
    coord.maybe_trigger_periodic(0.0)
    sp = store.submit_control_request("job1", "SAVEPOINT", {})
    control.poll(0.1, True)
    coord.pending[1].trigger_time = 5.0  # never expires (a stuck abort)
    control.poll(0.6, True)
    assert control.has_queued
    control.poll(1.2, True)
    req = _request(store, coord, sp)
    assert req.status == "FAILED" and not control.has_queued and coord.queued_savepoints == set()
    assert "checkpoint 1 was still pending" in req.error and "retry" in req.error
    assert triggers == [(1, "CHECKPOINT")]
    coord.db.close()
    coord.cleaner.close()
    store.close()
