"""Savepoint pins in the catalog: savepoints that retention and dispose must keep.

A pin is a row of ``savepoint_pins`` (see :class:`~.models.SavepointPinRow`): a holder (a
DAG run doing an upgrade, a user) declares that it still needs a savepoint, optionally
until an expiry. The rules that read pins live in :mod:`..savepoints`; locations are
stored as given (callers pass the canonical spelling, see
:func:`..fs.storage.canonical_location`).
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from .base import StoreBase
from .models import SavepointPinRow, utcnow
from .records import SavepointPinRecord

log = logging.getLogger(__name__)


class SavepointPinsMixin(StoreBase):
    def pin_savepoint(self, location: str, *, holder: str, expires_at: datetime | None = None,
                      reason: str | None = None) -> SavepointPinRecord:
        """Pin ``location`` for ``holder`` until ``expires_at`` (``None``: until unpinned).
        Pinning again with the same holder renews the pin (new expiry and reason)."""
        if not holder:
            raise ValueError("a savepoint pin needs a holder (who needs the savepoint)")

        def fn(session: Session) -> SavepointPinRecord:
            row = session.scalars(select(SavepointPinRow).where(
                SavepointPinRow.location == location, SavepointPinRow.holder == holder)).first()
            if row is None:
                row = SavepointPinRow(location=location, holder=holder, created_at=utcnow())
                session.add(row)
            row.expires_at = expires_at
            row.reason = reason
            session.flush()
            return SavepointPinRecord.from_row(row)

        record = self._write(fn, "pin_savepoint")
        log.info("Pinned savepoint %s for %s%s", location, holder,
                 f" until {expires_at:%Y-%m-%d %H:%M:%S %Z}" if expires_at else "")
        return record

    def unpin_savepoints(self, *, holder: str, location: str | None = None) -> int:
        """Remove ``holder``'s pins (of ``location`` only, if given); returns how many."""

        def fn(session: Session) -> int:
            stmt = delete(SavepointPinRow).where(SavepointPinRow.holder == holder)
            if location is not None:
                stmt = stmt.where(SavepointPinRow.location == location)
            return int(session.execute(stmt).rowcount or 0)  # type: ignore[attr-defined]

        removed = self._write(fn, "unpin_savepoints")
        log.info("Released %d savepoint pin(s) of %s%s", removed, holder,
                 f" on {location}" if location else "")
        return removed

    def list_savepoint_pins(self, *, location: str | None = None,
                            active_at: datetime | None = None) -> list[SavepointPinRecord]:
        """Pins (of ``location``, if given), oldest first; with ``active_at``, only those not
        expired at that time."""

        def fn(session: Session) -> list[SavepointPinRecord]:
            stmt = select(SavepointPinRow).order_by(SavepointPinRow.created_at, SavepointPinRow.id)
            if location is not None:
                stmt = stmt.where(SavepointPinRow.location == location)
            if active_at is not None:
                stmt = stmt.where(or_(SavepointPinRow.expires_at.is_(None),
                                      SavepointPinRow.expires_at > active_at))
            return [SavepointPinRecord.from_row(r) for r in session.scalars(stmt)]

        return self._read(fn, "list_savepoint_pins")
