"""Channels between subtasks of one slot process: straight into the mailbox, in order, with
the flow control of a TCP channel."""

import threading
import time

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.protocol import BarrierKind, CheckpointBarrier
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.batches import encode_arrow
from airflow_checkpoint_provider.engine.runtime.host.channels import LocalChannel
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Mailbox
from airflow_checkpoint_provider.engine.serialization import packb


def _channel(capacity=8):
    gate = threading.Event()
    gate.set()
    mailbox = Mailbox(capacity)
    return LocalChannel(mailbox, gate, 3), mailbox, gate


def _drain(mailbox):
    items = []
    while (item := mailbox.take(0.01)) is not None:
        items.append(item)
    return items


def test_items_arrive_in_order_arrow_by_reference_dicts_as_copies():
    ch, mailbox, _ = _channel()
    batch = pa.RecordBatch.from_pydict({"key": ["a"], "value": [1]})
    rows = [{"key": "a", "value": 1}]
    barrier = CheckpointBarrier(4, 10, BarrierKind.CHECKPOINT, "/chk-4")
    ch.send_records(P.ARROW, batch, encode_arrow)
    ch.send_records(P.RECORDS, rows, packb)
    ch.send(P.BARRIER, barrier.encode())
    ch.send(P.CANCEL, packb(5))
    ch.send(P.END_OF_INPUT)
    ch.close()
    items = _drain(mailbox)
    assert [i[0] for i in items] == ["records", "records", "barrier", "cancel", "eoi", "closed"]
    assert all(i[1] == 3 for i in items)
    assert items[0][2] is batch                       # immutable: no copy, no IPC
    assert items[1][2] == rows and items[1][2][0] is not rows[0]  # the receiver may mutate
    assert items[2][2] == barrier and items[3][2] == 5


@pytest.mark.timeout(10)
def test_a_blocked_channel_holds_the_sender_until_alignment_releases_it():
    ch, mailbox, gate = _channel()
    gate.clear()  # the receiver got this channel's barrier and waits for the others
    sent = threading.Event()

    def sender():
        ch.send_records(P.RECORDS, [{"k": 1}], packb)
        sent.set()

    threading.Thread(target=sender, daemon=True).start()
    time.sleep(0.2)
    assert not sent.is_set() and _drain(mailbox) == []
    gate.set()
    assert sent.wait(5) and _drain(mailbox)[0][2] == [{"k": 1}]


def test_a_stopped_receiver_fails_the_sender_as_a_closed_socket_would():
    ch, mailbox, _ = _channel()
    mailbox.close()
    with pytest.raises(P.ConnectionClosed):
        ch.send(P.END_OF_INPUT)
