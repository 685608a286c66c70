"""Standby jobs in the catalog: a started job that waits to restore another job's snapshot.

A standby (``--restore standby:JOB``, :mod:`..runners.jobmaster.standby`) has no ``jobs`` row while it
waits: the job it takes over still owns the name (one live job per name). Its row in
``standbys`` (revision 0012) is what a client sees of it meanwhile, keyed by the job id it
will run under:

* ``READY``: its application is up (the Spark runner acquired its executors) and it only
  waits for job ``waits_for_job_id`` to end -- stop that job now: the standby restores its
  final savepoint (or latest checkpoint) at once. ``ready_at`` says since when.
* ``TAKEN_OVER``: that job ended; the standby restores its snapshot and creates its
  ``jobs`` row (from here on the job's own status says how it goes). ``restore_location``
  is the snapshot.
* ``CANCELED``: withdrawn before the hand-over (``cancel_requested_at`` set by a client,
  :meth:`Standbys.request_standby_cancel`): the standby ends without a job row. Withdrawn
  before it was even up, the row is there first (empty ``job_name``/``waits_for_job_id``)
  and the standby ends as soon as it comes up.
* ``FAILED``: the hand-over failed (``detail``: why, e.g. no snapshot to restore).

Only the standby writes ``status``; a client writes ``cancel_requested_at``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import String, Text, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from ..errors import EngineError
from .base import CatalogDB
from .models import JOB_ID_LENGTH, STATUS_LENGTH, Base, as_utc, utcnow

log = logging.getLogger(__name__)


class StandbyCanceled(EngineError):
    """A client withdrew the standby before the job it waited for ended: nothing was
    restored and no job row was created."""


class StandbyStatus(StrEnum):
    """State of a standby (``standbys.status``); see the module docstring."""

    READY = "READY"
    TAKEN_OVER = "TAKEN_OVER"
    CANCELED = "CANCELED"
    FAILED = "FAILED"


class StandbyRow(Base):
    """``standbys`` (revision 0012): one row per standby job, written by the standby."""

    __tablename__ = "standbys"

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(255))
    #: the job whose end it waits for (its snapshot is what it restores)
    waits_for_job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), index=True)
    status: Mapped[str] = mapped_column(String(STATUS_LENGTH))
    ready_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    cancel_requested_at: Mapped[datetime | None]
    restore_location: Mapped[str | None] = mapped_column(String(1024))
    detail: Mapped[str | None] = mapped_column(Text)


@dataclass(frozen=True)
class StandbyRecord:
    """A standby as the catalog knows it (see :class:`StandbyStatus`)."""

    job_id: str
    job_name: str
    waits_for_job_id: str
    status: str
    ready_at: datetime
    ended_at: datetime | None
    cancel_requested_at: datetime | None
    restore_location: str | None
    detail: str | None

    @classmethod
    def from_row(cls, row: StandbyRow) -> StandbyRecord:
        def aware(value: datetime | None) -> datetime | None:
            return None if value is None else as_utc(value)

        return cls(job_id=row.job_id, job_name=row.job_name,
                   waits_for_job_id=row.waits_for_job_id, status=row.status,
                   ready_at=as_utc(row.ready_at), ended_at=aware(row.ended_at),
                   cancel_requested_at=aware(row.cancel_requested_at),
                   restore_location=row.restore_location, detail=row.detail)

    @property
    def is_ready(self) -> bool:
        """Up and waiting for the hand-over (stop the job it waits for now)."""
        return self.status == StandbyStatus.READY

    @property
    def is_terminal(self) -> bool:
        """It will not take over (``CANCELED``/``FAILED``)."""
        return self.status in (StandbyStatus.CANCELED, StandbyStatus.FAILED)


class Standbys:
    """The metadata DB's standbys (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB) -> None:
        self.db = db

    def mark_standby_ready(self, *, job_id: str, job_name: str,
                           waits_for_job_id: str) -> StandbyRecord:
        """Record (or record again: a standby restarted under the same id) that standby
        ``job_id`` is up and waits for job ``waits_for_job_id`` to end. A cancellation
        requested before keeps its ``cancel_requested_at``."""

        def write(session: Session) -> StandbyRecord:
            row = session.get(StandbyRow, job_id)
            now = utcnow()
            if row is None:
                row = StandbyRow(job_id=job_id, job_name=job_name,
                                 waits_for_job_id=waits_for_job_id, ready_at=now,
                                 status=StandbyStatus.READY.value)
                session.add(row)
            else:
                row.job_name, row.waits_for_job_id = job_name, waits_for_job_id
                row.status, row.ready_at = StandbyStatus.READY.value, now
                row.ended_at = row.restore_location = row.detail = None
            session.flush()
            return StandbyRecord.from_row(row)

        return self.db.write(write, "mark_standby_ready")

    def end_standby(self, job_id: str, status: StandbyStatus | str, *,
                    restore_location: str | None = None, detail: str | None = None) -> None:
        """The standby's wait ended: ``TAKEN_OVER`` (restoring ``restore_location``),
        ``CANCELED`` or ``FAILED`` (``detail`` says why)."""
        status = StandbyStatus(status)
        if status == StandbyStatus.READY:
            raise ValueError("end_standby: READY is not an end; use mark_standby_ready")

        def write(session: Session) -> None:
            session.execute(update(StandbyRow).where(StandbyRow.job_id == job_id).values(
                status=status.value, ended_at=utcnow(), restore_location=restore_location,
                detail=detail))

        self.db.write(write, "end_standby")

    def request_standby_cancel(self, job_id: str, *,
                               before_ready: bool = False) -> StandbyRecord | None:
        """Ask standby ``job_id`` to give up its wait (it ends ``CANCELED`` within its poll
        interval unless it took over already). Idempotent; ``None``: no such standby.

        :param before_ready: also for a standby that is not up yet (no row: e.g. its start
            timed out): a ``CANCELED`` row with the request is left under ``job_id``, and
            that standby ends as soon as it comes up instead of waiting."""

        def write(session: Session) -> StandbyRecord | None:
            row = session.get(StandbyRow, job_id)
            if row is None and before_ready:
                now = utcnow()
                row = StandbyRow(job_id=job_id, job_name="", waits_for_job_id="",
                                 status=StandbyStatus.CANCELED.value, ready_at=now,
                                 ended_at=now, cancel_requested_at=now,
                                 detail="withdrawn before it was up")
                session.add(row)
            if row is None:
                return None
            if row.cancel_requested_at is None:
                row.cancel_requested_at = utcnow()
            session.flush()
            return StandbyRecord.from_row(row)

        return self.db.write(write, "request_standby_cancel")

    def get_standby(self, job_id: str) -> StandbyRecord | None:
        """Standby ``job_id``, or ``None`` (not a standby, or not up yet)."""

        def read(session: Session) -> StandbyRecord | None:
            row = session.get(StandbyRow, job_id)
            return None if row is None else StandbyRecord.from_row(row)

        return self.db.read(read, "get_standby")
