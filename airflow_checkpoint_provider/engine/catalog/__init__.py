"""The catalog: the metadata DB shared by jobs, the ``ckpt`` CLI and Airflow.

:class:`MetadataStore` is the only code that writes the tables described in
:mod:`.models`. The job's coordinator records jobs, attempts, checkpoints and the
shared-state registry; Airflow and the ``ckpt`` CLI read them and submit control requests,
which the job master claims and finishes. Nobody needs network access to the Spark driver.

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

Modules: :mod:`.db` (engine, schema, retries), :mod:`.records`, :mod:`.base` (opening,
transactions), one mixin per table family (:mod:`.jobs`, :mod:`.checkpoints`,
:mod:`.control`, :mod:`.pins`, :mod:`.keys`, :mod:`.cdc_slots`) and :mod:`.models` (tables and status enums).
"""

from .cdc_slots import CdcSlotsMixin, SlotInUseError
from .checkpoints import CheckpointsMixin
from .control import ControlRequestsMixin
from .db import (
    MIGRATIONS_DIR,
    MetadataSchemaError,
    alembic_config,
    configure_sqlite_engine,
    create_metadata_engine,
    redacted_url,
    to_sqlalchemy_url,
    upgrade_database,
)
from .jobs import ACTIVE_JOB_STATUSES, heartbeat_timeout
from .keys import SnapshotKey, SnapshotKeyMixin
from .models import TERMINAL_JOB_STATUSES, JobStatus
from .pins import SavepointPinsMixin
from .records import (
    AttemptRecord,
    CheckpointRecord,
    ControlRequestRecord,
    JobRecord,
    SavepointPinRecord,
)


class MetadataStore(ControlRequestsMixin, CheckpointsMixin, SavepointPinsMixin,
                    SnapshotKeyMixin, CdcSlotsMixin):
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


__all__ = [
    "ACTIVE_JOB_STATUSES",
    "MIGRATIONS_DIR",
    "AttemptRecord",
    "CheckpointRecord",
    "ControlRequestRecord",
    "JobRecord",
    "JobStatus",
    "MetadataSchemaError",
    "MetadataStore",
    "SavepointPinRecord",
    "SlotInUseError",
    "SnapshotKey",
    "TERMINAL_JOB_STATUSES",
    "alembic_config",
    "configure_sqlite_engine",
    "create_metadata_engine",
    "heartbeat_timeout",
    "redacted_url",
    "to_sqlalchemy_url",
    "upgrade_database",
]
