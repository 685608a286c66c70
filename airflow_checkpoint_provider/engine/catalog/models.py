"""Tables of the metadata DB: the completed-checkpoint store and the control plane.

The metadata DB is a product surface: operators query it with plain SQL, the ``ckpt`` CLI
prints it, Airflow polls it. Column names say what they hold, every state is a documented
string (no integer codes), sizes are bytes, durations milliseconds, and every timestamp is
UTC (``DateTime(timezone=True)``; SQLite stores it as text without an offset, always UTC).

Tables
======

``jobs``
    One row per job run (a ``job_id``, uuid hex), several runs may share a ``job_name``.
    ``status`` is a :class:`JobStatus`; ``attempt`` is the current attempt (0 for the first
    start, +1 per restart); ``heartbeat_at`` is refreshed by the running coordinator, so a
    RUNNING job with a stale heartbeat is a dead driver. At most one job per name is live
    (CREATED, RUNNING or RESTARTING): a partial unique index guarantees it (revision 0005).

``job_owners``
    The Airflow DAG (and DAG run) a job id is reserved for, written before the job is
    launched; the job's row takes ``dag_id``/``dag_run_id`` from it when it is created. The
    provider's operators act only on jobs of their own DAG (``allowed_owner_dags`` widens it).

``job_attempts``
    One row per (re)start of a job, primary key ``(job_id, attempt)``: when it started and
    ended, which checkpoint it restored (``restored_checkpoint_id`` and the location in
    ``restored_from``) and why it ended (``failure_reason``; NULL when it finished cleanly).

``checkpoints``
    One row per triggered checkpoint or savepoint (``kind``, a :class:`CheckpointKind`),
    unique on ``(job_id, checkpoint_id)``. ``status`` follows :class:`CheckpointStatus`:
    ``PENDING -> COMPLETED -> SUBSUMED`` on the happy path, ``PENDING -> FAILED`` when it is
    declined or expires, ``COMPLETED -> CORRUPT`` when a restore finds its files damaged.
    Only a COMPLETED row whose ``_metadata`` exists is restorable.
    ``state_size`` is the full state the checkpoint references, ``checkpointed_size`` the
    bytes uploaded for this checkpoint alone (smaller with incremental checkpoints),
    ``task_stats`` a JSON list with one object per acknowledging task.

``control_requests``
    The control plane between Airflow (or the CLI) and a running job: a client inserts a
    request (``action``, a :class:`ControlAction`, with JSON ``params``), the job's
    coordinator claims it (``PENDING -> IN_PROGRESS``) and finishes it
    (``SUCCEEDED`` with a JSON ``result`` such as ``{"checkpoint_id", "location"}``, or
    ``FAILED`` with an ``error``). See :class:`ControlRequestStatus`.

``snapshot_keys``
    One row: the random key that signs (HMAC-SHA256) every ``_metadata`` this DB's jobs
    write, and when it was created (revision 0006). A secret, like the DB's password.

``shared_state``
    The shared-state registry of incremental checkpoints: one row per file under the job's
    ``shared/`` directory, with the checkpoint that created it and the newest checkpoint
    that still references it. A file whose ``last_used_checkpoint`` is older than the oldest
    retained checkpoint is no longer referenced and can be deleted.

The schema is versioned with Alembic (``migrations/``); a change to these classes needs a
new revision in ``migrations/versions``. Types are portable (SQLite and PostgreSQL).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# -- states ----------------------------------------------------------------------------------


class JobStatus(StrEnum):
    """State of a job run (``jobs.status``).

    - ``CREATED``: the row exists, tasks are being deployed.
    - ``RUNNING``: every task runs; checkpoints are triggered.
    - ``RESTARTING``: an attempt failed, the job restarts from the latest completed
      checkpoint (``failure_reason`` says why).
    - ``FINISHED``: every source was exhausted and the job ended normally.
    - ``FAILED``: the restart strategy gave up (``failure_reason`` says why).
    - ``CANCELED``: stopped on request, without a savepoint.
    - ``STOPPED``: stopped on request after taking a final savepoint.
    - ``LOST``: the job's driver stopped writing its heartbeat for longer than the
      heartbeat timeout (``$CKPT_HEARTBEAT_TIMEOUT_S``, default 60 s) and is presumed dead,
      or its process is provably gone (seen from the same host, ``catalog/driver.py``);
      its control requests fail and a new job of the same name may start. A driver that
      finds its row LOST stops (it may have been superseded).
    """

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    STOPPED = "STOPPED"
    LOST = "LOST"


#: Job states in which a job may still run; at most one job per name is in one of them (the
#: partial unique index ``uq_jobs_live_job_name``, revision 0005).
LIVE_JOB_STATUSES: tuple[str, ...] = (JobStatus.CREATED.value, JobStatus.RUNNING.value,
                                      JobStatus.RESTARTING.value)
#: the index's condition, the same SQL on SQLite and PostgreSQL
LIVE_JOB_CONDITION = "status IN ('CREATED', 'RUNNING', 'RESTARTING')"
#: the partial unique index: one live job per name, a database guarantee
LIVE_JOB_NAME_INDEX = "uq_jobs_live_job_name"

#: Job states a job never leaves.
TERMINAL_JOB_STATUSES: frozenset[str] = frozenset(
    {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.STOPPED,
     JobStatus.LOST}
)


class CheckpointKind(StrEnum):
    """What a ``checkpoints`` row is.

    - ``CHECKPOINT``: periodic, owned by the job, subsumed by newer ones, may reference
      shared (incremental) files.
    - ``SAVEPOINT``: on request, owned by the user, self-contained, never subsumed.
    """

    CHECKPOINT = "CHECKPOINT"
    SAVEPOINT = "SAVEPOINT"


class CheckpointStatus(StrEnum):
    """State of a checkpoint or savepoint (``checkpoints.status``).

    - ``PENDING``: triggered, not every task acknowledged yet.
    - ``COMPLETED``: every task acknowledged and ``_metadata`` is written: restorable.
    - ``FAILED``: declined by a task, expired, or aborted on failover (``failure_reason``).
    - ``SUBSUMED``: a newer completed checkpoint replaced it beyond the retained count; its
      files are deleted (``files_deleted``) unless a pin holds them (see
      ``engine/checkpoint/held.py``).
    - ``DISCARDED``: deleted on request (for example ``ckpt dispose``).
    - ``CORRUPT``: was COMPLETED, but restoring it found ``_metadata`` or a state file
      missing, truncated or not matching its checksum; never restored again (restore
      ``latest`` and failover fall back to the next older COMPLETED checkpoint).
    """

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBSUMED = "SUBSUMED"
    DISCARDED = "DISCARDED"
    CORRUPT = "CORRUPT"


class ControlAction(StrEnum):
    """What a control request asks the job to do (``control_requests.action``).

    - ``CHECKPOINT``: trigger a checkpoint now.
    - ``SAVEPOINT``: take a savepoint (``params.directory`` optional) and keep running.
    - ``STOP_WITH_SAVEPOINT``: take a final savepoint, then stop (job ends STOPPED).
    - ``CANCEL``: stop now without a savepoint (job ends CANCELED).
    - ``PROMOTE``: restore ``params.snapshot`` in place, in the running application
      (``params.unfence``: a fenced job publishes from there); see engine/runners/jobmaster/promote.py.
    """

    CHECKPOINT = "CHECKPOINT"
    SAVEPOINT = "SAVEPOINT"
    STOP_WITH_SAVEPOINT = "STOP_WITH_SAVEPOINT"
    CANCEL = "CANCEL"
    PROMOTE = "PROMOTE"


class ControlRequestStatus(StrEnum):
    """State of a control request (``control_requests.status``).

    - ``PENDING``: submitted, not yet seen by the job.
    - ``IN_PROGRESS``: claimed by the job's coordinator (exactly one claimer).
    - ``SUCCEEDED``: done; ``result`` holds what it produced.
    - ``FAILED``: could not be done; ``error`` says why.
    """

    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


#: Control request states a request never leaves.
TERMINAL_CONTROL_REQUEST_STATUSES: frozenset[str] = frozenset(
    {ControlRequestStatus.SUCCEEDED, ControlRequestStatus.FAILED}
)

# -- types -----------------------------------------------------------------------------------


class UTCDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always stores UTC and always returns aware UTC.

    SQLite keeps no offset and returns naive values: they are UTC by construction, since
    aware values are converted to UTC before they are written. Naive input is taken as UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return as_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return as_utc(value)


def as_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime (a naive value is taken as UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


# -- tables ----------------------------------------------------------------------------------

#: Constraint names are explicit and stable so later migrations can alter them (SQLite batch
#: mode needs names to drop or recreate a constraint).
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JOB_ID_LENGTH = 64
STATUS_LENGTH = 32


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(none_as_null=True),
        list[Any]: JSON(none_as_null=True),
    }


class JobRow(Base):
    """``jobs``: one row per job run. See the module docstring and :class:`JobStatus`."""

    __tablename__ = "jobs"
    __table_args__ = (
        # one live job per name (revision 0005): marking a job LOST or ending it frees its name
        Index(LIVE_JOB_NAME_INDEX, "job_name", unique=True,
              sqlite_where=text(LIVE_JOB_CONDITION), postgresql_where=text(LIVE_JOB_CONDITION)),
    )

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(255), index=True)
    version: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(STATUS_LENGTH))
    restored_from: Mapped[str | None] = mapped_column(Text)
    spark_app_id: Mapped[str | None] = mapped_column(String(255))
    parallelism: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    heartbeat_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    #: the Airflow DAG that submitted the job (revision 0008; NULL: started outside Airflow):
    #: its owner. Copied from ``job_owners`` when the job is created (revision 0010), so a
    #: job belongs to its DAG from its first row on; never changed afterwards
    dag_id: Mapped[str | None] = mapped_column(String(250), index=True)
    #: the DAG run whose task submitted the job (revision 0010)
    dag_run_id: Mapped[str | None] = mapped_column(String(250))
    #: the host of the job's driver and its process, ``pid:start-ticks:boot-id`` (revision
    #: 0010): a restart on that host sees at once that the driver is gone (``driver.py``)
    driver_host: Mapped[str | None] = mapped_column(String(255))
    driver_process: Mapped[str | None] = mapped_column(String(128))
    #: the progress watchdog's verdict (revision 0011; NULL: progressing): where records or
    #: the watermark stopped, ``{"operator", "kind", "since", "queued", "chain",
    #: "threshold_s", "detail"}`` (``checkpoint/progress_watch.py``)
    progress_stall: Mapped[dict[str, Any] | None]


class JobOwnerRow(Base):
    """``job_owners``: the DAG (and DAG run) that will own a job, written by the Airflow
    task *before* it launches the job under this id (revision 0010). ``create_job`` copies it
    into the job's row, so the job is owned from the moment it exists, whatever the runner."""

    __tablename__ = "job_owners"

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    dag_id: Mapped[str] = mapped_column(String(250))
    dag_run_id: Mapped[str | None] = mapped_column(String(250))
    created_at: Mapped[datetime]


class JobAttemptRow(Base):
    """``job_attempts``: one row per (re)start of a job, keyed by ``(job_id, attempt)``."""

    __tablename__ = "job_attempts"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    restored_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    restored_from: Mapped[str | None] = mapped_column(Text)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    #: one entry per slot: where Spark (or the local runner) ran it (revision 0002)
    placement: Mapped[list[Any] | None]


class CheckpointRow(Base):
    """``checkpoints``: one row per checkpoint or savepoint. See :class:`CheckpointStatus`."""

    __tablename__ = "checkpoints"
    __table_args__ = (
        UniqueConstraint("job_id", "checkpoint_id"),
        Index(None, "status", "kind"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.job_id", ondelete="CASCADE"))
    checkpoint_id: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(STATUS_LENGTH))
    status: Mapped[str] = mapped_column(String(STATUS_LENGTH))
    is_final: Mapped[bool] = mapped_column(Boolean, default=False)
    trigger_time: Mapped[datetime]
    complete_time: Mapped[datetime | None]
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    state_size: Mapped[int | None] = mapped_column(BigInteger)
    checkpointed_size: Mapped[int | None] = mapped_column(BigInteger)
    location: Mapped[str] = mapped_column(Text)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    task_stats: Mapped[list[Any] | None]
    #: (revision 0009) the coordinator deleted this SUBSUMED checkpoint's files; a SUBSUMED
    #: row without it still has them (held by a pin, or its driver died first)
    files_deleted: Mapped[bool] = mapped_column(Boolean, default=False,
                                                server_default=false())


class OperatorStateSizeRow(Base):
    """``operator_state_sizes`` (revision 0003): the keyed state of one operator uid in one
    completed checkpoint or savepoint: ``state_bytes`` (its state files; for RocksDB the full
    size, shared SSTs included), ``states`` (the state names those files hold, comma
    separated: per-key states share their files), ``subtasks`` (subtasks with state)."""

    __tablename__ = "operator_state_sizes"
    __table_args__ = (UniqueConstraint("job_id", "checkpoint_id", "operator_uid"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.job_id", ondelete="CASCADE"))
    checkpoint_id: Mapped[int] = mapped_column(BigInteger)
    operator_uid: Mapped[str] = mapped_column(String(255))
    states: Mapped[str] = mapped_column(Text)
    state_bytes: Mapped[int] = mapped_column(BigInteger)
    subtasks: Mapped[int] = mapped_column(Integer)


class ControlRequestRow(Base):
    """``control_requests``: requests to a running job. See :class:`ControlRequestStatus`."""

    __tablename__ = "control_requests"
    __table_args__ = (Index(None, "job_id", "status"),)

    request_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.job_id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(STATUS_LENGTH))
    params: Mapped[dict[str, Any] | None]
    status: Mapped[str] = mapped_column(String(STATUS_LENGTH))
    result: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    #: client-chosen key: a second submission with the same key returns this request
    idempotency_key: Mapped[str | None] = mapped_column(String(255), index=True, unique=True)


class SharedStateRow(Base):
    """``shared_state``: a file shared by incremental checkpoints, keyed by (job, file key)."""

    __tablename__ = "shared_state"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    file_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    created_by_checkpoint: Mapped[int] = mapped_column(BigInteger)
    last_used_checkpoint: Mapped[int] = mapped_column(BigInteger)


class SavepointPinRow(Base):
    """``savepoint_pins``: a savepoint that retention and dispose must keep (revision
    0004).

    One row per (savepoint location, holder): pinning again with the same holder renews it.
    ``holder`` says who needs the savepoint (``airflow:<dag_id>/<run_id>`` for a DAG run, a
    user name, ``upgrade-orders``); ``expires_at`` (NULL: until unpinned) bounds a pin whose
    holder died, so a crashed upgrade never keeps a savepoint forever.
    """

    __tablename__ = "savepoint_pins"
    __table_args__ = (UniqueConstraint("location", "holder"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    location: Mapped[str] = mapped_column(String(1024))
    holder: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]


class SnapshotKeyRow(Base):
    """``snapshot_keys`` (revision 0006): the key that signs this metadata DB's snapshots.

    One row (``key_id`` is always 1): a random 32-byte HMAC-SHA256 key, created by the first
    job (or ``ckpt``) that needs it with an insert-if-absent, so concurrent creators all
    read the same key, and when it was created (``created_at``: checkpoints completed before
    it are accepted unsigned, see :mod:`..checkpoint.trust`). A secret: never printed.
    """

    __tablename__ = "snapshot_keys"

    key_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    key: Mapped[bytes] = mapped_column(LargeBinary(64))
    created_at: Mapped[datetime]


#: The tables the hot paths of a running job write on a plain connection (no ORM session):
#: a checkpoint's rows, the heartbeat, the control-request poll and the pin lookup.
CHECKPOINTS = cast(Table, CheckpointRow.__table__)
JOBS = cast(Table, JobRow.__table__)
OPERATOR_STATE_SIZES = cast(Table, OperatorStateSizeRow.__table__)
CONTROL_REQUESTS = cast(Table, ControlRequestRow.__table__)
SAVEPOINT_PINS = cast(Table, SavepointPinRow.__table__)

__all__ = [
    "CHECKPOINTS",
    "CONTROL_REQUESTS",
    "JOBS",
    "OPERATOR_STATE_SIZES",
    "SAVEPOINT_PINS",
    "LIVE_JOB_CONDITION",
    "LIVE_JOB_NAME_INDEX",
    "LIVE_JOB_STATUSES",
    "TERMINAL_CONTROL_REQUEST_STATUSES",
    "TERMINAL_JOB_STATUSES",
    "Base",
    "CheckpointKind",
    "CheckpointRow",
    "CheckpointStatus",
    "ControlAction",
    "ControlRequestRow",
    "ControlRequestStatus",
    "JobAttemptRow",
    "JobRow",
    "JobStatus",
    "OperatorStateSizeRow",
    "SavepointPinRow",
    "SharedStateRow",
    "SnapshotKeyRow",
    "UTCDateTime",
    "as_utc",
    "utcnow",
]
