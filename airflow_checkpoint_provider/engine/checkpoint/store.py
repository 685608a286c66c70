"""The metadata DB: completed-checkpoint store and control plane.

:class:`MetadataStore` is the only code that writes the tables described in
:mod:`.models`. The job's coordinator records jobs, attempts, checkpoints and the
shared-state registry; Airflow and the ``ckpt`` CLI read them and submit control requests,
which the coordinator claims and finishes. Nobody needs network access to the Spark driver.

Every method opens and closes its own short transaction and returns frozen records
(:class:`JobRecord`, :class:`AttemptRecord`, :class:`CheckpointRecord`,
:class:`ControlRequestRecord`), never ORM objects, so callers never hold a session.

Backends: a SQLite file by default (a plain path is accepted), PostgreSQL in production
(``postgresql+psycopg://...``). For SQLite the store

- turns on WAL (readers never block the writer) and a 30 s busy timeout,
- starts write transactions with ``BEGIN IMMEDIATE``: writers queue on the busy timeout
  instead of failing when a read transaction tries to upgrade to a write,
- retries a write a few times, with backoff, when the DB still reports "database is locked".

On PostgreSQL serialization failures, deadlocks and dropped connections are retried the
same way. The schema is created and upgraded with Alembic (``migrations/``), on open
(``migrate=True``) or with ``ckpt db upgrade``; concurrent upgrades from several processes
are serialized by the write lock (SQLite) or an advisory lock (PostgreSQL).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, create_engine, delete, event, func, inspect, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from ..errors import EngineError, JobIdInUseError, JobNameInUseError
from .models import (
    TERMINAL_CONTROL_REQUEST_STATUSES,
    TERMINAL_JOB_STATUSES,
    CheckpointKind,
    CheckpointRow,
    CheckpointStatus,
    ControlAction,
    ControlRequestRow,
    ControlRequestStatus,
    JobAttemptRow,
    JobRow,
    JobStatus,
    SharedStateRow,
    as_utc,
    utcnow,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Folder holding ``env.py`` and ``versions/``.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: How long a SQLite connection waits for another writer before "database is locked".
SQLITE_BUSY_TIMEOUT_S = 30.0
#: Attempts of a transaction that fails with a transient error (lock, serialization, dropped
#: connection), with exponential backoff starting at ``RETRY_BASE_DELAY_S``.
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 0.05
#: Minimum length of a job id prefix accepted by :meth:`MetadataStore.resolve_job`.
MIN_JOB_ID_PREFIX = 4

_SQLITE_BEGIN_OPTION = "ckpt_sqlite_begin"
_PG_MIGRATION_LOCK_KEY = 0x636B7074  # "ckpt": advisory lock serializing schema upgrades
_ALEMBIC_VERSION_TABLE = "alembic_version"
_IN_CHUNK = 500  # bound IN (...) lists (SQLite's variable limit)
_alembic_lock = threading.Lock()  # alembic's `context` / `op` proxies are process globals


#: job states in which a job may still run (the rest are terminal)
ACTIVE_JOB_STATUSES = ("CREATED", "RUNNING", "RESTARTING")
#: seconds without a heartbeat after which an active job is LOST (env overrides)
HEARTBEAT_TIMEOUT_ENV = "CKPT_HEARTBEAT_TIMEOUT_S"
DEFAULT_HEARTBEAT_TIMEOUT_S = 60.0


def heartbeat_timeout() -> float:
    """The heartbeat timeout in seconds (``$CKPT_HEARTBEAT_TIMEOUT_S``, default 60)."""
    return float(os.environ.get(HEARTBEAT_TIMEOUT_ENV, DEFAULT_HEARTBEAT_TIMEOUT_S))


class MetadataSchemaError(EngineError):
    """The metadata DB schema cannot be used by this version of the package."""


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


# -- engine and schema -----------------------------------------------------------------------


def to_sqlalchemy_url(url_or_path: str) -> str:
    """Return a SQLAlchemy URL: URLs pass unchanged, a filesystem path becomes an absolute
    ``sqlite:///`` URL (``~`` expanded), ``:memory:`` the in-memory SQLite URL."""
    if "://" in url_or_path:
        return url_or_path
    if url_or_path == ":memory:":
        return "sqlite://"
    if not url_or_path:
        raise ValueError("empty metadata DB URL: pass a SQLAlchemy URL or a SQLite file path")
    return "sqlite:///" + os.path.abspath(os.path.expanduser(url_or_path))


def _is_sqlite_memory(database: str | None, query: dict[str, Any]) -> bool:
    return not database or database == ":memory:" or "mode=memory" in database or (
        query.get("mode") == "memory"
    )


def configure_sqlite_engine(engine: Engine, *, wal: bool = True) -> None:
    """Install the SQLite connection hooks: busy timeout, WAL, foreign keys, and BEGIN
    emitted by SQLAlchemy (``BEGIN IMMEDIATE`` when the execution option asks for it).

    Also usable on ``async_engine.sync_engine`` for an aiosqlite engine.
    """
    busy_ms = int(SQLITE_BUSY_TIMEOUT_S * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # sqlite3 must not emit its own BEGIN: the "begin" hook below does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def create_metadata_engine(url: str) -> Engine:
    """Create the engine of a metadata DB (URL or SQLite path), with the SQLite hooks."""
    sa_url = make_url(to_sqlalchemy_url(url))
    if sa_url.get_backend_name() != "sqlite":
        return create_engine(sa_url, pool_pre_ping=True)
    if _is_sqlite_memory(sa_url.database, dict(sa_url.query)):
        engine = create_engine(
            sa_url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
        configure_sqlite_engine(engine, wal=False)
        return engine
    if sa_url.database and not sa_url.database.startswith("file:"):
        Path(sa_url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(sa_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
    configure_sqlite_engine(engine)
    return engine


def _require_existing_sqlite_file(url: str) -> None:
    """A client that must not create a DB (``migrate=False``) refuses a SQLite URL whose
    file does not exist: opening it would silently create a new, empty DB (a typo in a
    path then looks like "no such job")."""
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite" or _is_sqlite_memory(sa_url.database,
                                                                     dict(sa_url.query)):
        return
    database = sa_url.database or ""
    if database.startswith("file:"):
        database = database[len("file:"):].split("?", 1)[0]
    if not Path(database).expanduser().is_file():
        raise MetadataSchemaError(
            f"metadata DB {_redacted(url)}: SQLite file {database} does not exist; check the "
            f"path, or create the DB with `ckpt db upgrade --db {_redacted(url)}`")


def _write_engine(engine: Engine) -> Engine:
    """The same engine whose transactions take the write lock up front on SQLite."""
    return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "IMMEDIATE"})


_extracted_migrations: Path | None = None


def _migrations_dir() -> Path:
    """The Alembic scripts directory. When this package is imported from a zip archive
    (``spark-submit --py-files``, see ``engine/packaging.py``) Alembic cannot read scripts
    inside it: they are extracted once per process to a temporary directory."""
    global _extracted_migrations
    if MIGRATIONS_DIR.is_dir():
        return MIGRATIONS_DIR
    if _extracted_migrations is None:
        import tempfile
        import zipfile

        archive, _, inner = str(MIGRATIONS_DIR).partition(".zip" + os.sep)
        if not inner:
            raise MetadataSchemaError(f"metadata DB migrations not found at {MIGRATIONS_DIR}")
        target = Path(tempfile.mkdtemp(prefix="ckpt-migrations-"))
        prefix = inner.replace(os.sep, "/") + "/"
        with zipfile.ZipFile(archive + ".zip") as zf:
            for name in zf.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    dest = target / name[len(prefix):]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(zf.read(name))
        _extracted_migrations = target
    return _extracted_migrations


def alembic_config(url: str) -> Config:
    """An Alembic configuration for the metadata DB at ``url``, built without ``alembic.ini``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    cfg.set_main_option("sqlalchemy.url", to_sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def _redacted(engine_or_url: Engine | str) -> str:
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else make_url(engine_or_url)
    return url.render_as_string(hide_password=True)


def _check_schema(engine: Engine) -> None:
    """Raise :class:`MetadataSchemaError` unless the schema is at the newest revision."""
    head = ScriptDirectory.from_config(
        alembic_config(engine.url.render_as_string(hide_password=False))).get_current_head()
    with engine.connect() as conn:
        current = None
        if inspect(conn).has_table(_ALEMBIC_VERSION_TABLE):
            current = conn.execute(text(f"SELECT version_num FROM {_ALEMBIC_VERSION_TABLE}")).scalar()
    if current != head:
        raise MetadataSchemaError(
            f"metadata DB {_redacted(engine)} is at schema revision {current or 'none (empty)'}, "
            f"this client needs {head!r} and does not migrate (migrate=False); run "
            f"`ckpt db upgrade --db {_redacted(engine)}` or let a job create the schema")


def _upgrade_engine(engine: Engine) -> None:
    """Bring the schema of ``engine``'s DB to the newest revision. Idempotent; concurrent
    callers (threads or processes) serialize on the DB's write lock."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    script = ScriptDirectory.from_config(cfg)
    head = script.get_current_head()
    with engine.connect() as conn:  # fast path: no write lock, no alembic context
        current = None
        if inspect(conn).has_table(_ALEMBIC_VERSION_TABLE):
            current = conn.execute(text(f"SELECT version_num FROM {_ALEMBIC_VERSION_TABLE}")).scalar()
    if current == head:
        return
    with _alembic_lock, _write_engine(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK_KEY})
        current = MigrationContext.configure(conn).get_current_revision()
        if current == head:
            return  # another process upgraded while we waited for the lock
        if current is not None:
            try:
                script.get_revision(current)
            except CommandError as exc:
                raise MetadataSchemaError(
                    f"metadata DB {_redacted(engine)} is at schema revision {current!r}, which "
                    f"this version of airflow-checkpoint-provider does not know (newest: "
                    f"{head!r}); upgrade the package"
                ) from exc
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    log.info("Upgraded metadata DB %s schema from %s to %s", _redacted(engine),
             current or "empty", head)


def upgrade_database(url: str) -> None:
    """Create or upgrade the metadata DB schema at ``url`` (``ckpt db upgrade``)."""
    engine = create_metadata_engine(url)
    try:
        _retry(lambda: _upgrade_engine(engine), what="schema upgrade")
    finally:
        engine.dispose()


# -- retries ---------------------------------------------------------------------------------

_TRANSIENT_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock detected
_TRANSIENT_SQLITE_MESSAGES = ("database is locked", "database table is locked", "database is busy")


def _is_transient(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    message = str(orig).lower()
    if any(m in message for m in _TRANSIENT_SQLITE_MESSAGES):
        return True
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code in _TRANSIENT_SQLSTATES


def _retry(fn: Callable[[], T], *, what: str) -> T:
    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            return fn()
        except DBAPIError as exc:
            if attempt == RETRY_ATTEMPTS or not _is_transient(exc):
                raise
            delay = RETRY_BASE_DELAY_S * 2 ** (attempt - 1) * (1 + random.random())
            log.warning("Metadata DB busy during %s (attempt %d of %d): %s; retrying in %.2f s",
                        what, attempt, RETRY_ATTEMPTS, exc.orig, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


# -- validation ------------------------------------------------------------------------------


def _choice(enum_type: type[T], value: str, what: str) -> str:
    try:
        return str(enum_type(value))  # type: ignore[call-arg]
    except ValueError:
        allowed = ", ".join(str(m) for m in enum_type)  # type: ignore[attr-defined]
        raise ValueError(f"unknown {what} {value!r}; expected one of {allowed}") from None


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), _IN_CHUNK):
        yield items[i : i + _IN_CHUNK]


# -- the store -------------------------------------------------------------------------------


class MetadataStore:
    """Read and write the metadata DB (see :mod:`.models` for the tables and states).

    Thread-safe: every call runs in its own transaction on a pooled connection. Several
    processes may open the same DB; on SQLite writers queue on the busy timeout.

    :param url: SQLAlchemy URL (``sqlite:////abs/ckpt.db``, ``postgresql+psycopg://...``) or
        a SQLite file path; the SQLite file's parent directory is created.
    :param migrate: create or upgrade the schema to the newest revision on open. With
        ``False`` (read-only clients such as Airflow workers: no DDL), the schema must already
        be at the newest revision, else :class:`MetadataSchemaError` says to run
        ``ckpt db upgrade``.
    """

    url: str

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = to_sqlalchemy_url(url)
        #: the URL with its password hidden: the only form that may be logged or printed
        self.safe_url = _redacted(self.url)
        if not migrate:
            _require_existing_sqlite_file(self.url)
        self._engine = create_metadata_engine(self.url)
        self._read_sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(_write_engine(self._engine), expire_on_commit=False)
        try:
            if migrate:
                _retry(lambda: _upgrade_engine(self._engine), what="schema upgrade")
            else:
                _retry(lambda: _check_schema(self._engine), what="schema check")
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"MetadataStore({_redacted(self._engine)!r})"

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The underlying engine (for ad-hoc queries; prefer the methods)."""
        return self._engine

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def _read(self, fn: Callable[[Session], T], what: str) -> T:
        def run() -> T:
            with self._read_sessions.begin() as session:
                return fn(session)

        return _retry(run, what=what)

    def _write(self, fn: Callable[[Session], T], what: str) -> T:
        def run() -> T:
            with self._write_sessions.begin() as session:
                return fn(session)

        return _retry(run, what=what)

    @staticmethod
    def _job_row(session: Session, job_id: str) -> JobRow:
        row = session.get(JobRow, job_id)
        if row is None:
            raise LookupError(f"no job with id {job_id!r}")
        return row

    # -- jobs -------------------------------------------------------------------------------

    def _mark_lost(self, session: Session, job_name: str | None = None,
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
            if last >= cutoff:
                continue
            row.status = JobStatus.LOST.value
            row.failure_reason = (f"no heartbeat since {last:%Y-%m-%d %H:%M:%S} UTC (more than "
                                  f"{timeout:.0f} s): the job's driver is presumed dead")
            row.updated_at = now
            session.execute(
                update(ControlRequestRow)
                .where(ControlRequestRow.job_id == row.job_id,
                       ControlRequestRow.status.not_in(list(TERMINAL_CONTROL_REQUEST_STATUSES)))
                .values(status=ControlRequestStatus.FAILED.value, updated_at=now,
                        error=f"job {row.job_name} ({row.job_id}) is LOST: {row.failure_reason}")
                .execution_options(synchronize_session=False))
            lost.append(row.job_id)
        return lost

    def mark_lost_jobs(self, job_name: str | None = None, *,
                       timeout: float | None = None) -> list[str]:
        """Declare active jobs without a recent heartbeat LOST (see :class:`JobStatus`);
        returns their ids."""
        lost = self._write(lambda s: self._mark_lost(s, job_name, timeout), "mark_lost_jobs")
        for job_id in lost:
            log.warning("Job %s has no recent heartbeat: marked LOST", job_id)
        return lost

    def create_job(self, *, job_id: str, job_name: str, parallelism: int,
                   version: str | None = None, restored_from: str | None = None,
                   spark_app_id: str | None = None, exclusive_name: bool = False) -> JobRecord:
        """Insert a job in status CREATED, attempt 0. Raises :class:`JobIdInUseError` (a
        ``ValueError``) if the id exists. ``exclusive_name``: one live job per name -- jobs
        of this name without a recent heartbeat are marked LOST first, and a live one makes
        this raise :class:`JobNameInUseError` naming it (checked in the same transaction)."""

        def fn(session: Session) -> JobRecord:
            existing = session.get(JobRow, job_id)
            if existing is not None:
                raise JobIdInUseError(
                    f"job id {job_id!r} already exists (job {existing.job_name}, "
                    f"{existing.status}); pick another id or omit --job-id")
            if exclusive_name:
                self._mark_lost(session, job_name)
                live = session.scalars(select(JobRow).where(
                    JobRow.job_name == job_name,
                    JobRow.status.in_(ACTIVE_JOB_STATUSES))).first()
                if live is not None:
                    raise JobNameInUseError(
                        f"job name {job_name!r} is in use by live job {live.job_id} "
                        f"({live.status}); stop or cancel it first (ckpt stop/cancel "
                        f"{live.job_id}), or wait until it has had no heartbeat for "
                        f"{heartbeat_timeout():.0f} s")
            now = utcnow()
            row = JobRow(job_id=job_id, job_name=job_name, version=version,
                         status=JobStatus.CREATED.value, restored_from=restored_from,
                         spark_app_id=spark_app_id, parallelism=parallelism, attempt=0,
                         failure_reason=None, heartbeat_at=None, created_at=now,
                         updated_at=now)
            session.add(row)
            session.flush()
            return JobRecord.from_row(row)

        record = self._write(fn, "create_job")
        log.info("Created job %s (%s), parallelism %d%s", job_name, job_id, parallelism,
                 f", restored from {restored_from}" if restored_from else "")
        return record

    def set_job_status(self, job_id: str, status: str, *,
                       failure_reason: str | None = None) -> None:
        """Set the job's status and ``failure_reason`` (``None`` clears it: the reason always
        describes the current status; ``job_attempts`` keeps every attempt's reason)."""
        status = _choice(JobStatus, status, "job status")

        def fn(session: Session) -> str:
            row = self._job_row(session, job_id)
            row.status = status
            row.failure_reason = failure_reason
            row.updated_at = utcnow()
            return row.job_name

        name = self._write(fn, "set_job_status")
        log.info("Job %s (%s) is %s%s", name, job_id, status,
                 f": {failure_reason}" if failure_reason else "")

    def set_spark_app_id(self, job_id: str, spark_app_id: str) -> None:
        """Record the Spark application id once the driver knows it."""

        def fn(session: Session) -> None:
            row = self._job_row(session, job_id)
            row.spark_app_id = spark_app_id
            row.updated_at = utcnow()

        self._write(fn, "set_spark_app_id")

    def heartbeat(self, job_id: str) -> str:
        """Refresh ``jobs.heartbeat_at`` (only that column) unless the job was declared LOST
        meanwhile; returns the job's status (a driver whose job is LOST must stop)."""

        def fn(session: Session) -> str:
            result = session.execute(
                update(JobRow).where(JobRow.job_id == job_id,
                                     JobRow.status != JobStatus.LOST.value)
                .values(heartbeat_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                row = session.get(JobRow, job_id)
                if row is None:
                    raise LookupError(f"no job with id {job_id!r}")
                return row.status
            return JobStatus.RUNNING.value

        return self._write(fn, "heartbeat")

    def get_job(self, job_id: str) -> JobRecord | None:
        def fn(session: Session) -> JobRecord | None:
            row = session.get(JobRow, job_id)
            return None if row is None else JobRecord.from_row(row)

        return self._read(fn, "get_job")

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

        return self._read(fn, "resolve_job")

    def list_jobs(self, job_name: str | None = None) -> list[JobRecord]:
        """Jobs, newest first, optionally only those named ``job_name``."""

        def fn(session: Session) -> list[JobRecord]:
            query = select(JobRow)
            if job_name is not None:
                query = query.where(JobRow.job_name == job_name)
            query = query.order_by(JobRow.created_at.desc(), JobRow.job_id.desc())
            return [JobRecord.from_row(r) for r in session.scalars(query)]

        return self._read(fn, "list_jobs")

    # -- attempts ---------------------------------------------------------------------------

    def start_attempt(self, job_id: str, attempt: int, *, restored_checkpoint_id: int | None,
                      restored_from: str | None) -> None:
        """Record the start of attempt ``attempt`` (0 first) and make it the job's current one."""

        def fn(session: Session) -> None:
            job = self._job_row(session, job_id)
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

        self._write(fn, "start_attempt")
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

        self._write(fn, "end_attempt")

    def set_attempt_placement(self, job_id: str, attempt: int, placement: list[dict]) -> None:
        """Record where each slot of an attempt runs (host, pid, Spark executor)."""

        def fn(session: Session) -> None:
            row = session.get(JobAttemptRow, (job_id, attempt))
            if row is None:
                raise LookupError(f"job {job_id!r} has no attempt {attempt}")
            row.placement = [dict(p) for p in placement]

        self._write(fn, "set_attempt_placement")

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """The job's attempts, oldest first."""

        def fn(session: Session) -> list[AttemptRecord]:
            rows = session.scalars(
                select(JobAttemptRow).where(JobAttemptRow.job_id == job_id)
                .order_by(JobAttemptRow.attempt)
            )
            return [AttemptRecord.from_row(r) for r in rows]

        return self._read(fn, "list_attempts")

    # -- checkpoints ------------------------------------------------------------------------

    def add_pending_checkpoint(self, job_id: str, checkpoint_id: int, *, kind: str,
                               trigger_time: datetime, location: str,
                               is_final: bool = False) -> None:
        """Record a triggered checkpoint or savepoint in status PENDING.

        :param is_final: the savepoint of a stop-with-savepoint (the job ends after it).
        """
        kind = _choice(CheckpointKind, kind, "checkpoint kind")

        def fn(session: Session) -> None:
            self._job_row(session, job_id)
            exists = session.scalar(
                select(CheckpointRow.id).where(CheckpointRow.job_id == job_id,
                                               CheckpointRow.checkpoint_id == checkpoint_id)
            )
            if exists is not None:
                raise ValueError(f"checkpoint {checkpoint_id} of job {job_id!r} already exists")
            session.add(CheckpointRow(
                job_id=job_id, checkpoint_id=checkpoint_id, kind=kind,
                status=CheckpointStatus.PENDING.value, is_final=is_final,
                trigger_time=trigger_time, location=location))

        self._write(fn, "add_pending_checkpoint")
        log.debug("Recorded pending %s %d of job %s at %s", kind.lower(), checkpoint_id, job_id,
                  location)

    def _checkpoint_row(self, session: Session, job_id: str, checkpoint_id: int) -> CheckpointRow:
        row = session.scalars(
            select(CheckpointRow).where(CheckpointRow.job_id == job_id,
                                        CheckpointRow.checkpoint_id == checkpoint_id)
        ).first()
        if row is None:
            raise LookupError(f"job {job_id!r} has no checkpoint {checkpoint_id}")
        return row

    def complete_checkpoint(self, job_id: str, checkpoint_id: int, *, complete_time: datetime,
                            duration_ms: int, state_size: int, checkpointed_size: int,
                            task_stats: list[dict]) -> None:
        """Mark a pending checkpoint COMPLETED with its statistics: it is now restorable."""

        def fn(session: Session) -> None:
            row = self._checkpoint_row(session, job_id, checkpoint_id)
            if row.status != CheckpointStatus.PENDING:
                log.warning("Completing %s %d of job %s, which is %s", row.kind.lower(),
                            checkpoint_id, job_id, row.status)
            row.status = CheckpointStatus.COMPLETED.value
            row.complete_time = complete_time
            row.duration_ms = duration_ms
            row.state_size = state_size
            row.checkpointed_size = checkpointed_size
            row.task_stats = list(task_stats)
            row.failure_reason = None

        self._write(fn, "complete_checkpoint")
        log.debug("Recorded completed checkpoint %d of job %s", checkpoint_id, job_id)

    def fail_checkpoint(self, job_id: str, checkpoint_id: int, *, reason: str,
                        status: str = "FAILED") -> None:
        """Mark a checkpoint FAILED (or another end state, e.g. DISCARDED) with the reason."""
        status = _choice(CheckpointStatus, status, "checkpoint status")

        def fn(session: Session) -> None:
            row = self._checkpoint_row(session, job_id, checkpoint_id)
            row.status = status
            row.failure_reason = reason

        self._write(fn, "fail_checkpoint")
        log.debug("Recorded checkpoint %d of job %s as %s: %s", checkpoint_id, job_id, status,
                  reason)

    def set_checkpoint_status(self, job_id: str, checkpoint_ids: list[int], status: str) -> None:
        """Set the status of several checkpoints of a job (e.g. SUBSUMED, DISCARDED)."""
        status = _choice(CheckpointStatus, status, "checkpoint status")
        ids = list(checkpoint_ids)
        if not ids:
            return

        def fn(session: Session) -> None:
            for chunk in _chunks(ids):
                session.execute(
                    update(CheckpointRow)
                    .where(CheckpointRow.job_id == job_id,
                           CheckpointRow.checkpoint_id.in_(chunk))
                    .values(status=status)
                    .execution_options(synchronize_session=False)
                )

        self._write(fn, "set_checkpoint_status")

    def checkpoint_at(self, location: str) -> CheckpointRecord | None:
        """The checkpoint or savepoint row whose ``location`` is exactly ``location``."""

        def fn(session: Session) -> CheckpointRecord | None:
            row = session.scalars(select(CheckpointRow).where(
                CheckpointRow.location == location).limit(1)).first()
            return None if row is None else CheckpointRecord.from_row(row)

        return self._read(fn, "checkpoint_at")

    def jobs_restored_from_job(self, job_id: str) -> list[JobRecord]:
        """Jobs whose ``restored_from`` is one of ``job_id``'s checkpoints or savepoints."""

        def fn(session: Session) -> list[JobRecord]:
            locations = select(CheckpointRow.location).where(CheckpointRow.job_id == job_id)
            rows = session.scalars(select(JobRow).where(JobRow.restored_from.in_(locations))
                                   .order_by(JobRow.created_at, JobRow.job_id))
            return [JobRecord.from_row(r) for r in rows]

        return self._read(fn, "jobs_restored_from_job")

    def prune_checkpoint_history(self, job_id: str, keep: int) -> int:
        """Delete the job's SUBSUMED and FAILED checkpoint rows whose id is not among the
        newest ``keep`` checkpoint ids; savepoints and other statuses stay. Returns how many
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
                       CheckpointRow.status.in_([CheckpointStatus.SUBSUMED.value,
                                                 CheckpointStatus.FAILED.value]),
                       CheckpointRow.checkpoint_id <= newest - keep)
                .execution_options(synchronize_session=False))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

        count = self._write(fn, "prune_checkpoint_history")
        if count:
            log.info("Pruned %d old checkpoint rows of job %s (history %d)", count, job_id, keep)
        return count

    def get_checkpoint(self, job_id: str, checkpoint_id: int) -> CheckpointRecord | None:
        def fn(session: Session) -> CheckpointRecord | None:
            row = session.scalars(
                select(CheckpointRow).where(CheckpointRow.job_id == job_id,
                                            CheckpointRow.checkpoint_id == checkpoint_id)
            ).first()
            return None if row is None else CheckpointRecord.from_row(row)

        return self._read(fn, "get_checkpoint")

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

        return self._read(fn, "list_checkpoints")

    def latest_completed_checkpoint(self, *, job_id: str | None = None,
                                    job_name: str | None = None,
                                    kind: str | None = "CHECKPOINT") -> CheckpointRecord | None:
        """The newest COMPLETED checkpoint (by ``complete_time``, then ``checkpoint_id``) of
        the job ``job_id`` or of every job named ``job_name``; ``kind=None`` for any kind."""
        if job_id is None and job_name is None:
            raise ValueError("latest_completed_checkpoint needs job_id or job_name")
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
                               CheckpointRow.checkpoint_id.desc()).limit(1)

        def fn(session: Session) -> CheckpointRecord | None:
            row = session.scalars(query).first()
            return None if row is None else CheckpointRecord.from_row(row)

        return self._read(fn, "latest_completed_checkpoint")

    def max_checkpoint_id(self, job_id: str) -> int:
        """The highest checkpoint id recorded for the job, whatever its state; 0 if none."""

        def fn(session: Session) -> int:
            value = session.scalar(
                select(func.max(CheckpointRow.checkpoint_id))
                .where(CheckpointRow.job_id == job_id)
            )
            return int(value or 0)

        return self._read(fn, "max_checkpoint_id")

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

        self._write(fn, "register_shared_state")

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

        return self._read(fn, "unreferenced_shared_state")

    def delete_shared_state(self, job_id: str, file_keys: list[str]) -> None:
        """Forget shared files (after they were deleted from checkpoint storage)."""
        keys = list(file_keys)
        if not keys:
            return

        def fn(session: Session) -> None:
            for chunk in _chunks(keys):
                session.execute(
                    SharedStateRow.__table__.delete().where(
                        SharedStateRow.job_id == job_id, SharedStateRow.file_key.in_(chunk))
                )

        self._write(fn, "delete_shared_state")

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
                    return known.request_id, self._job_row(session, job_id).job_name, False
            job = self._job_row(session, job_id)
            self._mark_lost(session, job.job_name)  # a request to a dead driver fails at once
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

        found_id, name, created = self._write(fn, "submit_control_request")
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

        return self._read(fn, "find_control_request")

    def claim_control_requests(self, job_id: str) -> list[ControlRequestRecord]:
        """Move the job's PENDING requests to IN_PROGRESS and return them, oldest first.

        Each request is claimed by exactly one caller, even with concurrent claimers: every
        row is claimed with a conditional ``UPDATE ... WHERE status = 'PENDING'`` and only
        rows whose update count is 1 are kept.
        """
        pending_query = (
            select(ControlRequestRow.request_id)
            .where(ControlRequestRow.job_id == job_id,
                   ControlRequestRow.status == ControlRequestStatus.PENDING.value)
            .order_by(ControlRequestRow.created_at, ControlRequestRow.request_id)
        )
        # Cheap read first: most polls find nothing and need no write lock.
        if not self._read(lambda s: s.scalars(pending_query.limit(1)).first(), "poll"):
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

        records = self._write(fn, "claim_control_requests")
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

        if self._write(fn, "finish_control_request"):
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

        count = self._write(fn, "abort_control_requests")
        if count:
            log.info("Failed %d open control requests of job %s: %s", count, job_id, error)
        return count

    def get_control_request(self, request_id: str) -> ControlRequestRecord | None:
        def fn(session: Session) -> ControlRequestRecord | None:
            row = session.get(ControlRequestRow, request_id)
            return None if row is None else ControlRequestRecord.from_row(row)

        return self._read(fn, "get_control_request")

    def list_control_requests(self, job_id: str) -> list[ControlRequestRecord]:
        """The job's control requests, oldest first."""

        def fn(session: Session) -> list[ControlRequestRecord]:
            rows = session.scalars(
                select(ControlRequestRow).where(ControlRequestRow.job_id == job_id)
                .order_by(ControlRequestRow.created_at, ControlRequestRow.request_id)
            )
            return [ControlRequestRecord.from_row(r) for r in rows]

        return self._read(fn, "list_control_requests")


__all__ = [
    "MIGRATIONS_DIR",
    "AttemptRecord",
    "CheckpointRecord",
    "ControlRequestRecord",
    "JobRecord",
    "MetadataSchemaError",
    "MetadataStore",
    "alembic_config",
    "configure_sqlite_engine",
    "create_metadata_engine",
    "to_sqlalchemy_url",
    "upgrade_database",
]
