"""Mailbox and barrier handler pieces of unaligned checkpoints (no sockets)."""

import threading

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.protocol import BarrierKind, CheckpointBarrier
from airflow_checkpoint_provider.engine.runtime.task.alignment import (
    BarrierHandler,
    Block,
    Captured,
    DropCapture,
    Release,
    SnapshotUnaligned,
)
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Mailbox
from airflow_checkpoint_provider.engine.serialization import unpackb

pytestmark = pytest.mark.timeout(30)


def _barrier(chk, unaligned=False):
    return CheckpointBarrier(chk, 0, BarrierKind.CHECKPOINT, "/tmp/x", unaligned)


def _rows(i):
    return ("records", i % 2, [{"id": i}])


def test_an_unaligned_barrier_overtakes_and_the_records_before_it_are_captured():
    m = Mailbox(capacity=4)
    for i in range(4):
        m.put_data(_rows(i))                       # channels 0 and 1, mailbox full
    m.begin_unaligned(5)
    # channel 0 reads ahead past the full mailbox up to its barrier
    assert m.put_data(("records", 0, pa.record_batch({"id": [10, 11]})))
    assert m.put_data(("barrier", 0, _barrier(5)))
    assert m.take()[0] == "ubarrier", "the barrier is taken before the queued records"
    m.start_capture(5)
    taken = [m.take()[2], m.take()[2]]             # processed after the snapshot
    m.put_data(("records", 0, [{"id": 99}]))       # after channel 0's barrier: not captured
    m.put_data(("records", 1, [{"id": 7}]))        # channel 1, before its barrier: captured
    m.put_data(("barrier", 1, _barrier(5)))
    captured = m.finish_capture(5)
    ids = [r["id"] for ch, kind, p, _rows in captured
           for r in (p.to_pylist() if kind == "arrow" else unpackb(p))]
    assert ids == [0, 1, 2, 3, 10, 11, 7]
    assert m.take()[0] == "ubarrier"
    # every queued record is still processed, in order
    rest = [m.take()[2] for _ in range(5)]
    assert taken == [[{"id": 0}], [{"id": 1}]] and rest[-2:] == [[{"id": 99}], [{"id": 7}]]


def test_read_ahead_ends_at_the_barrier_and_backpressure_resumes():
    m = Mailbox(capacity=1)
    m.put_data(_rows(0))
    m.begin_unaligned(3)
    m.put_data(("barrier", 0, _barrier(3)))
    put = threading.Event()
    t = threading.Thread(target=lambda: (m.put_data(("records", 0, [{"id": 1}])), put.set()))
    t.start()
    assert not put.wait(0.2), "past its barrier the channel waits for room again"
    m.take()  # the ubarrier
    m.take()  # the queued record: room again
    assert put.wait(5)
    t.join()


def test_an_aborted_checkpoint_ends_the_capture():
    m = Mailbox()
    m.begin_unaligned(2)
    m.start_capture(2)
    m.end_unaligned(2)
    assert m.finish_capture(2) is None


def test_handler_snapshots_on_the_first_unaligned_barrier_and_completes_on_the_last():
    h = BarrierHandler(3)
    first = h.on_unaligned_barrier(1, 7)
    assert isinstance(first[0], SnapshotUnaligned) and first[0].checkpoint_id == 7
    assert Captured(7) not in first
    assert h.on_unaligned_barrier(0, 7) == []
    assert h.on_channel_closed(2) == [Captured(7)]


def test_an_aligning_checkpoint_turns_unaligned_and_releases_its_blocked_channels():
    h = BarrierHandler(2)
    assert Block(0) in h.on_barrier(0, 4)
    actions = h.on_unalign(4)
    assert isinstance(actions[0], SnapshotUnaligned) and Release((0,)) in actions
    assert h.on_unaligned_barrier(1, 4) == [Captured(4)]
    assert h.on_unalign(4) == [], "once only"


def test_a_cancel_marker_drops_the_capture_without_declining():
    h = BarrierHandler(2)
    h.on_unaligned_barrier(0, 9)
    assert h.on_cancel(1, 9) == [DropCapture(9, None)]


def test_late_barriers_of_an_aborted_checkpoint_start_nothing():
    m = Mailbox(capacity=2)
    m.end_unaligned(6)                               # Abort(6) came first
    m.put_data(_rows(0))
    assert m.put_data(("barrier", 1, _barrier(6, unaligned=True)))
    assert m.take()[0] == "records", "no overtaking, no read-ahead for an aborted checkpoint"
    h = BarrierHandler(2)
    assert h.on_abort(6) == []
    assert h.on_unaligned_barrier(1, 6) == [] and h.capturing == 0
    assert h.on_barrier(1, 6) == [Release((1,))]


def test_abort_releases_an_alignment_and_drops_a_capture():
    h = BarrierHandler(2)
    h.on_barrier(0, 3)
    assert h.on_abort(3) == [Release((0,))]
    h.on_unaligned_barrier(0, 4)
    assert h.on_abort(4) == [DropCapture(4, None)]
