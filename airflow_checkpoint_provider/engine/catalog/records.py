"""Frozen records the catalog returns (never ORM objects, so callers never hold a session)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import (
    TERMINAL_CONTROL_REQUEST_STATUSES,
    TERMINAL_JOB_STATUSES,
    CheckpointRow,
    ControlRequestRow,
    JobAttemptRow,
    JobRow,
    SavepointPinRow,
    as_utc,
)

# -- records ---------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (datetimes as ISO-8601 strings with offset)."""
        return {
            f.name: _jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        }


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)


@dataclass(frozen=True)
class JobRecord(_Record):
    """A row of ``jobs``. ``status`` is a :class:`~.models.JobStatus` value."""

    job_id: str
    job_name: str
    version: str | None
    status: str
    restored_from: str | None
    spark_app_id: str | None
    parallelism: int
    attempt: int
    failure_reason: str | None
    heartbeat_at: datetime | None
    created_at: datetime
    updated_at: datetime
    #: the Airflow DAG that submitted the job, its owner (``None``: started outside Airflow)
    dag_id: str | None = None
    #: the DAG run whose task submitted the job
    dag_run_id: str | None = None
    #: the host and process (``pid:start:boot``) of the job's driver
    driver_host: str | None = None
    driver_process: str | None = None
    #: where the job stopped progressing (the progress watchdog), ``None``: progressing
    progress_stall: dict | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_JOB_STATUSES

    @classmethod
    def from_row(cls, row: JobRow) -> JobRecord:
        return cls(
            job_id=row.job_id,
            job_name=row.job_name,
            version=row.version,
            status=row.status,
            restored_from=row.restored_from,
            spark_app_id=row.spark_app_id,
            parallelism=row.parallelism,
            attempt=row.attempt,
            failure_reason=row.failure_reason,
            heartbeat_at=_aware(row.heartbeat_at),
            created_at=as_utc(row.created_at),
            updated_at=as_utc(row.updated_at),
            dag_id=row.dag_id,
            dag_run_id=row.dag_run_id,
            driver_host=row.driver_host,
            driver_process=row.driver_process,
            progress_stall=row.progress_stall,
        )


@dataclass(frozen=True)
class AttemptRecord(_Record):
    """A row of ``job_attempts``: one (re)start of a job."""

    job_id: str
    attempt: int
    started_at: datetime
    ended_at: datetime | None
    restored_checkpoint_id: int | None
    restored_from: str | None
    failure_reason: str | None
    placement: list[dict[str, Any]] | None = None

    @classmethod
    def from_row(cls, row: JobAttemptRow) -> AttemptRecord:
        return cls(
            job_id=row.job_id,
            attempt=row.attempt,
            started_at=as_utc(row.started_at),
            ended_at=_aware(row.ended_at),
            restored_checkpoint_id=row.restored_checkpoint_id,
            restored_from=row.restored_from,
            failure_reason=row.failure_reason,
            placement=row.placement,
        )


@dataclass(frozen=True)
class CheckpointRecord(_Record):
    """A row of ``checkpoints``. Sizes in bytes, ``duration_ms`` from trigger to completion."""

    job_id: str
    checkpoint_id: int
    kind: str
    status: str
    is_final: bool
    trigger_time: datetime
    complete_time: datetime | None
    duration_ms: int | None
    state_size: int | None
    checkpointed_size: int | None
    location: str
    failure_reason: str | None
    task_stats: list[dict[str, Any]] | None

    @classmethod
    def from_row(cls, row: CheckpointRow) -> CheckpointRecord:
        return cls(
            job_id=row.job_id,
            checkpoint_id=row.checkpoint_id,
            kind=row.kind,
            status=row.status,
            is_final=bool(row.is_final),
            trigger_time=as_utc(row.trigger_time),
            complete_time=_aware(row.complete_time),
            duration_ms=row.duration_ms,
            state_size=row.state_size,
            checkpointed_size=row.checkpointed_size,
            location=row.location,
            failure_reason=row.failure_reason,
            task_stats=row.task_stats,
        )


@dataclass(frozen=True)
class ControlRequestRecord(_Record):
    """A row of ``control_requests``. ``status`` is a :class:`~.models.ControlRequestStatus`."""

    request_id: str
    job_id: str
    action: str
    params: dict[str, Any]
    status: str
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    idempotency_key: str | None = None

    @property
    def is_done(self) -> bool:
        return self.status in TERMINAL_CONTROL_REQUEST_STATUSES

    @classmethod
    def from_row(cls, row: ControlRequestRow) -> ControlRequestRecord:
        return cls(
            request_id=row.request_id,
            job_id=row.job_id,
            action=row.action,
            params=dict(row.params or {}),
            status=row.status,
            result=row.result,
            error=row.error,
            created_at=as_utc(row.created_at),
            updated_at=as_utc(row.updated_at),
            idempotency_key=row.idempotency_key,
        )


@dataclass(frozen=True)
class SavepointPinRecord(_Record):
    """A row of ``savepoint_pins``: ``holder`` needs the savepoint at ``location`` until
    ``expires_at`` (``None``: until unpinned)."""

    location: str
    holder: str
    reason: str | None
    created_at: datetime
    expires_at: datetime | None

    @classmethod
    def from_row(cls, row: SavepointPinRow) -> SavepointPinRecord:
        return cls(location=row.location, holder=row.holder, reason=row.reason,
                   created_at=as_utc(row.created_at), expires_at=_aware(row.expires_at))
