"""Metadata-DB access that survives a short DB outage and never stalls the job master.

The job master must keep running (and its tasks processing) while the metadata DB is
briefly unreachable or locked: only the checkpoints in flight fail. :class:`MetadataWriter`
wraps the :class:`~..catalog.MetadataStore` calls of the job master, the coordinator and the
control plane, and runs them on one worker thread, in the order they were made, so that a
call that blocks (a SQLite lock held by another process past the busy timeout, a
PostgreSQL server that stopped answering) blocks the worker, not the job master's loop:

* :meth:`write` for bookkeeping that may be late (status changes, failure reasons...):
  queued and returns at once; if the DB is down the write is retried, in order, until it is
  back.
* :meth:`must` for writes the caller has to act on (a checkpoint is COMPLETED only once its
  row says so): waits at most :data:`MUST_WAIT_S` for the result, else raises
  :class:`MetadataUnavailable` (at once when the DB is known to be down or the worker is
  stuck in an earlier call). A call that timed out before it started is withdrawn; one that
  was running and succeeds later is compensated where that matters (a PENDING checkpoint
  row the coordinator gave up on is marked FAILED).
* :meth:`read` waits at most :data:`READ_WAIT_S`; then it returns None and leaves the call
  in flight: the next ``read`` of the same method and arguments returns its result once it
  is there (a claimed control request or a heartbeat's verdict is never lost), and no second
  copy is queued meanwhile.

So the loop of the job master blocks on the metadata DB for at most ``MUST_WAIT_S`` at a
time (once per stall: the next calls see the worker stuck and fail at once), and heartbeats
and checkpoints resume as soon as the DB answers again.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from ..errors import EngineError

if TYPE_CHECKING:
    from ..catalog import MetadataStore

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
#: a store method, called unbound: ``writer.write(MetadataStore.set_job_status, job_id, ...)``
StoreCall = Callable[Concatenate["MetadataStore", P], R]

#: longest wait of the job master's loop for a write it must act on
MUST_WAIT_S = 2.0
#: longest wait for a read (the call stays in flight; a later read gets its result)
READ_WAIT_S = 0.5
#: pause before a failed queued write is tried again
RETRY_PAUSE_S = 0.5


class MetadataUnavailable(EngineError):
    """The metadata DB cannot be reached (or does not answer in time) right now."""


@dataclass(eq=False)
class _Call:
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    kind: str  # "write", "must" or "read"
    done: threading.Event = field(default_factory=threading.Event)
    started: float | None = None  # monotonic time the worker started it
    abandoned: bool = False       # a must whose caller gave up while it ran
    result: Any = None
    error: BaseException | None = None

    def same(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
        return self.fn is fn and self.args == args and self.kwargs == kwargs


def _undo_late_pending(store: MetadataStore, call: _Call) -> None:
    """A PENDING checkpoint row recorded after the coordinator gave up on it."""
    job_id, chk = call.args[0], call.args[1]
    type(store).fail_checkpoint(store, job_id, chk, reason=(
        "not recorded in time (the metadata DB did not answer within "
        f"{MUST_WAIT_S:.0f} s); the checkpoint was never triggered"))


#: compensation of a ``must`` that succeeded after its caller gave up, by method name
_UNDO_LATE = {"add_pending_checkpoint": _undo_late_pending}


class MetadataWriter:
    """Calls of :class:`~..catalog.MetadataStore` methods (passed unbound, so a typo or a
    wrong argument is a type error, not a runtime ``getattr`` failure), run in order on a
    worker thread started on first use."""

    def __init__(self, store: MetadataStore | None) -> None:
        self.store = store
        self._queue: collections.deque[_Call] = collections.deque()
        self._reads: dict[Callable[..., Any], _Call] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._down = False

    # -- the caller's side ------------------------------------------------------------------
    @property
    def backlog(self) -> list[tuple[Callable[..., Any], tuple, dict]]:
        """Writes not yet done, oldest first."""
        with self._cond:
            return [(c.fn, c.args, c.kwargs) for c in self._queue if c.kind == "write"]

    def write(self, fn: StoreCall[P, Any], *args: P.args, **kwargs: P.kwargs) -> bool:
        """Queue a write; True when the DB is not known to be down."""
        if self.store is None:
            return True
        self._submit(_Call(fn, args, kwargs, "write"))
        return not self._down

    def flush(self, timeout: float = 0.0) -> bool:
        """True once every queued write is done (waits up to ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(c.kind == "write" for c in self._queue):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def must(self, fn: StoreCall[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        if self.store is None:
            return None
        with self._cond:
            if self._down and self._queue:
                raise MetadataUnavailable(
                    f"metadata DB unavailable ({len(self._queue)} calls queued)")
            stuck = self._stuck()
            if stuck:
                raise MetadataUnavailable(stuck)
        call = self._submit(_Call(fn, args, kwargs, "must"))
        if not call.done.wait(MUST_WAIT_S):
            with self._cond:
                if call.started is None:  # never ran: withdrawn, nothing to undo
                    self._queue.remove(call)
                    self._cond.notify_all()
                elif not call.done.is_set():
                    call.abandoned = True
            if not call.done.is_set() or call.abandoned:
                raise MetadataUnavailable(f"metadata DB did not answer {fn.__name__} within "
                                          f"{MUST_WAIT_S:.0f} s")
        if call.error is not None:
            raise MetadataUnavailable(f"metadata DB unavailable: "
                                      f"{type(call.error).__name__}") from call.error
        return call.result

    def read(self, fn: StoreCall[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """``fn``'s result, or None when the DB cannot be read (now)."""
        if self.store is None:
            return None
        with self._cond:
            call = self._reads.get(fn)
            if call is not None:
                if not call.done.is_set():
                    return None  # still in flight: no second copy
                del self._reads[fn]
                if call.same(fn, args, kwargs):  # a late result, delivered now
                    return None if call.error is not None else call.result
        call = self._submit(_Call(fn, args, kwargs, "read"))
        if not call.done.wait(READ_WAIT_S):
            with self._cond:
                if not call.done.is_set():
                    self._reads[fn] = call
                    return None
        return None if call.error is not None else call.result

    def close(self, timeout: float = 0.0) -> None:
        """Stop the worker once the queue is empty (or after ``timeout``); later calls run
        nothing."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _stuck(self) -> str | None:
        head = self._queue[0] if self._queue else None
        if head is not None and head.started is not None:
            running = time.monotonic() - head.started
            if running > MUST_WAIT_S:
                return (f"metadata DB busy: {head.fn.__name__} has not returned for "
                        f"{running:.0f} s")
        return None

    def _submit(self, call: _Call) -> _Call:
        with self._cond:
            if self._closed:
                call.error = MetadataUnavailable("the job's metadata writer is closed")
                call.done.set()
                return call
            self._queue.append(call)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="metadata-writer",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return call

    # -- the worker -------------------------------------------------------------------------
    def _mark(self, ok: bool, what: str, exc: BaseException | None = None) -> None:
        if not ok and not self._down:
            log.warning("Metadata DB unavailable (%s: %s); continuing, writes are queued",
                        what, type(exc).__name__ if exc else "backlog")
        elif ok and self._down:
            log.info("Metadata DB is reachable again")
        self._down = not ok

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                call = self._queue[0]
                call.started = time.monotonic()
            retry = self._run(call)
            undo = None
            with self._cond:
                if retry:
                    call.started = None
                else:
                    if self._queue and self._queue[0] is call:
                        self._queue.popleft()
                    if call.abandoned and call.error is None:  # decided under the lock
                        undo = _UNDO_LATE.get(call.fn.__name__)
                    call.done.set()
                self._cond.notify_all()
                if retry:
                    self._cond.wait(RETRY_PAUSE_S)
            if undo is not None and self.store is not None:
                try:
                    undo(self.store, call)
                except Exception as exc:  # noqa: BLE001 - best effort
                    log.warning("Could not undo the late %s: %s", call.fn.__name__, exc)

    def _run(self, call: _Call) -> bool:
        """Run one call; True when it is a write to try again (the DB is down)."""
        assert self.store is not None
        try:
            call.result = call.fn(self.store, *call.args, **call.kwargs)
        except SQLAlchemyError as exc:
            self._mark(False, call.fn.__name__, exc)
            if call.kind == "write" and not self._closed:
                return True
            call.error = exc
            return False
        except (LookupError, ValueError) as exc:  # e.g. a row that was never written
            if call.kind == "write":
                log.debug("dropping queued %s: %s", call.fn.__name__, exc)
            call.error = exc
            return False
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the worker
            log.warning("Metadata DB call %s failed: %s", call.fn.__name__, exc)
            call.error = exc
            return False
        self._mark(True, call.fn.__name__)
        return False
