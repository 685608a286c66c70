"""Metadata-DB access that survives a short DB outage.

The job master must keep running (and its tasks processing) while the metadata DB is
briefly unreachable: only the checkpoints in flight fail. :class:`MetadataWriter` wraps
the :class:`~..catalog.MetadataStore` calls of the job master, the coordinator and the control
plane:

* :meth:`write` for bookkeeping that may be late (status changes, failure reasons,
  heartbeats...): if the DB is down the write is queued and replayed, in order, once it is
  back; it returns False meanwhile.
* :meth:`must` for writes the caller has to act on (a checkpoint is COMPLETED only once its
  row says so): it raises :class:`MetadataUnavailable` when the DB (or the backlog before
  it) cannot be written now.
* :meth:`read` returns None when the DB cannot be read.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
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


class MetadataUnavailable(EngineError):
    """The metadata DB cannot be reached right now."""


class MetadataWriter:
    """Calls of :class:`~..catalog.MetadataStore` methods (passed unbound, so a typo or a
    wrong argument is a type error, not a runtime ``getattr`` failure)."""

    def __init__(self, store: MetadataStore | None) -> None:
        self.store = store
        self.backlog: collections.deque[tuple[Callable[..., Any], tuple, dict]] = \
            collections.deque()
        self._down = False

    def _mark(self, ok: bool, what: str, exc: Exception | None = None) -> None:
        if not ok and not self._down:
            log.warning("Metadata DB unavailable (%s: %s); continuing, writes are queued",
                        what, type(exc).__name__ if exc else "backlog")
        elif ok and self._down:
            log.info("Metadata DB is reachable again")
        self._down = not ok

    def flush(self) -> bool:
        """Replay queued writes in order; True once the backlog is empty."""
        while self.backlog:
            fn, args, kwargs = self.backlog[0]
            try:
                fn(self.store, *args, **kwargs)
            except SQLAlchemyError as exc:
                self._mark(False, fn.__name__, exc)
                return False
            except (LookupError, ValueError) as exc:  # e.g. a row that was never written
                log.debug("dropping queued %s: %s", fn.__name__, exc)
            self.backlog.popleft()
        self._mark(True, "flush")
        return True

    def write(self, fn: StoreCall[P, Any], *args: P.args, **kwargs: P.kwargs) -> bool:
        if self.store is None:
            return True
        self.backlog.append((fn, args, kwargs))
        return self.flush()

    def must(self, fn: StoreCall[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        if self.store is None:
            return None
        if not self.flush():
            raise MetadataUnavailable(f"metadata DB unavailable ({len(self.backlog)} writes queued)")
        try:
            result = fn(self.store, *args, **kwargs)
        except SQLAlchemyError as exc:
            self._mark(False, fn.__name__, exc)
            raise MetadataUnavailable(f"metadata DB unavailable: {type(exc).__name__}") from exc
        self._mark(True, fn.__name__)
        return result

    def read(self, fn: StoreCall[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """``fn``'s result, or None when the DB cannot be read."""
        if self.store is None:
            return None
        try:
            return fn(self.store, *args, **kwargs)
        except SQLAlchemyError as exc:
            self._mark(False, fn.__name__, exc)
            return None
