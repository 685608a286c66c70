"""Buffer debloating's credit (runtime/debloat.py, the mailbox's credit side): an input
channel has at most its credit of records sent and not yet processed, and the credit follows
the consumer's measured throughput. No job: mailboxes, channels and sockets only."""

import socket
import threading

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.config import CheckpointConfig
from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.plan.graph import HASH
from airflow_checkpoint_provider.engine.protocol import BarrierKind, CheckpointBarrier
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.host.channels import (
    LocalChannel,
    OutputChannel,
    RecordWriter,
)
from airflow_checkpoint_provider.engine.runtime.task.debloat import (
    INITIAL_BATCH_CREDIT,
    MAX_DISTURBED,
    MIN_CHANNEL_CREDIT,
    CreditAnnouncer,
    ThroughputMeter,
    channel_credit,
)
from airflow_checkpoint_provider.engine.runtime.task.mailbox import ItemKind, Mailbox
from airflow_checkpoint_provider.engine.serialization import pack_records, unpack_records

pytestmark = pytest.mark.timeout(30)


class _NotMeasured(ThroughputMeter):
    """The credit stays where a test put it (the waits of a test are not a task's work)."""

    def add(self, rows, now):
        return False


def _mailbox(**kwargs):
    m = Mailbox(8, **kwargs)
    m.meter = _NotMeasured()
    return m


def _open_gate():
    gate = threading.Event()
    gate.set()
    return gate


def test_an_in_slot_sender_splits_its_batch_to_the_credit_and_waits_for_processing():
    m = _mailbox(channels=1, target_s=1.0, initial_credit=10, max_credit=1000)
    ch = LocalChannel(m, _open_gate(), 0)
    sent = threading.Event()
    t = threading.Thread(
        target=lambda: (
            ch.send_records(P.RECORDS, [{"i": i} for i in range(25)], pack_records),
            sent.set(),
        )
    )
    t.start()
    first = m.take(5)
    assert [r["i"] for r in first[2]] == list(range(10)), "a part of at most the credit"
    assert not sent.wait(0.2) and m.take(0.05) is None, "no credit until it is processed"
    m.consumed(0, len(first[2]))
    second = m.take(5)
    assert len(second[2]) == 10
    m.consumed(0, 10)
    assert len(m.take(5)[2]) == 5
    assert sent.wait(5)
    t.join()


def test_credit_over_tcp_bounds_what_the_sender_has_in_flight():
    """The sender stops at its credit although the socket buffers have room for much more;
    processing the records sends it credit back (CREDIT frames on the same connection)."""
    m = _mailbox(channels=1, target_s=1.0, initial_credit=100, max_credit=10_000)
    a, b = socket.socketpair()
    m.set_announcer(0, CreditAnnouncer(b))  # the receiver grants its first credit
    out = OutputChannel(a, credit_based=True)
    assert out.available(1.0) == 100
    done = threading.Event()
    rows = [{"i": i} for i in range(1000)]  # ~10 KB: the socket would take it all
    threading.Thread(
        target=lambda: (out.send_records(P.RECORDS, rows, pack_records), done.set()), daemon=True
    ).start()
    received = []
    while len(received) < 1000:
        kind, payload = P.recv_frame(b)
        assert kind == P.RECORDS
        part = unpack_records(payload)
        assert len(part) <= 100
        received += part
        # nothing beyond the credit was sent: the next frame only comes after processing
        b.settimeout(0.05)
        with pytest.raises(TimeoutError):
            b.recv(1, socket.MSG_PEEK)
        b.settimeout(None)
        m.put_data(("records", 0, part))
        m.take(1)
        m.consumed(0, len(part))
    assert done.wait(5) and received == rows
    a.close()
    b.close()


def test_arrow_batches_are_sliced_without_copies_to_the_credit():
    m = _mailbox(channels=1, target_s=1.0, initial_credit=40, max_credit=10_000)
    ch = LocalChannel(m, _open_gate(), 0)
    batch = pa.record_batch({"x": list(range(100))})
    t = threading.Thread(target=ch.send_records, args=(P.ARROW, batch, None))
    t.start()
    parts = []
    while sum(len(p) for p in parts) < 100:
        item = m.take(5)
        parts.append(item[2])
        m.consumed(0, len(item[2]))
    t.join(5)
    assert [len(p) for p in parts] == [40, 40, 20]
    assert pa.Table.from_batches(parts).column("x").to_pylist() == list(range(100))


def test_the_credit_follows_the_measured_throughput_and_never_drops_below_the_floor(monkeypatch):
    clock = [100.0]
    meter = ThroughputMeter(now=clock[0])
    # 50 records processed in 0.25 s busy (0.1 s of it waiting for input): 333 records/s
    meter.add_idle(0.1)
    clock[0] += 0.35
    assert meter.add(50, clock[0])
    assert meter.rate == pytest.approx(50 / 0.25)
    # a 1 s target over two channels: 70% of it (QUEUE_SHARE) for the queue, 70 records each
    assert channel_credit(meter.rate, 1.0, 2, 128, 10_000) == 70
    assert channel_credit(0.5, 1.0, 2, 128, 10_000) == MIN_CHANNEL_CREDIT
    assert channel_credit(1e9, 1.0, 2, 128, 10_000) == 10_000, "never above the old bound"
    assert channel_credit(None, 1.0, 2, 128, 10_000) == 128


def test_credit_follows_a_slowdown_at_once_and_a_speedup_over_measurements():
    meter = ThroughputMeter(now=0.0)
    assert meter.credit_rate is None
    meter.add(1_000, 1.0)  # 1,000 records/s
    assert meter.credit_rate == pytest.approx(1_000)
    meter.add(400, 2.0)  # slowed down to 400/s: the queue is sized from 400 at once
    assert meter.rate == pytest.approx(700) and meter.credit_rate == pytest.approx(400)
    meter.add(1_000, 3.0)  # fast again: halfway (smoothed), not at once
    assert meter.credit_rate == pytest.approx(850)


def test_a_slow_consumer_shrinks_its_credit(clock):
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=500, max_credit=10_000)
    m.meter = ThroughputMeter(now=clock[0])
    assert m.credit_per_channel == 500
    m.put_data(("records", 0, [{"i": i} for i in range(100)]))  # records wait for it
    for _ in range(5):  # 20 records a second, busy all the time
        clock[0] += 0.5
        m.consumed(0, 10)
    assert m.credit_per_channel == 14, "20 records/s x 70% of the 1 s target"


def test_a_channel_reading_ahead_to_an_unaligned_barrier_gets_its_credit_back_on_arrival():
    m = _mailbox(channels=2, target_s=1.0, initial_credit=10, max_credit=10_000)
    grants: list[tuple[int, int]] = []
    m.set_announcer(0, lambda n: grants.append((0, n)))
    m.set_announcer(1, lambda n: grants.append((1, n)))
    assert grants == [(0, 10), (1, 10)]
    m.put_data(("records", 0, [{"i": i} for i in range(10)]))  # channel 0 used its credit
    m.begin_unaligned(4)  # both channels read ahead to barrier 4: a sender held for
    assert grants[2:] == [(0, 10), (1, 10)]  # credit goes on to its barrier
    m.put_data(("records", 0, [{"i": 0}] * 10))
    assert grants[-1] == (0, 10), "what arrives while reading ahead is credited again"
    m.put_data(("barrier", 0, CheckpointBarrier(4, 0, BarrierKind.CHECKPOINT, "/x", True)))
    n = len(grants)
    m.put_data(("records", 0, [{"i": 0}] * 5))
    assert len(grants) == n, "past its barrier the channel waits for processing again"


def test_without_a_target_there_is_no_credit():
    m = Mailbox(8, channels=1, target_s=None)
    assert m.credit_per_channel is None
    assert m.reserve(0, 10**6) == 10**6
    announced = []
    m.set_announcer(0, announced.append)
    assert announced == []


@pytest.mark.parametrize("value", [0, 5, 1.5, "1000"])
def test_the_debloat_target_is_validated(value):
    with pytest.raises(ConfigurationError, match="buffer_debloat_target_ms"):
        CheckpointConfig(buffer_debloat_target_ms=value)


def test_a_source_reads_no_more_than_its_smallest_channel_credit_with_hash_partitioning():
    """Not the smallest credit times the channels: half of such batches put more than its
    credit on one channel, and the source waits for it in the middle of the batch, taking
    no checkpoint trigger meanwhile (profiled: 100-600 ms of trigger delay at 10 ms a
    record)."""
    boxes = [_mailbox(channels=1, target_s=1.0, initial_credit=c, max_credit=1000)
             for c in (10, 30)]
    writer = RecordWriter(HASH, [LocalChannel(m, _open_gate(), 0) for m in boxes],
                          lambda r: r["k"], 128, 0)
    assert writer.available() == 10


def test_small_items_queue_beyond_the_item_capacity_while_the_credit_bounds_the_records():
    """A slow consumer's items are small (parts of its senders' credit): an in-slot sender
    held by the item count would be held in the middle of a batch."""
    m = _mailbox(channels=1, target_s=1.0, initial_credit=100, max_credit=50)
    done = threading.Event()

    def send():
        for i in range(20):  # 20 items of 2 records: beyond the capacity of 8 items
            m.put_data(("records", 0, [{"i": i}, {"i": i}]))
        done.set()

    threading.Thread(target=send, daemon=True).start()
    assert done.wait(5), "the sender was held by the item count"
    assert m.queued_rows == 40
    blocked = threading.Event()

    def more():  # past max_credit records the item count holds again
        m.put_data(("records", 0, [{"i": 0}] * 20))
        m.put_data(("records", 0, [{"i": 0}]))
        blocked.set()

    threading.Thread(target=more, daemon=True).start()
    assert not blocked.wait(0.3)
    while m.take(0.1) is not None and not blocked.is_set():
        pass
    assert blocked.wait(5)


def test_a_consumer_returns_credit_in_steps_of_an_eighth_of_its_credit():
    m = _mailbox(channels=1, target_s=1.0, initial_credit=800, max_credit=10_000)
    assert m.credit_step(800) == 100
    assert m.credit_step(100) is None, "a small item returns its credit at once"
    assert _mailbox(channels=1, target_s=1.0, initial_credit=16).credit_step(100) == MIN_CHANNEL_CREDIT
    assert Mailbox(8, channels=1, target_s=None).credit_step(10**6) is None


def test_in_slot_credit_the_sender_was_told_of_survives_a_falling_throughput():
    """As over TCP: a source reads a batch to the credit it was told, then sends it. If the
    consumer's credit shrinks meanwhile (its throughput fell), the send must not wait for
    the new, smaller credit in the middle of the batch (profiled: a source that took a
    trigger 4.6 s late at a load average of 38)."""
    m = _mailbox(channels=1, target_s=1.0, initial_credit=100, max_credit=10_000)
    ch = LocalChannel(m, _open_gate(), 0)
    assert ch.available() == 100
    m._share = 10  # the throughput was measured again: a tenth of it
    sent = threading.Event()
    threading.Thread(
        target=lambda: (
            ch.send_records(P.RECORDS, [{"i": i} for i in range(100)], pack_records),
            sent.set(),
        ),
        daemon=True,
    ).start()
    assert sent.wait(5), "the sender waited for credit it had been told it had"
    assert ch.available() == 0, "nothing more until the consumer processed below its credit"


def _drain_and_wait(m, clock, rows, seconds):
    """The consumer takes an item of ``rows`` records, processes it in ``seconds`` (busy),
    returns its credit and finds its queue empty."""
    m.put_data((ItemKind.RECORDS, 0, [{"i": i} for i in range(rows)]))
    assert m.take(timeout=0)[0] == ItemKind.RECORDS
    clock[0] += seconds
    m.consumed(0, rows)
    assert m.take(timeout=0) is None  # waits for input (none comes)
    return m.credit_per_channel


@pytest.fixture
def clock(monkeypatch):
    import airflow_checkpoint_provider.engine.runtime.task.mailbox as mailbox_module

    now = [10.0]
    monkeypatch.setattr(mailbox_module.time, "monotonic", lambda: now[0])
    return now


def test_a_fast_consumer_waiting_for_input_doubles_its_credit_before_its_first_measurement(
        clock):
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=128, max_credit=10_000)
    grants: list[int] = []
    m.set_announcer(0, grants.append)
    assert grants == [128]
    # 1M records a second (busy), fed by a sender held to the credit: slow start, not 128
    # records at a time until a measurement (0.2 busy seconds, here thousands of items)
    credits, processed = [], 0
    for _ in range(9):
        rows = m.credit_per_channel  # the sender sends all it has credit for
        credits.append(_drain_and_wait(m, clock, rows, rows / 1e6))
        processed += rows
    assert credits == [128, 256, 512, 1024, 2048, 4096, 8192, 10_000, 10_000]
    assert m.meter.rate is None, "not measured yet: the credit grew from the records so far"
    assert sum(grants) - processed == 10_000, "the TCP sender was told of the grown credit"


def test_slow_start_grows_a_slow_consumers_credit_only_to_what_it_processes_in_the_target(
        clock):
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=128, max_credit=10_000)
    # 1,000 records a second: 700 records of credit (70% of the 1 s target), not more
    credits = [_drain_and_wait(m, clock, 10, 0.01) for _ in range(6)]
    assert credits == [128, 256, 512, 700, 700, 700]


def test_a_measured_consumer_waiting_for_input_keeps_its_credit(clock):
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=128, max_credit=10_000)
    m.meter = ThroughputMeter(now=clock[0])
    clock[0] += 0.3
    m.consumed(0, 30)  # measured: 100 records/s, 70 records of credit
    assert m.meter.rate == pytest.approx(100)
    share = m.credit_per_channel
    assert [_drain_and_wait(m, clock, 10, 1e-6) for _ in range(3)] == [share] * 3


def _batched(clock):
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=128, max_credit=10_000)
    m.meter = ThroughputMeter(now=clock[0])
    m.start_batched(INITIAL_BATCH_CREDIT)
    assert m.credit_per_channel == INITIAL_BATCH_CREDIT
    return m


def test_a_batched_start_is_lowered_by_the_first_measurement_even_of_a_starved_consumer(clock):
    m = _batched(clock)
    # a sparse consumer (a window join's input): 30 records in 0.3 busy seconds of 1 s.
    # Starved, so a lower bound that never lowers an earned credit; the batched start was
    # not earned (it kept 8,192 records per channel for the whole job, and under load that
    # queue took seconds to drain before a barrier)
    m.meter.add_idle(0.7)
    clock[0] += 1.0
    m.consumed(0, 30)
    assert m.meter.starved
    assert m.credit_per_channel == 128, "back to the start credit of a per-record consumer"
    m.meter.add_idle(0.7)
    clock[0] += 1.0
    m.consumed(0, 30)
    assert m.credit_per_channel == 128, "and from there on, starved measurements as before"


def test_a_batched_start_is_lowered_when_a_mostly_idle_consumers_first_window_restarts(clock):
    m = _batched(clock)
    m.meter.add_idle(2.5)
    clock[0] += 2.5
    m.consumed(0, 5)  # 5 records in 2.5 s, busy 0: not measured, the window restarts
    assert m.meter.rate is None and m.meter.windows == 1
    assert m.credit_per_channel == 128


def test_a_fast_batched_consumer_keeps_the_credit_its_measurement_earns(clock):
    m = _batched(clock)
    clock[0] += 0.25
    m.consumed(0, 250_000)  # a million records a busy second
    assert m.credit_per_channel == 10_000, "the cap"
    m2 = _batched(clock)
    m2.put_data((ItemKind.RECORDS, 0, [{"i": i} for i in range(2_000)]))  # records wait
    clock[0] += 0.25
    m2.consumed(0, 1_000)  # 4,000 records a busy second: 70% of the 1 s target
    assert m2.credit_per_channel == 2_800


def test_a_window_that_saw_a_snapshot_may_raise_the_credit_but_not_lower_it(clock):
    m = Mailbox(8, channels=1, target_s=1.0, initial_credit=128, max_credit=100_000)
    m.meter = ThroughputMeter(now=clock[0])
    m.put_data((ItemKind.RECORDS, 0, pa.table({"i": list(range(50_000))})))  # records wait

    def window(rows, *, uploading=None):
        if uploading is not None:
            m.snapshot(uploading=uploading)
        clock[0] += 0.25
        m.consumed(0, rows)
        return m.credit_per_channel

    assert window(25_000) == 70_000  # 100,000 records a busy second
    # a snapshot's upload shares the core: 10,000 a second in that window, and the next
    m.snapshot()  # its synchronous part
    assert window(2_500, uploading=True) == 70_000, "not lowered by the window of a snapshot"
    assert m.meter.disturbed
    assert window(2_500, uploading=False) == 70_000, "nor by the one in which it ended"
    assert window(25_000) == 70_000 and not m.meter.disturbed
    assert window(12_500) == 35_000, "a slowdown without a snapshot: at once, as before"
    # a task always uploading is measured as it is after MAX_DISTURBED windows
    m.snapshot(uploading=True)
    credits = [window(1_250) for _ in range(MAX_DISTURBED + 1)]
    assert credits[:MAX_DISTURBED] == [35_000] * MAX_DISTURBED
    assert credits[-1] < 35_000
