"""Jobs and attempts in the catalog: create, status, heartbeats and liveness, lookups."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import Connection, and_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import JobIdInUseError, JobLostError, JobNameInUseError
from ..settings import DEFAULT_HEARTBEAT_TIMEOUT_S as DEFAULT_HEARTBEAT_TIMEOUT_S
from ..settings import HEARTBEAT_TIMEOUT
from .base import CatalogDB, job_row
from .db import MIN_JOB_ID_PREFIX, _choice
from .driver import driver_is_gone, this_process
from .models import (
    JOBS,
    LIVE_JOB_STATUSES,
    TERMINAL_CONTROL_REQUEST_STATUSES,
    ControlRequestRow,
    ControlRequestStatus,
    JobAttemptRow,
    JobOwnerRow,
    JobRow,
    JobStatus,
    as_utc,
    utcnow,
)
from .records import AttemptRecord, JobRecord, _aware

log = logging.getLogger(__name__)


#: job states in which a job may still run (the rest are terminal); at most one job per name
#: is in one of them (a partial unique index, see :data:`.models.LIVE_JOB_STATUSES`)
ACTIVE_JOB_STATUSES = LIVE_JOB_STATUSES


def heartbeat_timeout() -> float:
    """The heartbeat timeout in seconds (``$CKPT_HEARTBEAT_TIMEOUT_S``, default 60)."""
    return HEARTBEAT_TIMEOUT.get()


def _name_in_use(job_name: str, job_id: str, status: str,
                 row: JobRow | JobRecord | None = None) -> JobNameInUseError:
    """The refusal of a name a live job holds: which job, and how long a restart waits."""
    timeout = heartbeat_timeout()
    wait = f"wait until it has had no heartbeat for {timeout:.0f} s"
    if row is not None:
        last = _aware(row.heartbeat_at) or as_utc(row.created_at)
        age = max(0.0, (utcnow() - last).total_seconds())
        where = f" on host {row.driver_host}" if row.driver_host else ""
        wait = (f"its driver{where} is not provably gone (it is on another host, or its "
                f"process still runs), so the name is free once it has had no heartbeat for "
                f"{timeout:.0f} s: last heartbeat {age:.0f} s ago, free in about "
                f"{max(0.0, timeout - age):.0f} s")
    return JobNameInUseError(
        f"job name {job_name!r} is in use by live job {job_id} ({status}); stop or cancel "
        f"it first (ckpt stop/cancel {job_id}), or {wait}")


class Jobs:
    """The metadata DB's jobs and attempts (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB) -> None:
        self.db = db

    # -- jobs -------------------------------------------------------------------------------

    def mark_lost_in(self, session: Session, job_name: str | None = None,
                   timeout: float | None = None) -> list[str]:
        """Mark active jobs whose heartbeat (or creation, if they never heartbeated) is older
        than ``timeout`` LOST, fail their open control requests; return their ids."""
        timeout = heartbeat_timeout() if timeout is None else timeout
        now = utcnow()
        cutoff = now - timedelta(seconds=timeout)
        query = select(JobRow).where(JobRow.status.in_(ACTIVE_JOB_STATUSES))
        if job_name is not None:
            query = query.where(JobRow.job_name == job_name)
        lost = []
        for row in session.scalars(query):
            last = _aware(row.heartbeat_at) or as_utc(row.created_at)
            if last < cutoff:
                reason = (f"no heartbeat since {last:%Y-%m-%d %H:%M:%S} UTC (more than "
                          f"{timeout:.0f} s): the job's driver is presumed dead")
                # Conditional on what was read: a heartbeat (or another process taking the
                # job over) committed since makes this a no-op (PostgreSQL re-checks the
                # condition after waiting for the row; SQLite writers are serialized).
                gone = or_(JobRow.heartbeat_at < cutoff,
                           and_(JobRow.heartbeat_at.is_(None), JobRow.created_at < cutoff))
            elif driver_is_gone(row.driver_host, row.driver_process):
                # no need to wait for the lease: the driver's process is gone (same host)
                reason = (f"its driver process ({(row.driver_process or '').split(':')[0]} on "
                          f"{row.driver_host}) is gone")
                gone = JobRow.driver_process == row.driver_process
            else:
                continue
            result = session.execute(
                update(JobRow)
                .where(JobRow.job_id == row.job_id, JobRow.status.in_(ACTIVE_JOB_STATUSES),
                       gone)
                .values(status=JobStatus.LOST.value, failure_reason=reason, updated_at=now)
                .execution_options(synchronize_session=False))
            if result.rowcount != 1:  # type: ignore[attr-defined]
                continue
            session.expire(row)  # callers holding the row see it LOST
            session.execute(
                update(ControlRequestRow)
                .where(ControlRequestRow.job_id == row.job_id,
                       ControlRequestRow.status.not_in(list(TERMINAL_CONTROL_REQUEST_STATUSES)))
                .values(status=ControlRequestStatus.FAILED.value, updated_at=now,
                        error=f"job {row.job_name} ({row.job_id}) is LOST: {reason}")
                .execution_options(synchronize_session=False))
            lost.append(row.job_id)
        return lost

    def mark_lost_jobs(self, job_name: str | None = None, *,
                       timeout: float | None = None) -> list[str]:
        """Declare active jobs without a recent heartbeat LOST (see :class:`JobStatus`);
        returns their ids."""
        lost = self.db.write(lambda s: self.mark_lost_in(s, job_name, timeout), "mark_lost_jobs")
        for job_id in lost:
            log.warning("Job %s has no recent heartbeat: marked LOST", job_id)
        return lost

    def create_job(self, *, job_id: str, job_name: str, parallelism: int,
                   version: str | None = None, restored_from: str | None = None,
                   spark_app_id: str | None = None, exclusive_name: bool = False) -> JobRecord:
        """Insert a job in status CREATED, attempt 0. Raises :class:`JobIdInUseError` (a
        ``ValueError``) if the id exists, and :class:`JobNameInUseError` naming the live job
        if a job of this name is live: one live job per name is a database guarantee (a
        partial unique index, so two processes inserting at once cannot both succeed).
        ``exclusive_name``: take the name over from jobs without a recent heartbeat first
        (marked LOST, in the same transaction)."""

        def fn(session: Session) -> JobRecord:
            existing = session.get(JobRow, job_id)
            if existing is not None:
                raise JobIdInUseError(
                    f"job id {job_id!r} already exists (job {existing.job_name}, "
                    f"{existing.status}); pick another id or omit --job-id")
            if exclusive_name:
                self.mark_lost_in(session, job_name)
            live = session.scalars(select(JobRow).where(
                JobRow.job_name == job_name, JobRow.status.in_(ACTIVE_JOB_STATUSES))).first()
            if live is not None:
                raise _name_in_use(job_name, live.job_id, live.status, live)
            now = utcnow()
            driver = this_process()
            owner = session.get(JobOwnerRow, job_id)  # reserved by the Airflow task
            row = JobRow(job_id=job_id, job_name=job_name, version=version,
                         status=JobStatus.CREATED.value, restored_from=restored_from,
                         spark_app_id=spark_app_id, parallelism=parallelism, attempt=0,
                         failure_reason=None, heartbeat_at=None, created_at=now,
                         updated_at=now, dag_id=owner.dag_id if owner else None,
                         dag_run_id=owner.dag_run_id if owner else None,
                         driver_host=driver.host, driver_process=driver.process or None)
            session.add(row)
            session.flush()
            return JobRecord.from_row(row)

        try:
            record = self.db.write(fn, "create_job")
        except IntegrityError as exc:
            # another process inserted a live job of this name (or this id) after our read
            raise self._insert_conflict(job_id, job_name) from exc
        log.info("Created job %s (%s), parallelism %d%s", job_name, job_id, parallelism,
                 f", restored from {restored_from}" if restored_from else "")
        return record

    def _insert_conflict(self, job_id: str, job_name: str) -> Exception:
        """The typed error of a ``create_job`` insert the database refused."""
        other = self.get_job(job_id)
        if other is not None:
            return JobIdInUseError(f"job id {job_id!r} already exists (job {other.job_name}, "
                                   f"{other.status}); pick another id or omit --job-id")
        live = next((j for j in self.list_jobs(job_name) if j.status in ACTIVE_JOB_STATUSES),
                    None)
        if live is None:  # it ended meanwhile: the name is free again, a retry may succeed
            return JobNameInUseError(
                f"job name {job_name!r} was taken by another job starting at the same time; "
                f"retry, or check `ckpt jobs {job_name}`")
        return _name_in_use(job_name, live.job_id, live.status, live)

    def set_job_status(self, job_id: str, status: str, *,
                       failure_reason: str | None = None) -> None:
        """Set the job's status and ``failure_reason`` (``None`` clears it: the reason always
        describes the current status; ``job_attempts`` keeps every attempt's reason)."""
        status = _choice(JobStatus, status, "job status")

        def fn(session: Session) -> str:
            row = job_row(session, job_id)
            if row.status == JobStatus.LOST and status in ACTIVE_JOB_STATUSES:
                # its name may belong to another job now: a LOST job never runs again
                raise JobLostError(
                    f"job {row.job_name} ({job_id}) was declared LOST ({row.failure_reason}) "
                    f"and cannot become {status}; start a new job")
            row.status = status
            row.failure_reason = failure_reason
            row.updated_at = utcnow()
            return row.job_name

        name = self.db.write(fn, "set_job_status")
        log.info("Job %s (%s) is %s%s", name, job_id, status,
                 f": {failure_reason}" if failure_reason else "")

    def set_job_restored_from(self, job_id: str, restored_from: str | None) -> None:
        """Record the snapshot the job restores (known once the job, which claims its name
        first, has resolved ``restore="latest"``)."""

        def fn(session: Session) -> None:
            row = job_row(session, job_id)
            row.restored_from = restored_from
            row.updated_at = utcnow()

        self.db.write(fn, "set_job_restored_from")

    def set_job_progress_stall(self, job_id: str, stall: dict | None) -> None:
        """Record where the job stopped progressing (``None``: it progresses again); written
        by the job master when its progress watchdog's verdict changes."""
        jobs = JOBS.c

        def fn(conn: Connection) -> None:
            conn.execute(update(JOBS).where(jobs.job_id == job_id).values(progress_stall=stall))

        self.db.write_conn(fn, "set_job_progress_stall")

    def reserve_job_owner(self, job_id: str, dag_id: str, dag_run_id: str | None = None) -> str:
        """Reserve ``job_id`` for the Airflow DAG ``dag_id`` (and its run ``dag_run_id``)
        before the job is launched: ``create_job`` copies the owner into the job's row, so
        the job belongs to its DAG from its first row on. Idempotent for the same DAG (a
        retry of the task). Returns the owning DAG: the one reserved earlier, or the owner of
        an existing job row, which never changes (a reservation after the fact is ignored)."""

        def fn(session: Session) -> str:
            job = session.get(JobRow, job_id)
            if job is not None:
                return job.dag_id or ""
            earlier = session.get(JobOwnerRow, job_id)
            if earlier is not None:
                return earlier.dag_id
            session.add(JobOwnerRow(job_id=job_id, dag_id=dag_id, dag_run_id=dag_run_id,
                                    created_at=utcnow()))
            return dag_id

        owner = self.db.write(fn, "reserve_job_owner")
        log.info("Job id %s belongs to DAG %s", job_id, owner or "(none: started outside Airflow)")
        return owner

    def set_spark_app_id(self, job_id: str, spark_app_id: str) -> None:
        """Record the Spark application id once the driver knows it."""

        def fn(session: Session) -> None:
            row = job_row(session, job_id)
            row.spark_app_id = spark_app_id
            row.updated_at = utcnow()

        self.db.write(fn, "set_spark_app_id")

    def heartbeat(self, job_id: str) -> str:
        """Refresh ``jobs.heartbeat_at`` (only that column) unless the job was declared LOST
        meanwhile; returns the job's status (a driver whose job is LOST must stop)."""

        jobs = JOBS.c  # every few seconds while a job runs: a plain connection

        def fn(conn: Connection) -> str:
            result = conn.execute(
                update(JOBS).where(jobs.job_id == job_id,
                                  jobs.status != JobStatus.LOST.value)
                .values(heartbeat_at=utcnow()))
            if result.rowcount != 1:
                status = conn.scalar(select(jobs.status).where(jobs.job_id == job_id))
                if status is None:
                    raise LookupError(f"no job with id {job_id!r}")
                return str(status)
            return JobStatus.RUNNING.value

        return self.db.write_conn(fn, "heartbeat")

    def get_job(self, job_id: str) -> JobRecord | None:
        def fn(session: Session) -> JobRecord | None:
            row = session.get(JobRow, job_id)
            return None if row is None else JobRecord.from_row(row)

        return self.db.read(fn, "get_job")

    def resolve_job(self, job_ref: str) -> JobRecord:
        """Find a job by exact id, else by a unique id prefix (at least
        ``MIN_JOB_ID_PREFIX`` characters), else by name: the newest *active* job
        (CREATED/RUNNING/RESTARTING) with that name if there is one, else the newest job.

        Raises ``LookupError`` when nothing matches or the prefix is ambiguous.
        """

        def fn(session: Session) -> JobRecord:
            row = session.get(JobRow, job_ref)
            if row is not None:
                return JobRecord.from_row(row)
            ambiguous = 0
            if len(job_ref) >= MIN_JOB_ID_PREFIX:
                rows = session.scalars(
                    select(JobRow).where(JobRow.job_id.startswith(job_ref, autoescape=True))
                    .limit(2)
                ).all()
                if len(rows) == 1:
                    return JobRecord.from_row(rows[0])
                ambiguous = len(rows)
            named = (select(JobRow).where(JobRow.job_name == job_ref)
                     .order_by(JobRow.created_at.desc(), JobRow.job_id.desc()).limit(1))
            row = session.scalars(
                named.where(JobRow.status.in_(ACTIVE_JOB_STATUSES))).first() or session.scalars(
                named).first()
            if row is not None:
                return JobRecord.from_row(row)
            if ambiguous:
                raise LookupError(f"job id prefix {job_ref!r} matches several jobs; "
                                  f"give more characters")
            raise LookupError(f"no job matches {job_ref!r}")

        return self.db.read(fn, "resolve_job")

    def list_jobs(self, job_name: str | None = None) -> list[JobRecord]:
        """Jobs, newest first, optionally only those named ``job_name``."""

        def fn(session: Session) -> list[JobRecord]:
            query = select(JobRow)
            if job_name is not None:
                query = query.where(JobRow.job_name == job_name)
            query = query.order_by(JobRow.created_at.desc(), JobRow.job_id.desc())
            return [JobRecord.from_row(r) for r in session.scalars(query)]

        return self.db.read(fn, "list_jobs")

    # -- attempts ---------------------------------------------------------------------------

    def start_attempt(self, job_id: str, attempt: int, *, restored_checkpoint_id: int | None,
                      restored_from: str | None) -> None:
        """Record the start of attempt ``attempt`` (0 first) and make it the job's current one."""

        def fn(session: Session) -> None:
            job = job_row(session, job_id)
            now = utcnow()
            row = session.get(JobAttemptRow, (job_id, attempt))
            if row is None:
                row = JobAttemptRow(job_id=job_id, attempt=attempt)
                session.add(row)
            row.started_at = now
            row.ended_at = None
            row.restored_checkpoint_id = restored_checkpoint_id
            row.restored_from = restored_from
            row.failure_reason = None
            job.attempt = attempt
            job.updated_at = now

        self.db.write(fn, "start_attempt")
        log.debug("Job %s attempt %d started%s", job_id, attempt,
                  f" from checkpoint {restored_checkpoint_id}" if restored_checkpoint_id else "")

    def end_attempt(self, job_id: str, attempt: int, *, failure_reason: str | None) -> None:
        """Record the end of an attempt; ``failure_reason`` is ``None`` when it ended cleanly."""

        def fn(session: Session) -> None:
            row = session.get(JobAttemptRow, (job_id, attempt))
            if row is None:
                raise LookupError(f"job {job_id!r} has no attempt {attempt}")
            row.ended_at = utcnow()
            row.failure_reason = failure_reason

        self.db.write(fn, "end_attempt")

    def set_attempt_placement(self, job_id: str, attempt: int, placement: list[dict]) -> None:
        """Record where each slot of an attempt runs (host, pid, Spark executor)."""

        def fn(session: Session) -> None:
            row = session.get(JobAttemptRow, (job_id, attempt))
            if row is None:
                raise LookupError(f"job {job_id!r} has no attempt {attempt}")
            row.placement = [dict(p) for p in placement]

        self.db.write(fn, "set_attempt_placement")

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """The job's attempts, oldest first."""

        def fn(session: Session) -> list[AttemptRecord]:
            rows = session.scalars(
                select(JobAttemptRow).where(JobAttemptRow.job_id == job_id)
                .order_by(JobAttemptRow.attempt)
            )
            return [AttemptRecord.from_row(r) for r in rows]

        return self.db.read(fn, "list_attempts")
