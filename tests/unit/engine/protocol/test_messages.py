"""The typed wire protocol: every control message and the barrier survive their codec, and
malformed input is refused with an error naming the message and field; a slot of another
protocol version is refused when it registers."""

from __future__ import annotations

import dataclasses
import queue
from types import SimpleNamespace

import pytest

from airflow_checkpoint_provider.engine.protocol import (
    BarrierKind,
    CheckpointBarrier,
    ProtocolError,
    decode,
    encode,
)
from airflow_checkpoint_provider.engine.protocol import messages as M
from airflow_checkpoint_provider.engine.runners.jobmaster.attempt import AttemptRun
from airflow_checkpoint_provider.engine.serialization import packb, unpackb

SAMPLES = [
    M.Register(slot=1, attempt=2, pid=42, host="h", placement={"executor_id": "3"}),
    M.Address(slot=0, attempt=0, address=["127.0.0.1", 5000]),
    M.Running(slot=3, attempt=1),
    M.Running(slot=3, attempt=1, phases={"register": 0.2, "restore": 1.1}),
    M.SlotFinished(slot=0, attempt=0, peak_rss_mb=81.5),
    M.SlotFinished(slot=0, attempt=0),
    M.Ack(slot=0, attempt=0, vertex=1, subtask=2, checkpoint_id=7,
          operators={"sum": {"keyed": None}}, metrics={"sync_ms": 0.5}),
    M.Decline(slot=0, attempt=0, vertex=1, subtask=0, checkpoint_id=7, reason="disk full"),
    M.TaskMetrics(slot=0, attempt=0, vertex=0, subtask=0, counts={"src": [0, 10]}),
    M.EndOfInput(slot=0, attempt=0, vertex=0, subtask=1),
    M.TaskFinished(slot=0, attempt=0, vertex=0, subtask=1),
    M.TaskFailed(slot=0, attempt=0, vertex=2, subtask=0, error="ValueError: x", fatal=True),
    M.JobDescription(payload=b"\x80\x05pickled"),
    M.Peers(peers={"0": ["127.0.0.1", 1], "1": ["127.0.0.1", 2]}),
    M.Trigger(checkpoint_id=3, timestamp=1700000000000, kind="SAVEPOINT_STOP", location="/c"),
    M.Trigger(checkpoint_id=4, timestamp=1700000000000, kind="CHECKPOINT", location="/c",
              unaligned=True),
    M.Unalign(checkpoint_id=4),
    M.Notify(checkpoint_id=3),
    M.Abort(checkpoint_id=3),
    M.Finish(),
    M.Recycle(attempt=2),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.TYPE)
def test_every_message_survives_its_wire_form(msg):
    assert decode(unpackb(packb(encode(msg)))) == msg


def test_every_message_type_has_a_sample():
    assert {type(m) for m in SAMPLES} == set(M._REGISTRY.values())


@pytest.mark.parametrize("wire, named", [
    ({"type": "launch_missiles"}, "launch_missiles"),
    ([1, 2], "not a map"),
    ({"type": "notify"}, "checkpoint_id"),
    ({"type": "notify", "checkpoint_id": "3"}, "'checkpoint_id'"),
    ({"type": "notify", "checkpoint_id": True}, "'checkpoint_id'"),
    ({"type": "finish", "extra": 1}, "extra"),
    ({"type": "ack", "vertex": 1, "subtask": 0, "checkpoint_id": 1, "operators": [],
      "metrics": {}}, "'operators'"),
])
def test_malformed_messages_are_refused_naming_the_field(wire, named):
    with pytest.raises(ProtocolError, match=named):
        decode(wire)


def test_barrier_round_trip_and_kinds():
    b = CheckpointBarrier(5, 123, BarrierKind.SAVEPOINT_DRAIN, "/tmp/sp")
    again = CheckpointBarrier.decode(b.encode())
    assert again == b and again.kind is BarrierKind.SAVEPOINT_DRAIN
    assert again.kind.is_savepoint and again.kind.stops_sources
    assert not BarrierKind.CHECKPOINT.is_savepoint
    assert M.Trigger(checkpoint_id=5, timestamp=123, kind="SAVEPOINT_DRAIN",
                     location="/tmp/sp").barrier() == b


@pytest.mark.parametrize("fields, named", [
    ([0, 1, "CHECKPOINT", "/c", False], "checkpoint id"),
    ([1, "now", "CHECKPOINT", "/c", False], "timestamp"),
    ([1, 1, "SNAPSHOT", "/c", False], "unknown kind"),
    ([1, 1, "CHECKPOINT", "", False], "location"),
    ([1, 1, "CHECKPOINT", "/c", 1], "unaligned flag"),
    ([1, 1, "SAVEPOINT", "/c", True], "savepoint cannot be unaligned"),
    ([1, 1, "CHECKPOINT", "/c"], "expected"),
])
def test_malformed_barriers_are_refused(fields, named):
    with pytest.raises(ProtocolError, match=named):
        CheckpointBarrier.decode(packb(fields))


class _Conn:
    def __init__(self):
        self.sent, self.closed = [], False

    def send(self, msg):
        self.sent.append(msg)

    def close(self):
        self.closed = True


def _attempt_run():
    graph = SimpleNamespace(num_slots=1, tasks=lambda: [(0, 0)])
    coord = SimpleNamespace(abort_all=lambda *a: None, set_tasks_running=lambda *a: None)
    master = SimpleNamespace(
        coordinator=coord, control=None, graph=graph, conns={},
        launcher=SimpleNamespace(stop=lambda: None),
        server=SimpleNamespace(events=queue.Queue()),
        _payload=lambda attempt, slot, assignments: b"job")
    return AttemptRun(master, 0, {})


def test_a_slot_of_the_same_version_gets_the_job():
    run, conn = _attempt_run(), _Conn()
    msg = M.Register(slot=0, attempt=0, pid=1, host="worker-1", placement={})
    assert run.on_register(conn, msg, 0.0) is None
    assert conn.sent == [M.JobDescription(payload=b"job")]


def test_a_slot_of_another_protocol_version_is_refused_for_good():
    run, conn = _attempt_run(), _Conn()
    msg = dataclasses.replace(
        M.Register(slot=0, attempt=0, pid=1, host="worker-1", placement={}),
        version=M.PROTOCOL_VERSION + 1)
    outcome = run.on_register(conn, msg, 0.0)
    assert outcome is not None and outcome.status == "FAILED" and outcome.fatal
    assert "worker-1" in outcome.failure and "protocol version" in outcome.failure
    assert conn.sent == [] and conn.closed  # no job for it
