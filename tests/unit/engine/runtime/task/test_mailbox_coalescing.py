"""Queued Arrow batches are folded into one call of a vectorized operator: only a prefix of
the queue, never past an event or a held channel, never when a control item waits."""

import pyarrow as pa

from airflow_checkpoint_provider.engine.protocol import CheckpointBarrier
from airflow_checkpoint_provider.engine.runtime.task.mailbox import Finish, Mailbox


def _batch(n):
    return pa.RecordBatch.from_pydict({"key": list(range(n))})


def _records(item):
    return item[0] == "records"


def test_take_following_takes_the_accepted_prefix_in_order():
    m = Mailbox(16)
    items = [("records", 0, _batch(1)), ("records", 1, _batch(2)), ("barrier", 0, CheckpointBarrier(1, 0, "CHECKPOINT", "/c")),
             ("records", 0, _batch(3))]
    for it in items:
        m.put_data(it)
    assert m.take_following(_records, limit=10) == items[:2]  # stops at the barrier
    assert m.take(0) is items[2] and m.take(0) is items[3]


def test_take_following_respects_the_limit_and_pending_control():
    m = Mailbox(16)
    for i in range(5):
        m.put_data(("records", 0, _batch(i + 1)))
    assert len(m.take_following(_records, limit=2)) == 2
    m.put_control(Finish())
    assert m.take_following(_records, limit=10) == []  # control first, as with take()
    assert m.take(0) == Finish()
    assert len(m.take_following(_records, limit=10)) == 3


def test_a_full_mailbox_wakes_its_writer_after_take_following():
    import threading

    m = Mailbox(2)
    m.put_data(("records", 0, _batch(1)))
    m.put_data(("records", 0, _batch(1)))
    done = threading.Event()
    threading.Thread(target=lambda: (m.put_data(("records", 0, _batch(1))), done.set()),
                     daemon=True).start()
    assert not done.wait(0.2)
    assert len(m.take_following(_records, limit=2)) == 2
    assert done.wait(5)
