"""A slow consumer blocks the producer (bounded mailbox + TCP flow control), memory stays bounded."""

import socket
import threading
import time

import pytest

from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.host.slot import _reader
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Mailbox
from airflow_checkpoint_provider.engine.serialization import packb


@pytest.mark.timeout(60)
def test_slow_consumer_backpressures_the_writer():
    mailbox = Mailbox(capacity=4)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    writer = P.connect(*server.getsockname())
    conn, _ = server.accept()
    gate = threading.Event()
    gate.set()
    threading.Thread(target=_reader, args=(conn, 0, mailbox, gate), daemon=True).start()

    batch = packb([{"id": i, "pad": "x" * 100} for i in range(600)])  # ~70 KB per frame
    total = 2000                                                       # ~140 MB if unbounded
    sent = [0]

    def produce():
        for _ in range(total):
            P.send_frame(writer, P.RECORDS, batch)
            sent[0] += 1

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    time.sleep(1.0)
    stalled_at = sent[0]
    time.sleep(0.5)
    assert sent[0] == stalled_at, "writer kept sending while nobody consumed"
    assert stalled_at < 600, f"{stalled_at} frames in flight: buffers are not bounded"
    received = 0
    while received < total:
        item = mailbox.take(5.0)
        assert item is not None
        received += 1
    t.join(10)
    assert sent[0] == total
    writer.close()
    server.close()
