"""Barrier alignment in a real task with real TCP channels: records behind barrier N on one
channel are not processed before barrier N arrived on the other channel."""

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_checkpoint_provider.engine import (
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
)
from airflow_checkpoint_provider.engine.protocol import CheckpointBarrier, encode
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.host.slot import _reader
from airflow_checkpoint_provider.engine.runtime.task.environment import TaskEnvironment
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Finish, Mailbox
from airflow_checkpoint_provider.engine.runtime.task.stream_task import StreamTask
from airflow_checkpoint_provider.engine.serialization import packb


class Recorder(KeyedProcessFunction):
    def __init__(self):
        self.events = []

    def process_element(self, record, ctx):
        self.events.append(record["id"])

    def snapshot_state(self, checkpoint_id):
        self.events.append(f"snapshot-{checkpoint_id}")


def start_task(tmp_path, exactly_once):
    rec = Recorder()
    p = Pipeline("align")
    (p.source(GeneratorSource(10), uid="src", parallelism=2)
      .key_by("key").process(rec, uid="rec", parallelism=1)
      .sink(FileSink(str(tmp_path / "out")), uid="sink"))
    graph = p.execution_graph()
    sent = []
    env = TaskEnvironment(job_id="j" * 8, job_name="align", attempt=0, graph=graph,
                          job_dir=str(tmp_path / "ckpt"), exactly_once=exactly_once, batch_size=10,
                          send=lambda m: sent.append(encode(m)), upload_pool=ThreadPoolExecutor(1))
    mailbox = Mailbox(8)
    gates = {0: threading.Event(), 1: threading.Event()}
    for g in gates.values():
        g.set()
    task = StreamTask(env, graph.vertex(1), 0, None, mailbox, [], gates)
    writers = []
    for ch in (0, 1):
        a, b = socket.socketpair()
        threading.Thread(target=_reader, args=(b, ch, mailbox, gates[ch]), daemon=True).start()
        writers.append(a)
    task.start()
    return task, rec, writers, sent


def send_records(sock, ids):
    P.send_frame(sock, P.RECORDS, packb([{"id": i, "key": f"k{i}", "value": 1} for i in ids]))


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


@pytest.mark.timeout(30)
def test_records_after_barrier_wait_for_barrier_on_other_channel(tmp_path):
    task, rec, (ch0, ch1), sent = start_task(tmp_path, exactly_once=True)
    send_records(ch0, [1, 2])
    P.send_frame(ch0, P.BARRIER, CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode())
    send_records(ch0, [3, 4])          # behind barrier 1 on channel 0
    send_records(ch1, [10, 11])        # before barrier 1 on channel 1
    wait_for(lambda: 11 in rec.events)
    time.sleep(0.3)                    # give the task every chance to (wrongly) process 3, 4
    assert 3 not in rec.events and 4 not in rec.events
    P.send_frame(ch1, P.BARRIER, CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode())
    send_records(ch1, [12])
    wait_for(lambda: {3, 4, 12} <= set(rec.events))
    snap = rec.events.index("snapshot-1")
    assert set(rec.events[:snap]) == {1, 2, 10, 11}
    assert set(rec.events[snap + 1:]) == {3, 4, 12}
    wait_for(lambda: any(m["type"] == "ack" for m in sent))
    ack = next(m for m in sent if m["type"] == "ack")
    assert ack["checkpoint_id"] == 1 and ack["metrics"]["alignment_ms"] >= 250
    task.mailbox.put_control(Finish())


@pytest.mark.timeout(30)
def test_at_least_once_processes_records_behind_a_barrier_without_waiting(tmp_path):
    task, rec, (ch0, ch1), sent = start_task(tmp_path, exactly_once=False)
    P.send_frame(ch0, P.BARRIER, CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode())
    send_records(ch0, [3, 4])
    wait_for(lambda: {3, 4} <= set(rec.events))
    assert "snapshot-1" not in rec.events
    P.send_frame(ch1, P.BARRIER, CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode())
    wait_for(lambda: "snapshot-1" in rec.events)
    task.mailbox.put_control(Finish())


@pytest.mark.timeout(30)
def test_cancel_marker_releases_blocked_channel_and_is_not_snapshotted(tmp_path):
    task, rec, (ch0, ch1), sent = start_task(tmp_path, exactly_once=True)
    P.send_frame(ch0, P.BARRIER, CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode())
    send_records(ch0, [3])
    time.sleep(0.2)
    assert 3 not in rec.events
    P.send_frame(ch1, P.CANCEL, packb(1))
    wait_for(lambda: 3 in rec.events)
    assert "snapshot-1" not in rec.events
    task.mailbox.put_control(Finish())


@pytest.mark.timeout(30)
def test_an_input_connection_lost_while_aligning_does_not_crash_the_task(tmp_path):
    """Barrier 1 held on channel 0, then channel 1's connection drops (its upstream slot was
    SIGKILLed): the closed channel counts as arrived, so the task snapshots with the barrier
    it holds -- it used to fail with AttributeError ('NoneType' ... 'checkpoint_id'), which
    the job then reported as its failure instead of the killed slot."""
    task, rec, (ch0, ch1), sent = start_task(tmp_path, exactly_once=True)
    send_records(ch0, [1])
    P.send_frame(ch0, P.BARRIER, CheckpointBarrier(1, 0, "CHECKPOINT", str(tmp_path / "chk-1")).encode())
    send_records(ch0, [2])             # behind barrier 1
    send_records(ch1, [10])
    wait_for(lambda: 10 in rec.events)
    ch1.close()                        # the upstream's process died
    wait_for(lambda: 2 in rec.events)
    assert rec.events.index("snapshot-1") < rec.events.index(2)
    assert not any(m["type"] == "task_failed" for m in sent), sent
    assert task.thread.is_alive()
    task.mailbox.put_control(Finish())
