"""Timers of keyed process functions (Flink's ``TimerService``).

Timers are keyed state: each key's registered timestamps are a list state (``_timers.event``
and ``_timers.processing``) in the operator's keyed state backend, so they are in every
checkpoint and savepoint of either backend (incremental on RocksDB) and move with their
key group when the parallelism changes. An in-memory priority queue of ``(timestamp, key)``
says which fires next; it is rebuilt from the state on restore. A deleted timer stays in
the queue and is skipped when it comes up (the state no longer lists it).

Event-time timers fire when the watermark reaches them (``timestamp <= watermark``);
end of input is the largest watermark, so every event-time timer fires then.
Processing-time timers fire when the wall clock reaches them; they do not fire at end of
input (as in Flink).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from ...eventtime import MIN_WATERMARK
from ...state import ttl
from ...state.descriptors import ListStateDescriptor

EVENT_TIME, PROCESSING_TIME = "event", "processing"
TIMER_STATES = {EVENT_TIME: "_timers.event", PROCESSING_TIME: "_timers.processing"}


def _timestamp(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} timer timestamp must be integer epoch milliseconds, got {value!r}")
    return value


class TimerService:
    """What ``ctx.timer_service`` gives a :class:`~.functions.KeyedProcessFunction`: timers
    for the current key, the current watermark and processing time."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self._states: dict = {}  # registered on first use: no timers, no timer state
        self._queues: dict[str, list] = {EVENT_TIME: [], PROCESSING_TIME: []}
        self._seq = itertools.count()
        self.watermark = MIN_WATERMARK

    # -- the user's side ---------------------------------------------------------------------
    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return ttl.now_ms()  # the wall clock (or an unaligned replay's checkpoint time)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._register(EVENT_TIME, _timestamp(timestamp, "event-time"))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._register(PROCESSING_TIME, _timestamp(timestamp, "processing-time"))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._delete(EVENT_TIME, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._delete(PROCESSING_TIME, timestamp)

    # -- the operator's side -----------------------------------------------------------------
    def _state(self, domain: str):
        state = self._states.get(domain)
        if state is None:
            state = self._states[domain] = self._backend.get_state(
                ListStateDescriptor(TIMER_STATES[domain]))
        return state

    def _register(self, domain: str, ts: int) -> None:
        state = self._state(domain)
        registered = state.get()
        if ts in registered:
            return
        registered.append(ts)
        state.update(registered)
        heapq.heappush(self._queues[domain], (ts, next(self._seq), self._backend.current_key))

    def _delete(self, domain: str, ts: int) -> None:
        state = self._state(domain)
        registered = state.get()
        if ts in registered:
            registered.remove(ts)
            state.update(registered)

    def rebuild(self) -> None:
        """Fill the queues from the restored state (call after restore, before records)."""
        backend = self._backend
        for domain, name in TIMER_STATES.items():
            if name not in backend.restored_meta:
                continue
            queue, state = self._queues[domain], self._state(domain)
            for key in list(backend.keys(name)):
                backend.set_current_key(key)
                for ts in state.get():
                    queue.append((ts, next(self._seq), key))
            heapq.heapify(queue)

    def next_processing_time(self) -> int | None:
        queue = self._queues[PROCESSING_TIME]
        return queue[0][0] if queue else None

    def due(self, domain: str, until: int) -> Iterator[int]:
        """Pop every timer of ``domain`` with timestamp ``<= until``, in timestamp order,
        setting the backend's current key to the timer's key and removing the timer from the
        state before yielding its timestamp (so ``on_timer`` may register it again).
        Timers registered while iterating fire too if they are due."""
        queue, backend = self._queues[domain], self._backend
        if not queue:
            return
        state = self._state(domain)
        while queue and queue[0][0] <= until:
            ts, _, key = heapq.heappop(queue)
            backend.set_current_key(key)
            registered = state.get()
            if ts not in registered:
                continue  # deleted, or a duplicate entry of a timer that fired already
            registered.remove(ts)
            state.update(registered)
            yield ts

    def fire(self, domain: str, until: int, on_timer: Callable[[int], None]) -> None:
        for ts in self.due(domain, until):
            on_timer(ts)
