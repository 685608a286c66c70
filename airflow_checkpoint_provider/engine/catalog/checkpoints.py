"""Checkpoints and the shared-state registry in the catalog."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from .base import CatalogDB
from .db import _choice, _chunks
from .models import (
    CHECKPOINTS,
    JOBS,
    OPERATOR_STATE_SIZES,
    CheckpointKind,
    CheckpointRow,
    CheckpointStatus,
    JobRow,
    SharedStateRow,
)
from .records import CheckpointRecord, JobRecord

log = logging.getLogger(__name__)

_CHECKPOINTS = CHECKPOINTS.c


def _one_checkpoint(job_id: str, checkpoint_id: int) -> ColumnElement[bool]:
    return and_(_CHECKPOINTS.job_id == job_id, _CHECKPOINTS.checkpoint_id == checkpoint_id)


def _update(conn: Connection, job_id: str, ids: list[int], *, only: str | None = None,
            **values: object) -> None:
    """Set ``values`` on the rows of ``job_id``'s checkpoints ``ids`` (with status ``only``)."""
    for chunk in _chunks(ids):
        stmt = update(CHECKPOINTS).where(_CHECKPOINTS.job_id == job_id,
                                         _CHECKPOINTS.checkpoint_id.in_(chunk))
        if only is not None:
            stmt = stmt.where(_CHECKPOINTS.status == only)
        conn.execute(stmt.values(**values))


class Checkpoints:
    """The metadata DB's checkpoints and the shared-state registry (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB) -> None:
        self.db = db

    # -- checkpoints ------------------------------------------------------------------------

    def add_pending_checkpoint(self, job_id: str, checkpoint_id: int, *, kind: str,
                               trigger_time: datetime, location: str,
                               is_final: bool = False) -> None:
        """Record a triggered checkpoint or savepoint in status PENDING.

        :param is_final: the savepoint of a stop-with-savepoint (the job ends after it).
        """
        kind = _choice(CheckpointKind, kind, "checkpoint kind")

        def fn(conn: Connection) -> None:
            if conn.scalar(select(JOBS.c.job_id).where(JOBS.c.job_id == job_id)) is None:
                raise LookupError(f"no job with id {job_id!r}")
            if conn.scalar(select(_CHECKPOINTS.id).where(
                    _one_checkpoint(job_id, checkpoint_id))) is not None:
                raise ValueError(f"checkpoint {checkpoint_id} of job {job_id!r} already exists")
            conn.execute(insert(CHECKPOINTS).values(
                job_id=job_id, checkpoint_id=checkpoint_id, kind=kind,
                status=CheckpointStatus.PENDING.value, is_final=is_final,
                trigger_time=trigger_time, location=location, files_deleted=False))

        self.db.write_conn(fn, "add_pending_checkpoint")
        log.debug("Recorded pending %s %d of job %s at %s", kind.lower(), checkpoint_id, job_id,
                  location)

    def _checkpoint_row(self, session: Session, job_id: str, checkpoint_id: int) -> CheckpointRow:
        row = session.scalars(
            select(CheckpointRow).where(_one_checkpoint(job_id, checkpoint_id))).first()
        if row is None:
            raise LookupError(f"job {job_id!r} has no checkpoint {checkpoint_id}")
        return row

    def complete_checkpoint(self, job_id: str, checkpoint_id: int, *, complete_time: datetime,
                            duration_ms: int, state_size: int, checkpointed_size: int,
                            task_stats: list[dict],
                            operator_sizes: list[dict] | None = None) -> None:
        """Mark a pending checkpoint COMPLETED with its statistics: it is now restorable.

        ``operator_sizes``: ``{"operator_uid", "states", "state_bytes", "subtasks"}`` per
        operator with keyed state (table ``operator_state_sizes``)."""

        def fn(conn: Connection) -> None:
            row = conn.execute(select(_CHECKPOINTS.kind, _CHECKPOINTS.status).where(
                _one_checkpoint(job_id, checkpoint_id))).first()
            if row is None:
                raise LookupError(f"job {job_id!r} has no checkpoint {checkpoint_id}")
            if row.status != CheckpointStatus.PENDING:
                log.warning("Completing %s %d of job %s, which is %s", row.kind.lower(),
                            checkpoint_id, job_id, row.status)
            conn.execute(update(CHECKPOINTS)
                         .where(_one_checkpoint(job_id, checkpoint_id))
                         .values(status=CheckpointStatus.COMPLETED.value,
                                 complete_time=complete_time, duration_ms=duration_ms,
                                 state_size=state_size, checkpointed_size=checkpointed_size,
                                 task_stats=list(task_stats), failure_reason=None))
            if operator_sizes:
                conn.execute(insert(OPERATOR_STATE_SIZES),
                             [{"job_id": job_id, "checkpoint_id": checkpoint_id, **size}
                              for size in operator_sizes])

        self.db.write_conn(fn, "complete_checkpoint")
        log.debug("Recorded completed checkpoint %d of job %s", checkpoint_id, job_id)

    def fail_checkpoint(self, job_id: str, checkpoint_id: int, *, reason: str,
                        status: str = CheckpointStatus.FAILED) -> None:
        """Mark a checkpoint FAILED (or another end state, e.g. DISCARDED) with the reason."""
        status = _choice(CheckpointStatus, status, "checkpoint status")

        def fn(session: Session) -> None:
            row = self._checkpoint_row(session, job_id, checkpoint_id)
            row.status = status
            row.failure_reason = reason

        self.db.write(fn, "fail_checkpoint")
        log.debug("Recorded checkpoint %d of job %s as %s: %s", checkpoint_id, job_id, status,
                  reason)

    def set_checkpoint_status(self, job_id: str, checkpoint_ids: list[int], status: str) -> None:
        """Set the status of several checkpoints of a job (e.g. SUBSUMED, DISCARDED)."""
        status = _choice(CheckpointStatus, status, "checkpoint status")
        ids = list(checkpoint_ids)
        if not ids:
            return

        self.db.write_conn(lambda conn: _update(conn, job_id, ids, status=status),
                         "set_checkpoint_status")

    def mark_checkpoint_files_deleted(self, job_id: str, checkpoint_ids: list[int]) -> None:
        """Record that the files of these SUBSUMED checkpoints of ``job_id`` are deleted (a
        SUBSUMED row without the mark is held by a pin, see ``engine/checkpoint/held.py``)."""
        ids = sorted(set(checkpoint_ids))
        if ids:
            self.db.write_conn(lambda conn: _update(conn, job_id, ids, files_deleted=True,
                                                  only=CheckpointStatus.SUBSUMED.value),
                             "mark_checkpoint_files_deleted")

    def checkpoint_at(self, location: str) -> CheckpointRecord | None:
        """The checkpoint or savepoint row whose ``location`` is exactly ``location``."""

        def fn(session: Session) -> CheckpointRecord | None:
            row = session.scalars(select(CheckpointRow).where(
                CheckpointRow.location == location).limit(1)).first()
            return None if row is None else CheckpointRecord.from_row(row)

        return self.db.read(fn, "checkpoint_at")

    def jobs_restored_from_job(self, job_id: str) -> list[JobRecord]:
        """Jobs whose ``restored_from`` is one of ``job_id``'s checkpoints or savepoints."""

        def fn(session: Session) -> list[JobRecord]:
            locations = select(CheckpointRow.location).where(CheckpointRow.job_id == job_id)
            rows = session.scalars(select(JobRow).where(JobRow.restored_from.in_(locations))
                                   .order_by(JobRow.created_at, JobRow.job_id))
            return [JobRecord.from_row(r) for r in rows]

        return self.db.read(fn, "jobs_restored_from_job")

    def prune_checkpoint_history(self, job_id: str, keep: int) -> int:
        """Delete the job's SUBSUMED (files deleted) and FAILED checkpoint rows whose id is not
        among the newest ``keep`` checkpoint ids; savepoints, held checkpoints (SUBSUMED, files
        not deleted) and other statuses stay. Returns how many
        rows were deleted."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (got {keep})")

        def fn(session: Session) -> int:
            newest = session.scalar(select(func.max(CheckpointRow.checkpoint_id))
                                    .where(CheckpointRow.job_id == job_id))
            if newest is None or newest <= keep:
                return 0
            result = session.execute(
                delete(CheckpointRow)
                .where(CheckpointRow.job_id == job_id,
                       CheckpointRow.kind == CheckpointKind.CHECKPOINT.value,
                       or_(CheckpointRow.status == CheckpointStatus.FAILED.value,
                           # a held checkpoint's row stays: the next job adopts it
                           and_(CheckpointRow.status == CheckpointStatus.SUBSUMED.value,
                                CheckpointRow.files_deleted.is_(True))),
                       CheckpointRow.checkpoint_id <= newest - keep)
                .execution_options(synchronize_session=False))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

        count = self.db.write(fn, "prune_checkpoint_history")
        if count:
            log.info("Pruned %d old checkpoint rows of job %s (history %d)", count, job_id, keep)
        return count

    def get_checkpoint(self, job_id: str, checkpoint_id: int) -> CheckpointRecord | None:
        def fn(session: Session) -> CheckpointRecord | None:
            row = session.scalars(
                select(CheckpointRow).where(_one_checkpoint(job_id, checkpoint_id))).first()
            return None if row is None else CheckpointRecord.from_row(row)

        return self.db.read(fn, "get_checkpoint")

    def list_checkpoints(self, job_id: str, *, kind: str | None = None,
                         status: str | None = None) -> list[CheckpointRecord]:
        """The job's checkpoints by ascending ``checkpoint_id``, optionally filtered."""
        query = select(CheckpointRow).where(CheckpointRow.job_id == job_id)
        if kind is not None:
            query = query.where(CheckpointRow.kind == _choice(CheckpointKind, kind,
                                                              "checkpoint kind"))
        if status is not None:
            query = query.where(CheckpointRow.status == _choice(CheckpointStatus, status,
                                                                "checkpoint status"))
        query = query.order_by(CheckpointRow.checkpoint_id)

        def fn(session: Session) -> list[CheckpointRecord]:
            return [CheckpointRecord.from_row(r) for r in session.scalars(query)]

        return self.db.read(fn, "list_checkpoints")

    def latest_completed_checkpoint(self, *, job_id: str | None = None,
                                    job_name: str | None = None,
                                    kind: str | None = "CHECKPOINT") -> CheckpointRecord | None:
        """The newest COMPLETED checkpoint (by ``complete_time``, then ``checkpoint_id``) of
        the job ``job_id`` or of every job named ``job_name``; ``kind=None`` for any kind."""
        found = self.completed_checkpoints(job_id=job_id, job_name=job_name, kind=kind,
                                           limit=1)
        return found[0] if found else None

    def completed_checkpoints(self, *, job_id: str | None = None, job_name: str | None = None,
                              kind: str | None = "CHECKPOINT",
                              limit: int | None = None) -> list[CheckpointRecord]:
        """COMPLETED checkpoints of the job ``job_id`` or of every job named ``job_name``,
        newest first (as :meth:`latest_completed_checkpoint` orders them)."""
        if job_id is None and job_name is None:
            raise ValueError("completed_checkpoints needs job_id or job_name")
        query = select(CheckpointRow).where(
            CheckpointRow.status == CheckpointStatus.COMPLETED.value)
        if kind is not None:
            query = query.where(CheckpointRow.kind == _choice(CheckpointKind, kind,
                                                              "checkpoint kind"))
        if job_id is not None:
            query = query.where(CheckpointRow.job_id == job_id)
        if job_name is not None:
            query = query.join(JobRow, JobRow.job_id == CheckpointRow.job_id).where(
                JobRow.job_name == job_name)
        query = query.order_by(CheckpointRow.complete_time.desc(),
                               CheckpointRow.checkpoint_id.desc())
        if limit is not None:
            query = query.limit(limit)

        def fn(session: Session) -> list[CheckpointRecord]:
            return [CheckpointRecord.from_row(r) for r in session.scalars(query)]

        return self.db.read(fn, "completed_checkpoints")

    def max_checkpoint_id(self, job_id: str) -> int:
        """The highest checkpoint id recorded for the job, whatever its state; 0 if none."""

        def fn(session: Session) -> int:
            value = session.scalar(
                select(func.max(CheckpointRow.checkpoint_id))
                .where(CheckpointRow.job_id == job_id)
            )
            return int(value or 0)

        return self.db.read(fn, "max_checkpoint_id")

    # -- shared-state registry --------------------------------------------------------------

    def register_shared_state(self, job_id: str, checkpoint_id: int,
                              file_keys: list[str]) -> None:
        """Record that checkpoint ``checkpoint_id`` references the shared files ``file_keys``:
        new keys are created by it, existing keys are last used by it (never decreases)."""
        keys = sorted(set(file_keys))
        if not keys:
            return

        def fn(session: Session) -> None:
            existing: set[str] = set()
            for chunk in _chunks(keys):
                existing.update(session.scalars(
                    select(SharedStateRow.file_key).where(SharedStateRow.job_id == job_id,
                                                          SharedStateRow.file_key.in_(chunk))
                ))
                session.execute(
                    update(SharedStateRow)
                    .where(SharedStateRow.job_id == job_id, SharedStateRow.file_key.in_(chunk),
                           SharedStateRow.last_used_checkpoint < checkpoint_id)
                    .values(last_used_checkpoint=checkpoint_id)
                    .execution_options(synchronize_session=False)
                )
            session.add_all(
                SharedStateRow(job_id=job_id, file_key=key, created_by_checkpoint=checkpoint_id,
                               last_used_checkpoint=checkpoint_id)
                for key in keys if key not in existing
            )

        self.db.write(fn, "register_shared_state")

    def unreferenced_shared_state(self, job_id: str, min_retained_checkpoint_id: int) -> list[str]:
        """Shared file keys no retained checkpoint references: last used before
        ``min_retained_checkpoint_id`` (the oldest checkpoint still retained). Sorted."""

        def fn(session: Session) -> list[str]:
            return list(session.scalars(
                select(SharedStateRow.file_key)
                .where(SharedStateRow.job_id == job_id,
                       SharedStateRow.last_used_checkpoint < min_retained_checkpoint_id)
                .order_by(SharedStateRow.file_key)
            ))

        return self.db.read(fn, "unreferenced_shared_state")

    def delete_shared_state(self, job_id: str, file_keys: list[str]) -> None:
        """Forget shared files (after they were deleted from checkpoint storage)."""
        keys = list(file_keys)
        if not keys:
            return

        def fn(session: Session) -> None:
            for chunk in _chunks(keys):
                session.execute(
                    delete(SharedStateRow).where(
                        SharedStateRow.job_id == job_id, SharedStateRow.file_key.in_(chunk))
                    .execution_options(synchronize_session=False))

        self.db.write(fn, "delete_shared_state")
