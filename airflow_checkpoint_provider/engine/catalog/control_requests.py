"""Control requests in the catalog: submitted by Airflow and the CLI, claimed and finished
by the job master."""

from __future__ import annotations

import logging
import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from .base import CatalogDB, job_row
from .db import (
    _choice,
    _chunks,
)
from .jobs import Jobs
from .models import (
    CONTROL_REQUESTS,
    TERMINAL_CONTROL_REQUEST_STATUSES,
    TERMINAL_JOB_STATUSES,
    ControlAction,
    ControlRequestRow,
    ControlRequestStatus,
    JobStatus,
    utcnow,
)
from .records import ControlRequestRecord

log = logging.getLogger(__name__)


class ControlRequests:
    """The metadata DB's control requests (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB, jobs: Jobs) -> None:
        self.db = db
        self.jobs = jobs

    # -- control requests -------------------------------------------------------------------

    def submit_control_request(self, job_id: str, action: str,
                               params: dict | None = None, *,
                               idempotency_key: str | None = None) -> str:
        """Ask job ``job_id`` to do ``action`` (a :class:`~.models.ControlAction`); returns the
        request id to poll with :meth:`get_control_request`.

        ``idempotency_key``: a client that may submit the same logical request twice (an
        Airflow task's retry, a re-run) passes the same key each time; when a request with
        that key exists, its id is returned and nothing is inserted, whatever the job's
        status now (a STOP that already stopped the job is found, not refused).

        Raises ``ValueError`` for an unknown action, a job that already ended, or a key
        already used for another job or action, and ``LookupError`` for an unknown job.
        """
        action = _choice(ControlAction, action, "control action")
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"control request params must be a dict, not {type(params).__name__}")
        if idempotency_key is not None and not 0 < len(idempotency_key) <= 255:
            raise ValueError("control request idempotency_key must be 1 to 255 characters")
        request_id = uuid.uuid4().hex

        def fn(session: Session) -> tuple[str, str, bool]:
            if idempotency_key is not None:
                known = session.scalars(select(ControlRequestRow).where(
                    ControlRequestRow.idempotency_key == idempotency_key)).first()
                if known is not None:
                    if known.job_id != job_id or known.action != action:
                        raise ValueError(
                            f"idempotency key {idempotency_key!r} already names request "
                            f"{known.request_id} ({known.action} of job {known.job_id})")
                    return known.request_id, job_row(session, job_id).job_name, False
            job = job_row(session, job_id)
            self.jobs.mark_lost_in(session, job.job_name)  # a request to a dead driver fails at once
            if job.status in TERMINAL_JOB_STATUSES:
                reason = f" ({job.failure_reason})" if job.status == JobStatus.LOST else ""
                raise ValueError(f"job {job.job_name} ({job_id}) is {job.status}{reason}: it "
                                 f"takes no more control requests")
            now = utcnow()
            session.add(ControlRequestRow(
                request_id=request_id, job_id=job_id, action=action, params=dict(params or {}),
                status=ControlRequestStatus.PENDING.value, result=None, error=None,
                created_at=now, updated_at=now, idempotency_key=idempotency_key))
            return request_id, job.job_name, True

        found_id, name, created = self.db.write(fn, "submit_control_request")
        if created:
            log.info("Submitted control request %s: %s for job %s (%s)", found_id, action, name,
                     job_id)
        else:
            log.info("Control request %s (%s for job %s) already exists for idempotency key %s",
                     found_id, action, name, idempotency_key)
        return found_id

    def find_control_request(self, idempotency_key: str) -> ControlRequestRecord | None:
        """The request submitted with ``idempotency_key``, if any."""

        def fn(session: Session) -> ControlRequestRecord | None:
            row = session.scalars(select(ControlRequestRow).where(
                ControlRequestRow.idempotency_key == idempotency_key)).first()
            return None if row is None else ControlRequestRecord.from_row(row)

        return self.db.read(fn, "find_control_request")

    def claim_control_requests(self, job_id: str) -> list[ControlRequestRecord]:
        """Move the job's PENDING requests to IN_PROGRESS and return them, oldest first.

        Each request is claimed by exactly one caller, even with concurrent claimers: every
        row is claimed with a conditional ``UPDATE ... WHERE status = 'PENDING'`` and only
        rows whose update count is 1 are kept.
        """
        requests = CONTROL_REQUESTS.c
        pending_query = (
            select(requests.request_id)
            .where(requests.job_id == job_id,
                   requests.status == ControlRequestStatus.PENDING.value)
            .order_by(requests.created_at, requests.request_id)
        )
        # Cheap read first (a plain connection): most polls find nothing and need no write lock.
        if self.db.read_conn(lambda conn: conn.scalar(pending_query.limit(1)), "poll") is None:
            return []

        def fn(session: Session) -> list[ControlRequestRecord]:
            now = utcnow()
            claimed: list[str] = []
            for request_id in session.scalars(pending_query).all():
                result = session.execute(
                    update(ControlRequestRow)
                    .where(ControlRequestRow.request_id == request_id,
                           ControlRequestRow.status == ControlRequestStatus.PENDING.value)
                    .values(status=ControlRequestStatus.IN_PROGRESS.value, updated_at=now)
                    .execution_options(synchronize_session=False)
                )
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    claimed.append(request_id)
            rows: dict[str, ControlRequestRecord] = {}
            for chunk in _chunks(claimed):
                for row in session.scalars(
                    select(ControlRequestRow).where(ControlRequestRow.request_id.in_(chunk))
                ):
                    rows[row.request_id] = ControlRequestRecord.from_row(row)
            return [rows[r] for r in claimed]

        records = self.db.write(fn, "claim_control_requests")
        for rec in records:
            log.info("Claimed control request %s: %s for job %s", rec.request_id, rec.action,
                     job_id)
        return records

    def finish_control_request(self, request_id: str, *, status: str,
                               result: dict | None = None, error: str | None = None) -> None:
        """End a request: SUCCEEDED with its ``result``, or FAILED with its ``error``.

        A request that already ended is left unchanged (a warning is logged).
        """
        status = _choice(ControlRequestStatus, status, "control request status")
        if status not in TERMINAL_CONTROL_REQUEST_STATUSES:
            raise ValueError(f"a control request finishes as SUCCEEDED or FAILED, not {status}")

        def fn(session: Session) -> bool:
            updated = session.execute(
                update(ControlRequestRow)
                .where(ControlRequestRow.request_id == request_id,
                       ControlRequestRow.status.not_in(list(TERMINAL_CONTROL_REQUEST_STATUSES)))
                .values(status=status, result=result, error=error, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if updated.rowcount == 1:  # type: ignore[attr-defined]
                return True
            if session.get(ControlRequestRow, request_id) is None:
                raise LookupError(f"no control request with id {request_id!r}")
            return False

        if self.db.write(fn, "finish_control_request"):
            log.info("Control request %s %s%s", request_id, status,
                     f": {error}" if error else "")
        else:
            log.warning("Control request %s had already ended; not setting it %s", request_id,
                        status)

    def abort_control_requests(self, job_id: str, error: str) -> int:
        """Fail every PENDING or IN_PROGRESS request of the job (call when the job ends, so
        nobody waits for an answer that will never come). Returns how many were failed."""

        def fn(session: Session) -> int:
            result = session.execute(
                update(ControlRequestRow)
                .where(ControlRequestRow.job_id == job_id,
                       ControlRequestRow.status.not_in(list(TERMINAL_CONTROL_REQUEST_STATUSES)))
                .values(status=ControlRequestStatus.FAILED.value, error=error,
                        updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

        count = self.db.write(fn, "abort_control_requests")
        if count:
            log.info("Failed %d open control requests of job %s: %s", count, job_id, error)
        return count

    def get_control_request(self, request_id: str) -> ControlRequestRecord | None:
        def fn(session: Session) -> ControlRequestRecord | None:
            row = session.get(ControlRequestRow, request_id)
            return None if row is None else ControlRequestRecord.from_row(row)

        return self.db.read(fn, "get_control_request")

    def list_control_requests(self, job_id: str) -> list[ControlRequestRecord]:
        """The job's control requests, oldest first."""

        def fn(session: Session) -> list[ControlRequestRecord]:
            rows = session.scalars(
                select(ControlRequestRow).where(ControlRequestRow.job_id == job_id)
                .order_by(ControlRequestRow.created_at, ControlRequestRow.request_id)
            )
            return [ControlRequestRecord.from_row(r) for r in rows]

        return self.db.read(fn, "list_control_requests")
