"""The task mailbox: one place a task thread waits on.

Data items (record batches and in-band events from input channels) are bounded: a full
mailbox blocks the channel reader threads, which stop reading their sockets, which fills
TCP windows and blocks the upstream writers: backpressure without unbounded memory.
Control items (checkpoint triggers, notifications, stop) are never blocked and are taken
first, as in Flink's mailbox model.

Unaligned checkpoints (Flink's unaligned checkpoints, over our FIFO channels). Once
checkpoint N turns unaligned (:meth:`begin_unaligned`):

* its barriers overtake: a barrier N put on any channel goes to the control queue (as a
  ``"ubarrier"`` item) instead of behind the queued records; one already queued is moved;
* the channels *read ahead* to their barrier N: a channel that has not delivered it yet is
  not held back by a full mailbox, so the barrier behind the records in the socket buffers
  arrives at once. What is read ahead is bounded by what the channel held when N turned
  unaligned plus what its sender emitted before forwarding its own barrier N;
* every record item that precedes barrier N on its channel and is not yet taken is
  *captured* (:meth:`start_capture`): the task snapshots at the first barrier, goes on
  processing the queued records, and stores the captured ones as channel state. Each item
  carries the highest barrier its channel had delivered when it was put, so "precedes
  barrier N" is ``tag < N``.

Credit (buffer debloating, :mod:`.debloat`): with a target time, every input channel may
have at most its credit of records sent and not yet processed. An in-slot sender takes
credit with :meth:`Mailbox.reserve`; a TCP channel's credit is announced to its sender
(:meth:`Mailbox.set_announcer`). The task returns credit with :meth:`Mailbox.consumed` once
it processed an item's records, which also measures its throughput, the credit's base.

The items (matched with ``match`` by the task loop):

* a channel item is a tuple ``(kind, channel, payload)`` whose ``kind`` is an
  :class:`ItemKind`: ``RECORDS`` (a batch), ``BARRIER`` (a :class:`CheckpointBarrier`),
  ``UNALIGNED_BARRIER`` (one that overtook, in the control queue), ``CANCEL`` (a checkpoint
  id), ``WATERMARK`` (``(watermark, idle)``), ``END_OF_INPUT`` and ``CLOSED`` (no payload);
* a control item is one of the dataclasses :data:`ControlItem` lists: the coordinator's
  :class:`TriggerCheckpoint`, :class:`NotifyComplete`, :class:`Unalign`,
  :class:`AbortCheckpoint` and :class:`Finish`.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...protocol import CheckpointBarrier
from ...serialization import pack_records
from .debloat import (
    GRANT_FRACTION,
    MIN_CHANNEL_CREDIT,
    ThroughputMeter,
    channel_credit,
    slow_start_credit,
)


class ItemKind(enum.StrEnum):
    """The kind of a channel item (a ``str``: compares equal to its value)."""

    RECORDS = "records"
    BARRIER = "barrier"
    UNALIGNED_BARRIER = "ubarrier"
    CANCEL = "cancel"
    WATERMARK = "watermark"
    END_OF_INPUT = "eoi"
    CLOSED = "closed"


#: ``(kind, channel, payload)`` from input channel ``channel``. A plain tuple, not a
#: dataclass, on purpose: one is made per batch and per event on the hot path (the reader
#: threads, the in-slot senders, alignment's held-back queues) and read with ``item[0]``
#: and ``item[1]`` before the task loop's ``match``; a tuple is built and indexed an order
#: of magnitude faster than a frozen dataclass is built and read (~0.1 against ~1 µs per
#: item under timeit, 2026-12). ``kind`` is the typed part (:class:`ItemKind`); control
#: items, off the hot path, are dataclasses.
ChannelItem = tuple[ItemKind, int, Any]


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint:
    """A source task's trigger: checkpoint (or savepoint) at ``barrier``."""

    barrier: CheckpointBarrier


@dataclass(frozen=True, slots=True)
class NotifyComplete:
    """Checkpoint ``checkpoint_id`` completed: sinks commit."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class Unalign:
    """Checkpoint ``checkpoint_id`` turned unaligned (its alignment timed out)."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class AbortCheckpoint:
    """The coordinator aborted checkpoint ``checkpoint_id``."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The job ends: the task loop stops."""


ControlItem = TriggerCheckpoint | NotifyComplete | Unalign | AbortCheckpoint | Finish


class Mailbox:
    """:param capacity: data items (batches and events) queued at most.
    :param channels: input channels (for their credit).
    :param target_s: buffer debloating's target time (``None``: no credit; what a channel
        has in flight is bounded by ``capacity`` and the socket buffers only).
    :param initial_credit: records of credit per channel before the throughput is measured.
    :param max_credit: the most records of credit per channel."""

    def __init__(self, capacity: int = 64, *, channels: int = 0, target_s: float | None = None,
                 initial_credit: int = 1024, max_credit: int = 1 << 20) -> None:
        self._capacity = capacity
        self._channels = channels
        self._target = target_s
        self._initial_credit, self._max_credit = initial_credit, max_credit
        self.meter = ThroughputMeter()
        self._share = channel_credit(None, target_s or 1.0, channels, initial_credit, max_credit)
        self._outstanding = [0] * channels   # credit granted per channel, not yet consumed
        self._granted = [0] * channels       # in-slot: granted to the sender, not yet used
        self._announcers: dict[int, Callable[[int], None]] = {}
        self.queued_rows = 0                 # records in queued data items
        self._backlogged = False             # records waited, since the last measurement
        self._slow_started = 0               # meter's rows when the credit last grew early
        self._unearned: int | None = None    # the credit before start_batched raised it
        self._pending_grants: list[tuple[int, int]] = []
        self._data: collections.deque = collections.deque()   # (tag, item)
        self._control: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._last_barrier: dict[int, int] = {}   # channel -> highest barrier/cancel put
        self._unaligned = 0                       # checkpoint turned unaligned (0: none)
        self._aborted = 0                         # highest checkpoint aborted: never again
        self._capture_id = 0                      # checkpoint whose channel state is captured
        self._capture: list = []

    # -- put ------------------------------------------------------------------------------
    def put_data(self, item: ChannelItem) -> bool:
        """Block while full (unless the item's channel reads ahead to an unaligned barrier);
        False if the mailbox was closed."""
        ok, grants = self._put(item)
        self._announce(grants)
        return ok

    def _announce(self, grants: list[tuple[int, int]]) -> None:
        """Tell each sender its new credit: called outside the lock (over TCP a socket
        send)."""
        for channel, rows in grants:
            self._announcers[channel](rows)

    def _put(self, item: ChannelItem) -> tuple[bool, list]:
        kind, channel = item[0], item[1]
        with self._cond:
            while (len(self._data) >= self._capacity and not self._closed
                   and not self._reads_ahead(channel) and not self._room_for_rows()):
                self._cond.wait()
            if self._closed:
                return False, []
            tag = self._last_barrier.get(channel, 0)
            if kind == ItemKind.BARRIER or kind == ItemKind.CANCEL:
                chk = item[2].checkpoint_id if kind == ItemKind.BARRIER else item[2]
                self._last_barrier[channel] = max(tag, chk)
                if (kind == ItemKind.BARRIER and chk > self._aborted
                        and (item[2].unaligned or chk == self._unaligned)):
                    self._begin(chk)
                    self._control.append((ItemKind.UNALIGNED_BARRIER, channel, item[2]))
                    self._cond.notify_all()
                    grants, self._pending_grants = self._pending_grants, []
                    return True, grants
            elif kind == ItemKind.RECORDS and self._capture_id and tag < self._capture_id:
                self._capture.append(_captured(item))
            grants = []
            if kind == ItemKind.RECORDS:
                rows = len(item[2])
                self.queued_rows += rows
                if (self._target is not None and channel in self._announcers
                        and self._reads_ahead(channel)):
                    # reading ahead to its barrier: its sender is not held for credit
                    self._outstanding[channel] += rows
                    grants.append((channel, rows))
            self._data.append((tag, item))
            self._cond.notify_all()
            return True, grants

    def put_control(self, item: ControlItem) -> None:
        with self._cond:
            self._control.append(item)
            self._cond.notify_all()

    # -- take -----------------------------------------------------------------------------
    def take(self, timeout: float | None = None, *, control_only: bool = False
             ) -> ChannelItem | ControlItem | None:
        """Next control item, else next data item; ``None`` on timeout."""
        while True:
            with self._cond:
                while True:
                    if self._control:
                        return self._control.popleft()
                    if self._data and not control_only:
                        item = self._data.popleft()[1]
                        if item[0] == ItemKind.RECORDS:
                            self.queued_rows -= len(item[2])
                        self._cond.notify_all()
                        return item
                    if self._closed:
                        return None
                    if not control_only and self.meter.rate is None:
                        grants = self._slow_start()
                        if grants is not None:
                            break
                    waited = time.monotonic()
                    woken = self._cond.wait(timeout)
                    if not control_only:  # waiting for input: not busy
                        self.meter.add_idle(time.monotonic() - waited)
                    if not woken:
                        return None
            self._announce(grants)  # then wait again

    def take_following(self, accept, limit: int) -> list:
        """Without waiting: the data items at the head of the queue, in order, while
        ``accept(item)`` holds, at most ``limit`` (a task folds queued batches into one)."""
        taken: list = []
        with self._cond:
            while (self._data and len(taken) < limit and not self._control
                   and accept(self._data[0][1])):
                item = self._data.popleft()[1]
                if item[0] == ItemKind.RECORDS:
                    self.queued_rows -= len(item[2])
                taken.append(item)
            if taken:
                self._cond.notify_all()
        return taken

    def poll_control(self) -> ChannelItem | ControlItem | None:
        with self._cond:
            return self._control.popleft() if self._control else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- credit (buffer debloating) ---------------------------------------------------------
    @property
    def credit_per_channel(self) -> int | None:
        """Records of credit each input channel has (``None``: no debloating)."""
        return None if self._target is None else self._share

    def credit_step(self, rows: int) -> int | None:
        """Records after which a task should return credit while processing an item of
        ``rows`` records (:meth:`consumed`), so that its sender gets credit back every
        ``1 / GRANT_FRACTION`` of the target; ``None``: the item is small enough to return
        its credit at once (or no debloating)."""
        if self._target is None:
            return None
        step = max(MIN_CHANNEL_CREDIT, self._share // GRANT_FRACTION)
        return step if rows > step else None

    def set_announcer(self, channel: int, announce: Callable[[int], None]) -> None:
        """Input channel ``channel`` is a TCP channel: ``announce(rows)`` sends its sender
        more credit. Its first credit is announced now."""
        if self._target is None:
            return
        with self._cond:
            self._announcers[channel] = announce
            grant = max(0, self._share - self._outstanding[channel])
            self._outstanding[channel] += grant
        if grant:
            announce(grant)

    def reserve(self, channel: int, rows: int) -> int:
        """An in-slot sender takes credit for up to ``rows`` records of ``channel``: waits
        until there is some; how many it may put (0: the mailbox was closed)."""
        if self._target is None:
            return rows
        with self._cond:
            while not self._closed:
                if self._reads_ahead(channel):
                    return rows
                if self._granted[channel] > 0:  # told it by credit_available: no wait
                    taken = min(rows, self._granted[channel])
                    self._granted[channel] -= taken
                    return taken
                free = self._share - self._outstanding[channel]
                if free > 0:
                    granted = min(rows, free)
                    self._outstanding[channel] += granted
                    return granted
                self._cond.wait()
            return 0

    def credit_available(self, channel: int, timeout: float = 0.0) -> int:
        """Credit an in-slot sender has on ``channel`` now (after waiting up to ``timeout``
        seconds for some). It is granted to the sender, as over TCP: if the credit shrinks
        (the throughput fell) before the sender uses it, :meth:`reserve` does not hold it in
        the middle of the batch it read to this credit."""
        if self._target is None:
            return self._max_credit
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed or self._reads_ahead(channel):
                    return self._share
                # as over TCP (_free_credit), at least 1 / GRANT_FRACTION of the credit at a
                # time: a source reads no batch of a few records (a vectorized consumer
                # pays milliseconds per batch, whatever its size)
                step = max(1, self._share // GRANT_FRACTION)
                free = self._share - self._outstanding[channel]
                if free > 0 and self._granted[channel] + free >= step:
                    self._outstanding[channel] += free
                    self._granted[channel] += free
                left = deadline - time.monotonic()
                if self._granted[channel] >= step or left <= 0:
                    return self._granted[channel] if self._granted[channel] >= step else 0
                self._cond.wait(left)

    def snapshot(self, uploading: bool | None = None) -> None:
        """The task takes a checkpoint's snapshot (``None``), or began (``True``) or ended
        uploading one: measurements that see it may raise the credit, not lower it
        (:attr:`.debloat.ThroughputMeter.disturbed`)."""
        with self._cond:
            self.meter.snapshot(uploading)

    def start_batched(self, rows: int) -> None:
        """The consumer takes Arrow batches: until its first measurement window ends, each
        channel has at least ``rows`` records of credit (:data:`.debloat.INITIAL_BATCH_CREDIT`).
        That credit is not earned: the first window may lower it, even if it was starved,
        down to the credit it had before (:meth:`consumed`)."""
        if self._target is None:
            return
        with self._cond:
            share = min(self._max_credit, rows)
            if self.meter.windows or share <= self._share:
                return
            self._unearned = self._share
            grants = self._grow(share)
        self._announce(grants)

    def _slow_start(self) -> list[tuple[int, int]] | None:
        """The task waits for input before its throughput was measured: its credit grows
        (:func:`.debloat.slow_start_credit`), once per records processed since it last
        grew. The credit announced to TCP senders (``None``: it did not grow)."""
        if self._target is None or self.meter.rows_counted <= self._slow_started:
            return None
        self._slow_started = self.meter.rows_counted
        rate = self.meter.early_rate(time.monotonic())
        if rate is None:
            return None
        share = slow_start_credit(self._share, rate, self._target, self._channels,
                                  self._max_credit)
        if share <= self._share:
            return None
        return self._grow(share)

    def _grow(self, share: int) -> list[tuple[int, int]]:
        """The credit per channel is ``share`` now (more than it was): in-slot senders held
        for credit go on; the credit TCP senders get (announced by the caller, outside the
        lock)."""
        self._share = share
        self._cond.notify_all()
        return self._free_credit()

    def _free_credit(self) -> list[tuple[int, int]]:
        """Credit TCP senders get now (at least ``1 / GRANT_FRACTION`` of the credit free),
        counted as granted; the caller announces it outside the lock."""
        grants = []
        threshold = max(1, self._share // GRANT_FRACTION)
        for ch in self._announcers:
            free = self._share - self._outstanding[ch]
            if free >= threshold:
                self._outstanding[ch] += free
                grants.append((ch, free))
        return grants

    def consumed(self, channel: int, rows: int) -> None:
        """The task processed ``rows`` records of input channel ``channel``: their credit
        goes back to the channel's sender, and the throughput (the credit's base) counts
        them. ``channel`` -1: records not from a channel (restored channel state)."""
        if self._target is None or rows <= 0:
            return
        with self._cond:
            if self.queued_rows >= max(MIN_CHANNEL_CREDIT, self._share // GRANT_FRACTION):
                self._backlogged = True  # records waited for it in this measurement
            measured = self.meter.add(rows, time.monotonic())
            if self._unearned is not None and self.meter.windows:
                # the first window ended: a batched start's credit was not earned
                rate = self.meter.credit_rate
                earned = (0 if rate is None else
                          channel_credit(rate, self._target, self._channels,
                                         self._initial_credit, self._max_credit))
                self._share = max(earned, self._unearned)
                self._unearned = None
                self._backlogged = False
            elif measured:
                share = channel_credit(self.meter.credit_rate, self._target, self._channels,
                                       self._initial_credit, self._max_credit)
                # The credit shrinks only on the rate of a consumer that was the bottleneck:
                # busy, with records waiting for it. A starved one's rate is a lower bound;
                # one busy with no records waiting (a window firing, a snapshot) was slow
                # at something its queue did not wait for (issue 51, debloat.py).
                shrinks = (self._backlogged and not self.meter.starved
                           and not self.meter.disturbed)
                self._share = share if shrinks else max(share, self._share)
                self._backlogged = False
            if 0 <= channel < self._channels:
                self._outstanding[channel] = max(0, self._outstanding[channel] - rows)
            grants = self._free_credit()
            self._cond.notify_all()
        self._announce(grants)

    # -- unaligned checkpoints --------------------------------------------------------------
    def begin_unaligned(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is unaligned: its barriers overtake, channels read
        ahead to them."""
        with self._cond:
            self._begin(checkpoint_id)
            self._cond.notify_all()
            grants, self._pending_grants = self._pending_grants, []
        self._announce(grants)

    def _begin(self, checkpoint_id: int) -> None:
        # a late barrier of an aborted checkpoint must not start reading ahead: some inputs
        # may never deliver its barrier
        if checkpoint_id <= self._unaligned or checkpoint_id <= self._aborted:
            return
        self._unaligned = checkpoint_id
        if self._target is not None:  # senders held for credit may go on to their barrier
            for channel in self._announcers:
                if self._reads_ahead(channel):
                    self._outstanding[channel] += self._share
                    self._pending_grants.append((channel, self._share))
        queued = [e for e in self._data
                  if e[1][0] == ItemKind.BARRIER and e[1][2].checkpoint_id == checkpoint_id]
        for entry in queued:  # already queued behind records: they overtake now
            self._data.remove(entry)
            self._control.append((ItemKind.UNALIGNED_BARRIER, entry[1][1], entry[1][2]))

    def end_unaligned(self, checkpoint_id: int) -> None:
        """The checkpoint was aborted: no more read-ahead or capture for it."""
        with self._cond:
            self._aborted = max(self._aborted, checkpoint_id)
            if self._unaligned == checkpoint_id:
                self._unaligned = 0
            if self._capture_id == checkpoint_id:
                self._capture_id, self._capture = 0, []
            self._cond.notify_all()

    def _room_for_rows(self) -> bool:
        """With credit, small items may queue beyond ``capacity``: the credit bounds the
        records, and a slow consumer's items are small (parts of its senders' credit).
        Holding them would hold an in-slot sender in the middle of a batch, which takes no
        checkpoint trigger then. Memory stays bounded by ``max_credit`` records."""
        return self._target is not None and self.queued_rows < self._max_credit

    def _reads_ahead(self, channel: int) -> bool:
        return bool(self._unaligned) and self._last_barrier.get(channel, 0) < self._unaligned

    def start_capture(self, checkpoint_id: int) -> None:
        """The task snapshotted checkpoint ``checkpoint_id``: capture the queued records that
        precede its barrier on their channel, and those still to come."""
        with self._cond:
            self._capture_id = checkpoint_id
            self._capture = [_captured(item) for tag, item in self._data
                             if item[0] == ItemKind.RECORDS and tag < checkpoint_id]

    def finish_capture(self, checkpoint_id: int) -> list | None:
        """Every channel delivered barrier ``checkpoint_id``: the captured items, in the
        order they were put: ``(channel, "arrow", RecordBatch, rows)`` or ``(channel, "rows",
        msgpack bytes, rows)``; ``None`` if the capture was ended (the checkpoint was
        aborted)."""
        with self._cond:
            if self._capture_id != checkpoint_id:
                return None
            captured, self._capture_id, self._capture = self._capture, 0, []
            if self._unaligned == checkpoint_id:
                self._unaligned = 0
            self._cond.notify_all()
            return captured


def _captured(item: tuple) -> tuple:
    """A record item as channel state ``(channel, kind, payload, rows)``. Arrow batches are
    immutable; lists of dicts are encoded now (as on a channel: the typed encoding), before
    the task (and user code) can change them."""
    records = item[2]
    if isinstance(records, list):
        return (item[1], "rows", pack_records(records), len(records))
    return (item[1], "arrow", records, records.num_rows)
