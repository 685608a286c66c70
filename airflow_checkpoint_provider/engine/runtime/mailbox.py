"""The task mailbox: one place a task thread waits on.

Data items (record batches and in-band events from input channels) are bounded: a full
mailbox blocks the channel reader threads, which stop reading their sockets, which fills
TCP windows and blocks the upstream writers: backpressure without unbounded memory.
Control items (checkpoint triggers, notifications, stop) are never blocked and are taken
first, as in Flink's mailbox model.
"""

from __future__ import annotations

import collections
import threading


class Mailbox:
    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._data: collections.deque = collections.deque()
        self._control: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False

    def put_data(self, item: object) -> bool:
        """Block while full; False if the mailbox was closed."""
        with self._cond:
            while len(self._data) >= self._capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._data.append(item)
            self._cond.notify_all()
            return True

    def put_control(self, item: object) -> None:
        with self._cond:
            self._control.append(item)
            self._cond.notify_all()

    def take(self, timeout: float | None = None, *, control_only: bool = False):
        """Next control item, else next data item; ``None`` on timeout."""
        with self._cond:
            while True:
                if self._control:
                    return self._control.popleft()
                if self._data and not control_only:
                    item = self._data.popleft()
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
            while self._data and len(taken) < limit and not self._control and accept(self._data[0]):
                taken.append(self._data.popleft())
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
