"""Metadata-DB access that survives a short DB outage.

The job master must keep running (and its tasks processing) while the metadata DB is
briefly unreachable: only the checkpoints in flight fail. :class:`MetadataWriter` wraps
the :class:`~.store.MetadataStore` calls of the job master, the coordinator and the control
plane:

* :meth:`write` for bookkeeping that may be late (status changes, failure reasons,
  heartbeats...): if the DB is down the write is queued and replayed, in order, once it is
  back; it returns False meanwhile.
* :meth:`must` for writes the caller has to act on (a checkpoint is COMPLETED only once its
  row says so): it raises :class:`MetadataUnavailable` when the DB (or the backlog before
  it) cannot be written now.
* :meth:`read` returns ``default`` when the DB cannot be read.
"""

from __future__ import annotations

import collections
import logging

from sqlalchemy.exc import SQLAlchemyError

from ..errors import EngineError

log = logging.getLogger(__name__)


class MetadataUnavailable(EngineError):
    """The metadata DB cannot be reached right now."""


class MetadataWriter:
    def __init__(self, store) -> None:
        self.store = store
        self.backlog: collections.deque = collections.deque()
        self._down = False

    def _call(self, method: str, args, kwargs):
        return getattr(self.store, method)(*args, **kwargs)

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
            method, args, kwargs = self.backlog[0]
            try:
                self._call(method, args, kwargs)
            except SQLAlchemyError as exc:
                self._mark(False, method, exc)
                return False
            except (LookupError, ValueError) as exc:  # e.g. a row that was never written
                log.debug("dropping queued %s: %s", method, exc)
            self.backlog.popleft()
        self._mark(True, "flush")
        return True

    def write(self, method: str, *args, **kwargs) -> bool:
        if self.store is None:
            return True
        self.backlog.append((method, args, kwargs))
        return self.flush()

    def must(self, method: str, *args, **kwargs):
        if self.store is None:
            return None
        if not self.flush():
            raise MetadataUnavailable(f"metadata DB unavailable ({len(self.backlog)} writes queued)")
        try:
            result = self._call(method, args, kwargs)
        except SQLAlchemyError as exc:
            self._mark(False, method, exc)
            raise MetadataUnavailable(f"metadata DB unavailable: {type(exc).__name__}") from exc
        self._mark(True, method)
        return result

    def read(self, method: str, *args, default=None, **kwargs):
        if self.store is None:
            return default
        try:
            result = self._call(method, args, kwargs)
        except SQLAlchemyError as exc:
            self._mark(False, method, exc)
            return default
        return result
