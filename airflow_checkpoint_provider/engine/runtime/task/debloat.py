"""Buffer debloating: in-flight data bounded by time, not by count (Flink's FLIP-183).

An aligned barrier waits behind every record queued ahead of it, so what matters is how
long the queued records take to process, not how many batches they are. Each input channel
of a task therefore gets *credit*, in records: its sender may have at most that many records
sent and not yet processed (queued in the task's mailbox, in socket buffers, or being
processed). The credit of a task's mailbox is sized from its measured throughput::

    budget = throughput (records per busy second) x target (default 1 s) x QUEUE_SHARE
    credit per channel = clamp(budget / channels, MIN_CHANNEL_CREDIT, cap)

The target bounds what an aligned checkpoint waits for, not only the queue: ``QUEUE_SHARE``
(70%) of it for the queued records, the rest for the barrier's trip on top of them (the
source finishing the part of a batch it is emitting, a throughput that fell since it was
last measured, the snapshot and the ack), and the throughput the credit is sized from is the
lower of the smoothed and the last measurement (:attr:`ThroughputMeter.credit_rate`).
Profiled in BENCHMARKS.md (checkpoints under backpressure): with the whole target for the
queue, p99 was 1.1-1.3 s at a 1 s target; with 80% of it and the smoothed rate, 1.0-1.3 s
where a record's cost swung 2x from one second to the next.

A consumer returns credit as it processes an item (every ``1 / GRANT_FRACTION`` of its
credit, :meth:`.mailbox.Mailbox.credit_step`), not once per item, and a source reads no more
than its output channels' *smallest* credit: a source waiting for credit in the middle of a
batch takes no checkpoint trigger (profiled: 100-600 ms of trigger delay before).

``cap`` is what a mailbox held before (its capacity in batches x the largest batch), so a
fast consumer keeps today's buffers and its throughput. The throughput counts only the time
the task was busy (not waiting for input), from its first records on (not its start-up).
Senders split a batch to the credit they have; a source reads no more than its outputs can
take (:class:`SourceReadSize`, in its own records), and waits (handling checkpoint
triggers) while they have no credit: it slows down instead of filling buffers.

Debloating never starves a branch (issue 51). Credit grows on any measurement, but shrinks
only on that of a *bottleneck*: a consumer busy at least half the time with records
waiting for it (:meth:`.mailbox.Mailbox.consumed`). A window behind a per-batch combiner
gets a row or two per batch and is busy with watermarks, timers and snapshots (and, in
its first measurement, was busy with its task's start-up): it measured 1-3 records a
second, its credit fell to the floor (8 records) and stayed there (a mostly idle task is
not measured again), and a source whose chain held the combiner read at most that many
records at a time. Reported: Nexmark q19 and q7 on one source, 17 s and 48 s alone, had
not finished after 9 minutes together (28-35 s without debloating). The floor
(``MIN_CHANNEL_CREDIT``) now bounds the credit of a real bottleneck only.

Before its first measurement a consumer's credit grows by *slow start*: each time it waits
for input, to what its records so far say it processes in the target, at most double
(:func:`slow_start_credit`), from ``INITIAL_CHANNEL_CREDIT`` (128 records) for a per-record
consumer and ``INITIAL_BATCH_CREDIT`` (1,024) for a vectorized one, whose cost per batch is
milliseconds whatever its size. The vectorized start is not earned: the first measurement
window may lower it even if it was starved. With 8,192 records (kept by a starved consumer
as an earned credit), a vectorized window join fed by a source catching up after its start
took 2-6 s per checkpoint on a loaded core. An in-slot sender, as a TCP one, is granted credit
``1 / GRANT_FRACTION`` of it at a time: a source read 1-10 records when that was all the
credit free, and its consumer paid a batch's cost for them (a few milliseconds for Nexmark
q16's aggregate). Measured on Nexmark, one core, default settings against
debloating off, per CPU-second: q9 0.50, q4 0.54, q3 0.58, q5+q18 0.68 before (a vectorized
task fed 128 rows at a time for its first seconds); with it (and the key index's two
sorted runs, the vectorized start and the measurements that ignore snapshots) the 29 jobs
of BENCHMARKS.md's defaults table are at 0.91-1.16 (q16 at 0.96: its checkpoints complete
on time, 7-9 against 5-6, each a snapshot of its distinct sets' new pairs).

Credit flows back as :data:`~..protocol.frames.CREDIT` frames on a TCP channel (the
receiving slot writes them on the same connection) and through the mailbox's condition on an
in-slot channel. Unaligned checkpoints: a channel that reads ahead to its barrier gets its
records' credit back as they arrive (see :mod:`.mailbox`), so its sender is never held.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...protocol import frames as P

if TYPE_CHECKING:
    from .outputs import RecordOutput

#: the smallest credit of one channel, in records: a very slow consumer still gets a few
MIN_CHANNEL_CREDIT = 8
#: credit of a channel before its consumer's throughput is measured (after its first
#: ``MEASURE_SECONDS`` busy): small, so that a slow consumer does not start with seconds of
#: input queued; a fast one grows out of it within a few items (:func:`slow_start_credit`)
INITIAL_CHANNEL_CREDIT = 128
#: credit of a channel into a vectorized consumer (Arrow batches) until its first
#: measurement window ends: its cost per batch is milliseconds whatever the batch's size
#: (Nexmark q16's aggregate: 5 ms for 100 rows, 16 ms for 8,192), so 128 records at a time
#: would start it at a few thousand a second. Unearned: the first measurement, even of a
#: starved consumer, may lower it (to the per-record start at least)
INITIAL_BATCH_CREDIT = 1024
#: how often (busy seconds of the consumer) its throughput is measured again (Flink: 200 ms)
MEASURE_SECONDS = 0.2
#: a TCP channel's credit is announced once this fraction of it is free again (fewer frames)
GRANT_FRACTION = 8
#: the part of the target the queued records get (the rest: the barrier's trip around them)
QUEUE_SHARE = 0.7
#: weight of a new measurement in the smoothed throughput
SMOOTHING = 0.5
#: the credit follows a slowdown at once, down to this share of the smoothed rate per
#: measurement (a slower one is more often a disturbance than a slower consumer)
MAX_SHRINK = 0.5

#: windows in a row a checkpoint's snapshot may disturb (:attr:`ThroughputMeter.disturbed`);
#: a task always writing one is measured as it is
MAX_DISTURBED = 2

_CREDIT = struct.Struct("!I")


class ThroughputMeter:
    """Records processed per busy second of a task, smoothed. Busy: the wall time minus the
    time the task waited for input (:meth:`add_idle`).

    Credit is sized from :attr:`credit_rate`: the smoothed rate, or the last measurement if
    that is lower, down to half the smoothed rate (``MAX_SHRINK``). A consumer that slowed
    down (a loaded machine, costlier records) shrinks its queue at once; one that sped up
    grows it over a few measurements. With the smoothed rate alone, queues sized just before
    a slowdown took up to 25% longer to drain than the queue share of the target (aligned
    checkpoints of 1.0-1.14 s at a 1 s target). Without the floor, one measurement taken
    while a snapshot's upload shared the core (Nexmark q16 on one core: 25,000 records/s
    against 300,000-600,000 before and after) cut the credit to a twentieth, and the
    consumer took small batches, each at its fixed cost, until it was measured again.

    Two things never lower the rate (issue 51: a branch's credit fell to the floor and
    stayed there, see the module's docstring):

    * the task's start-up: without ``now`` the clock starts at the first records processed,
      not when the meter is made (opening operators, restoring state, connecting channels:
      a first measurement of 1-500 records/s for consumers of 100,000s a second);
    * a measurement of a *starved* consumer (it waited for input at least as long as it
      was busy): it processed what it got, so its rate is only a lower bound of what it
      can process: it may raise the rate, never lower it (nor, as the first measurement,
      the credit below the initial one: :attr:`starved`). A sparse input (a combiner's
      few rows per batch, a window's input) spends its busy time on watermarks, timers and
      snapshots and measures a few records per second. A consumer that is the bottleneck
      is busy all the time, and still shrinks its queue at once;
    * a measurement whose window saw the task write a checkpoint (:attr:`disturbed`): its
      synchronous part took the task thread, its upload shares the core. Nexmark q16 on one
      core measured 25,000 records/s in such a window against 300,000-600,000 before and
      after, and its source read smaller batches, each at the aggregate's fixed cost, until
      the next measurement. A task whose snapshots take longer than ``MAX_DISTURBED``
      windows is measured as it is: that is its throughput."""

    def __init__(self, now: float | None = None) -> None:
        self.rate: float | None = None
        self.last: float | None = None
        self._rows = 0
        self._idle = 0.0
        #: ``None``: not started (the first :meth:`add` starts the clock)
        self._since: float | None = now
        #: the last measurement was of a starved consumer: a lower bound (the credit sized
        #: from it must not shrink, :meth:`.mailbox.Mailbox.consumed`)
        self.starved = False
        #: measurement windows ended (measured, or restarted as mostly idle)
        self.windows = 0
        #: the last measurement's window saw a checkpoint of the task (a lower bound)
        self.disturbed = False
        self._snapshots = 0          # the task's snapshots being written now
        self._snapshot_seen = False  # one was, in this window
        self._disturbed_run = 0      # windows in a row that saw one

    def snapshot(self, uploading: bool | None = None) -> None:
        """The task takes a checkpoint's snapshot (``None``: its synchronous part), or began
        (``True``) or ended uploading one: the windows that see it are disturbed."""
        if uploading is not None:
            self._snapshots += 1 if uploading else -1
        self._snapshot_seen = True

    def add_idle(self, seconds: float) -> None:
        if self._since is not None:
            self._idle += seconds

    def add(self, rows: int, now: float) -> bool:
        """Count ``rows`` processed; True when the rate was measured again."""
        if self._since is None:  # the first records: the clock starts after them
            self._since = now
            return False
        self._rows += rows
        elapsed = now - self._since
        busy = elapsed - self._idle
        if busy < MEASURE_SECONDS or not self._rows:
            if elapsed < 10 * MEASURE_SECONDS or busy >= MEASURE_SECONDS:
                return False
            if not self._rows or busy < MEASURE_SECONDS / 10:
                # mostly idle: restart the window (the rate of a busy spell is what counts)
                self._rows, self._idle, self._since = 0, 0.0, now
                self._snapshot_seen = False  # (an upload still running is still seen)
                self.windows += 1
                return False
            # mostly idle, but busy long enough to say something: measured (starved: it
            # may raise the credit, not lower it). A consumer whose credit held its source
            # to small reads was not measured again before, and kept that credit.
        measured = self._rows / busy
        self.starved = self._idle >= busy
        seen = self._snapshot_seen or self._snapshots > 0
        self._disturbed_run = self._disturbed_run + 1 if seen else 0
        self.disturbed = 0 < self._disturbed_run <= MAX_DISTURBED
        self._rows, self._idle, self._since = 0, 0.0, now
        self._snapshot_seen = False
        self.windows += 1
        if ((self.starved or self.disturbed) and self.rate is not None
                and measured < (self.credit_rate or 0.0)):
            return False  # a lower bound below the rate: it says nothing new
        self.last = measured
        self.rate = (
            measured if self.rate is None else SMOOTHING * measured + (1 - SMOOTHING) * self.rate
        )
        return True

    @property
    def rows_counted(self) -> int:
        """Records counted since the last measurement (the first item's not included)."""
        return self._rows

    def early_rate(self, now: float) -> float | None:
        """Before the first measurement: records per busy second so far (``None``: measured
        already, or nothing counted yet). What :func:`slow_start_credit` grows from."""
        if self.rate is not None or self._since is None or not self._rows:
            return None
        busy = now - self._since - self._idle
        return self._rows / busy if busy > 0 else None

    @property
    def credit_rate(self) -> float | None:
        """The rate credit is sized from: the lower of the smoothed and the last one, but no
        less than half the smoothed one."""
        if self.rate is None or self.last is None:
            return self.rate
        return max(min(self.rate, self.last), self.rate * MAX_SHRINK)


def channel_credit(
    rate: float | None, target_s: float, channels: int, initial: int, cap: int
) -> int:
    """Credit of one of ``channels`` input channels of a consumer processing ``rate``
    records per second (``None``: not measured yet, ``initial``)."""
    if rate is None:
        share = initial
    else:
        share = int(rate * target_s * QUEUE_SHARE / max(1, channels))
    return max(MIN_CHANNEL_CREDIT, min(cap, share))


def slow_start_credit(share: int, early_rate: float, target_s: float, channels: int,
                      cap: int) -> int:
    """Credit of a channel whose consumer waits for input before its first measurement:
    what its records so far say it can process in the target, at most double the credit it
    has (slow start, as TCP's congestion window), never less.

    A consumer's first measurement takes ``MEASURE_SECONDS`` of busy time; a fast consumer
    fed a few records at a time is busy a few microseconds per item and waits for its
    sender, which waits for credit: with the initial credit (128 records) a source fed a
    vectorized task 128 rows at a time for seconds (Nexmark q3: 2x the job's time, most of
    it per-item overhead). A slow consumer rarely finds its queue empty, and when it does,
    its records so far hold its credit to what it processes in the target."""
    return max(share, min(2 * share, channel_credit(early_rate, target_s, channels, share,
                                                      cap)))


class SourceReadSize:
    """How many records a source reads now: no more than each of its outputs has credit
    for, counted in the *source's* records.

    A writer's credit is in the records its channels carry, and the source's chain between
    the read and the writer may cut the stream (a filter, a per-batch combiner: Nexmark q7's
    turns a batch into a row per window). Issue 51: a source that read at most its smallest
    output credit read a few records at a time for the whole job when one branch was such a
    combiner in front of a window (a credit of 8-128 of the combiner's rows, a batch of
    65,536 rows before): both branches crawled (a job of 17 s took minutes). So the credit
    of each writer is divided by the records it got per record read (measured, smoothed;
    the higher of the smoothed and the last, as a batch over its credit holds the source in
    the middle of it), at most 1: a chain that multiplies records reads as before. An output
    without credit still stops the read (backpressure)."""

    def __init__(self, writers: Sequence[RecordOutput]) -> None:
        self.writers = writers
        self._emitted = [w.emitted for w in writers]
        self._ratio: list[float | None] = [None] * len(writers)
        self._last: list[float] = [1.0] * len(writers)

    def room(self, batch_size: int) -> int:
        room = batch_size
        for i, w in enumerate(self.writers):
            free = w.available()
            if free is None:
                continue
            if free <= 0:
                return 0
            ratio = self._ratio[i]
            per_read = 1.0 if ratio is None else min(1.0, max(ratio, self._last[i]))
            if per_read > 0:  # else this output got nothing from any read yet
                room = min(room, max(1, int(free / per_read)))
        return room

    def read(self, records: int) -> None:
        """The source read ``records`` and pushed them through its chain."""
        if records <= 0:
            return
        for i, w in enumerate(self.writers):
            measured = (w.emitted - self._emitted[i]) / records
            self._emitted[i] = w.emitted
            ratio = self._ratio[i]
            self._last[i] = measured
            self._ratio[i] = (measured if ratio is None
                              else SMOOTHING * measured + (1 - SMOOTHING) * ratio)


class CreditAnnouncer:
    """The receiving end of a TCP channel: sends CREDIT frames to its sender (from the task
    thread, the reader thread and the slot's control thread: one lock)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def __call__(self, rows: int) -> None:
        try:
            with self._lock:
                P.send_frame(self.sock, P.CREDIT, _CREDIT.pack(min(rows, 0xFFFFFFFF)))
        except OSError:
            pass  # the channel is gone: its reader reports it


class SenderCredit:
    """The sending end of a TCP channel: the credit its receiver granted, read from the
    CREDIT frames that come back on the connection (only those do)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.credit = 0
        self._buf = bytearray()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)

    def refresh(self) -> int:
        """Take the credit frames that arrived (without waiting); the credit."""
        self._read(0)
        return self.credit

    def wait(self, timeout: float | None = None) -> int:
        """Wait until there is credit (at most ``timeout`` seconds); the credit. Raises
        :class:`~..protocol.frames.ConnectionClosed` if the receiver closed the channel."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._read(0)
        while self.credit <= 0:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            self._read(left)
        return self.credit

    def _read(self, timeout: float | None) -> None:
        ms = -1 if timeout is None else int(timeout * 1000)
        while self._poll.poll(ms):
            try:
                data = self.sock.recv(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                raise P.ConnectionClosed("the downstream task closed its input channel")
            self._buf += data
            self._parse()
            ms = 0  # take what else is there, without waiting

    def _parse(self) -> None:
        buf, head = self._buf, P.HEADER.size
        while len(buf) >= head:
            length, kind = P.HEADER.unpack_from(buf)
            if len(buf) < head + length:
                return
            if kind != P.CREDIT or length != _CREDIT.size:
                raise P.ConnectionClosed(f"unexpected frame type {kind} from a receiver")
            self.credit += _CREDIT.unpack_from(buf, head)[0]
            del buf[: head + length]
