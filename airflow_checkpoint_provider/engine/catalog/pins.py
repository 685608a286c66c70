"""Savepoint pins in the catalog: savepoints that retention and dispose must keep.

A pin is a row of ``savepoint_pins`` (see :class:`~.models.SavepointPinRow`): a holder (a
DAG run doing an upgrade, a user) declares that it still needs a savepoint, optionally
until an expiry. The rules that read pins live in :mod:`..savepoints`; locations are
stored as given (callers pass the canonical spelling, see
:func:`..fs.storage.canonical_location`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Connection, delete, func, or_, select
from sqlalchemy.orm import Session

from .base import CatalogDB
from .db import _chunks
from .models import (
    SAVEPOINT_PINS,
    TERMINAL_JOB_STATUSES,
    CheckpointKind,
    CheckpointRow,
    CheckpointStatus,
    JobRow,
    SavepointPinRow,
    utcnow,
)
from .records import CheckpointRecord, SavepointPinRecord

log = logging.getLogger(__name__)


class SavepointPins:
    """The metadata DB's savepoint pins (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB) -> None:
        self.db = db

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

        record = self.db.write(fn, "pin_savepoint")
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

        removed = self.db.write(fn, "unpin_savepoints")
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
                stmt = stmt.where(_active(active_at))
            return [SavepointPinRecord.from_row(r) for r in session.scalars(stmt)]

        return self.db.read(fn, "list_savepoint_pins")

    def pinned_locations(self, locations: Iterable[str], *, active_at: datetime) -> set[str]:
        """Which of ``locations`` have a pin not expired at ``active_at``. Reads only the pins
        of those locations (the ``(location, holder)`` index), however many pins exist."""
        wanted = sorted(set(locations))
        if not wanted:
            return set()

        pins = SAVEPOINT_PINS.c  # read once per checkpoint: on a plain connection

        def fn(conn: Connection) -> set[str]:
            found: set[str] = set()
            for chunk in _chunks(wanted):
                found.update(conn.scalars(
                    select(pins.location).distinct()
                    .where(pins.location.in_(chunk), _active(active_at))))
            return found

        return self.db.read_conn(fn, "pinned_locations")

    # -- checkpoints held by a pin (engine/checkpoint/held.py) ----------------------------------

    def unreleased_checkpoints(self, job_name: str, *,
                               exclude_job_id: str) -> list[CheckpointRecord]:
        """SUBSUMED checkpoints whose files were not deleted (``files_deleted``), of the ended
        jobs named ``job_name`` other than ``exclude_job_id``, by job and checkpoint id: what
        a pin held when the job ended, or what its driver died before deleting."""

        def fn(session: Session) -> list[CheckpointRecord]:
            rows = session.scalars(
                select(CheckpointRow)
                .join(JobRow, JobRow.job_id == CheckpointRow.job_id)
                .where(JobRow.job_name == job_name, JobRow.job_id != exclude_job_id,
                       JobRow.status.in_(sorted(TERMINAL_JOB_STATUSES)),
                       CheckpointRow.kind == CheckpointKind.CHECKPOINT.value,
                       CheckpointRow.status == CheckpointStatus.SUBSUMED.value,
                       CheckpointRow.files_deleted.is_(False))
                .order_by(CheckpointRow.job_id, CheckpointRow.checkpoint_id))
            return [CheckpointRecord.from_row(r) for r in rows]

        return self.db.read(fn, "unreleased_checkpoints")

    def oldest_retained_checkpoint_id(self, job_id: str) -> int:
        """The oldest checkpoint of ``job_id`` whose files stay (COMPLETED or CORRUPT): a
        shared file last used before it is referenced by none of them. With none, one past
        the job's highest checkpoint id (0 for a job without checkpoints)."""

        def fn(session: Session) -> int:
            oldest = session.scalar(
                select(func.min(CheckpointRow.checkpoint_id))
                .where(CheckpointRow.job_id == job_id,
                       CheckpointRow.kind == CheckpointKind.CHECKPOINT.value,
                       CheckpointRow.status.in_([CheckpointStatus.COMPLETED.value,
                                                 CheckpointStatus.CORRUPT.value])))
            if oldest is not None:
                return int(oldest)
            newest = session.scalar(select(func.max(CheckpointRow.checkpoint_id))
                                    .where(CheckpointRow.job_id == job_id))
            return 0 if newest is None else int(newest) + 1

        return self.db.read(fn, "oldest_retained_checkpoint_id")


def _active(at: datetime):
    """Pins not expired at ``at``."""
    expires_at = SAVEPOINT_PINS.c.expires_at  # a column: for ORM and plain-connection reads
    return or_(expires_at.is_(None), expires_at > at)
