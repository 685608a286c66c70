"""The job master's event loop matches typed slot events (issue 53, item 2): a lost or
invalid connection fails the attempt, a slot's message goes to its handler, a message of
an older attempt is dropped; an ack is decoded at the edge and a malformed one declines
its checkpoint."""

from __future__ import annotations

import queue
from types import SimpleNamespace

from airflow_checkpoint_provider.engine.protocol import messages as M
from airflow_checkpoint_provider.engine.runners.jobmaster.attempt import AttemptRun
from airflow_checkpoint_provider.engine.runners.jobmaster.slot_events import (
    SlotInvalid,
    SlotLost,
    SlotMessage,
)


class _Conn:
    def __init__(self):
        self.sent, self.closed = [], False

    def send(self, msg):
        self.sent.append(msg)

    def close(self):
        self.closed = True


class _Coordinator:
    def __init__(self):
        self.acks, self.declines, self.pending = [], [], {}

    def abort_all(self, *a):
        pass

    def set_tasks_running(self, *a):
        pass

    def receive_ack(self, chk, task, ack, now):
        self.acks.append((chk, task, ack))

    def receive_decline(self, chk, task, reason, now):
        self.declines.append((chk, task, reason))


def _run(attempt: int = 1) -> AttemptRun:
    graph = SimpleNamespace(num_slots=1, tasks=lambda: [(0, 0)])
    master = SimpleNamespace(
        job_id="job1", coordinator=_Coordinator(), control=None, graph=graph, conns={},
        launcher=SimpleNamespace(stop=lambda: None, poll=lambda: None),
        server=SimpleNamespace(events=queue.Queue()), progress_watch=None,
        _payload=lambda attempt, slot, assignments: b"job")
    return AttemptRun(master, attempt, {})


def test_a_lost_connection_of_a_running_slot_fails_the_attempt():
    run, conn = _run(), _Conn()
    run.master.conns[0] = conn
    outcome = run.on_event(SlotLost(conn), 0.0)
    assert outcome is not None and "slot 0 lost its connection" in outcome.failure


def test_an_invalid_frame_fails_the_attempt_naming_the_reason():
    run, conn = _run(), _Conn()
    run.master.conns[0] = conn
    outcome = run.on_event(SlotInvalid(conn, "frame too large"), 0.0)
    assert outcome is not None and "slot 0 sent an invalid message: frame too large" in outcome.failure


def test_a_message_goes_to_its_handler_and_an_older_attempts_is_dropped():
    run, conn = _run(attempt=1), _Conn()
    old = M.Register(slot=0, attempt=0, pid=1, host="w", placement={})
    assert run.on_event(SlotMessage(conn, old), 0.0) is None
    assert conn.sent == [] and run.master.conns == {}
    current = M.Register(slot=0, attempt=1, pid=1, host="w", placement={})
    assert run.on_event(SlotMessage(conn, current), 0.0) is None
    assert conn.sent == [M.JobDescription(payload=b"job")] and run.master.conns == {0: conn}


def test_an_ack_reaches_the_coordinator_typed():
    run = _run()
    msg = M.Ack(slot=0, attempt=1, vertex=0, subtask=0, checkpoint_id=3,
                operators={"op": {"operator_state": [1], "states": {}, "keyed": None}},
                metrics={"state_size": 5, "checkpointed_size": 5})
    run.on_event(SlotMessage(_Conn(), msg), 0.0)
    [(chk, task, ack)] = run.master.coordinator.acks
    assert (chk, task) == (3, (0, 0))
    assert ack.operators["op"].operator_state == (1,) and ack.metrics.state_size == 5


def test_a_malformed_ack_declines_its_checkpoint():
    run = _run()
    msg = M.Ack(slot=0, attempt=1, vertex=0, subtask=0, checkpoint_id=3,
                operators={"op": {"keyed": {"path": "../../etc/passwd", "size": 1,
                                            "sha256": "a" * 64}}}, metrics={})
    run.on_event(SlotMessage(_Conn(), msg), 0.0)
    assert run.master.coordinator.acks == []
    [(chk, task, reason)] = run.master.coordinator.declines
    assert (chk, task) == (3, (0, 0)) and "malformed acknowledgement" in reason
    assert "operators['op'].keyed.path" in reason
