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
"""

from __future__ import annotations

import collections
import threading

from ..serialization import pack_records


class Mailbox:
    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
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
    def put_data(self, item: tuple) -> bool:
        """Block while full (unless the item's channel reads ahead to an unaligned barrier);
        False if the mailbox was closed."""
        kind, channel = item[0], item[1]
        with self._cond:
            while (len(self._data) >= self._capacity and not self._closed
                   and not self._reads_ahead(channel)):
                self._cond.wait()
            if self._closed:
                return False
            tag = self._last_barrier.get(channel, 0)
            if kind == "barrier" or kind == "cancel":
                chk = item[2].checkpoint_id if kind == "barrier" else item[2]
                self._last_barrier[channel] = max(tag, chk)
                if (kind == "barrier" and chk > self._aborted
                        and (item[2].unaligned or chk == self._unaligned)):
                    self._begin(chk)
                    self._control.append(("ubarrier", channel, item[2]))
                    self._cond.notify_all()
                    return True
            elif kind == "records" and self._capture_id and tag < self._capture_id:
                self._capture.append(_captured(item))
            self._data.append((tag, item))
            self._cond.notify_all()
            return True

    def put_control(self, item: object) -> None:
        with self._cond:
            self._control.append(item)
            self._cond.notify_all()

    # -- take -----------------------------------------------------------------------------
    def take(self, timeout: float | None = None, *, control_only: bool = False):
        """Next control item, else next data item; ``None`` on timeout."""
        with self._cond:
            while True:
                if self._control:
                    return self._control.popleft()
                if self._data and not control_only:
                    item = self._data.popleft()[1]
                    self._cond.notify_all()
                    return item
                if self._closed:
                    return None
                if not self._cond.wait(timeout):
                    return None

    def take_following(self, accept, limit: int) -> list:
        """Without waiting: the data items at the head of the queue, in order, while
        ``accept(item)`` holds, at most ``limit`` (a task folds queued batches into one)."""
        taken: list = []
        with self._cond:
            while (self._data and len(taken) < limit and not self._control
                   and accept(self._data[0][1])):
                taken.append(self._data.popleft()[1])
            if taken:
                self._cond.notify_all()
        return taken

    def poll_control(self):
        with self._cond:
            return self._control.popleft() if self._control else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- unaligned checkpoints --------------------------------------------------------------
    def begin_unaligned(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is unaligned: its barriers overtake, channels read
        ahead to them."""
        with self._cond:
            self._begin(checkpoint_id)
            self._cond.notify_all()

    def _begin(self, checkpoint_id: int) -> None:
        # a late barrier of an aborted checkpoint must not start reading ahead: some inputs
        # may never deliver its barrier
        if checkpoint_id <= self._unaligned or checkpoint_id <= self._aborted:
            return
        self._unaligned = checkpoint_id
        queued = [e for e in self._data
                  if e[1][0] == "barrier" and e[1][2].checkpoint_id == checkpoint_id]
        for entry in queued:  # already queued behind records: they overtake now
            self._data.remove(entry)
            self._control.append(("ubarrier", entry[1][1], entry[1][2]))

    def end_unaligned(self, checkpoint_id: int) -> None:
        """The checkpoint was aborted: no more read-ahead or capture for it."""
        with self._cond:
            self._aborted = max(self._aborted, checkpoint_id)
            if self._unaligned == checkpoint_id:
                self._unaligned = 0
            if self._capture_id == checkpoint_id:
                self._capture_id, self._capture = 0, []
            self._cond.notify_all()

    def _reads_ahead(self, channel: int) -> bool:
        return bool(self._unaligned) and self._last_barrier.get(channel, 0) < self._unaligned

    def start_capture(self, checkpoint_id: int) -> None:
        """The task snapshotted checkpoint ``checkpoint_id``: capture the queued records that
        precede its barrier on their channel, and those still to come."""
        with self._cond:
            self._capture_id = checkpoint_id
            self._capture = [_captured(item) for tag, item in self._data
                             if item[0] == "records" and tag < checkpoint_id]

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
