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
transactions), one collaborator per table family (:mod:`.jobs`, :mod:`.checkpoints`,
:mod:`.control_requests`, :mod:`.pins`, :mod:`.snapshot_keys`, :mod:`.cdc_slots`, :mod:`.standbys`; reachable as
``store.jobs``, ``store.checkpoints``, ... and through the store's own methods) and
:mod:`.models` (tables and status enums). Before issue 53 :mod:`.control_requests` was
``catalog.control`` and :mod:`.snapshot_keys` ``catalog.keys``: the old paths still import,
with a :class:`DeprecationWarning` naming the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..extras import alias_moved_modules
from .base import CatalogDB
from .cdc_slots import CdcSlots, SlotInUseError
from .checkpoints import Checkpoints
from .control_requests import ControlRequests
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
from .jobs import ACTIVE_JOB_STATUSES, Jobs, heartbeat_timeout
from .models import TERMINAL_JOB_STATUSES, CheckpointStatus, ControlRequestStatus, JobStatus
from .pins import SavepointPins
from .records import (
    AttemptRecord,
    CheckpointRecord,
    ControlRequestRecord,
    JobRecord,
    SavepointPinRecord,
)
from .snapshot_keys import SnapshotKey, SnapshotKeys
from .standbys import StandbyCanceled, StandbyRecord, Standbys, StandbyStatus

#: old module name (in this package) -> its module now
MOVED = {"control": "control_requests", "keys": "snapshot_keys"}
alias_moved_modules(__name__, MOVED)

P = ParamSpec("P")
R = TypeVar("R")


def _via(part: Callable[[Any], Any], method: Callable[Concatenate[Any, P], R]
         ) -> Callable[Concatenate[Any, P], R]:
    """``method`` of the collaborator ``part(store)``, as a method of the store (typed
    like the collaborator's method)."""

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(part(self), *args, **kwargs)

    call.__name__, call.__qualname__, call.__doc__ = (method.__name__, method.__qualname__,
                                                      method.__doc__)
    return call


# the store's collaborators (attributes MetadataStore.__init__ sets)
_jobs, _checkpoints, _control = (attrgetter("jobs"), attrgetter("checkpoints"),
                                 attrgetter("control"))
_pins, _keys, _cdc_slots = attrgetter("pins"), attrgetter("keys"), attrgetter("cdc_slots")
_standbys = attrgetter("standbys")


class MetadataStore(CatalogDB):
    """Read and write the metadata DB (see :mod:`.models` for the tables and states).

    Thread-safe: every call runs in its own transaction on a pooled connection. Several
    processes may open the same DB; on SQLite writers queue on the busy timeout.

    Composed of one collaborator per table family (``jobs``, ``checkpoints``, ``control``,
    ``pins``, ``keys``, ``cdc_slots``, ``standbys``); their methods are the store's methods too.

    :param url: SQLAlchemy URL (``sqlite:////abs/ckpt.db``, ``postgresql+psycopg://...``) or
        a SQLite file path; the SQLite file's parent directory is created.
    :param migrate: create or upgrade the schema to the newest revision on open. With
        ``False`` (read-only clients such as Airflow workers: no DDL), the schema must already
        be at the newest revision, else :class:`MetadataSchemaError` says to run
        ``ckpt db upgrade``.
    """

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        super().__init__(url, migrate=migrate)
        self.jobs = Jobs(self)
        self.checkpoints = Checkpoints(self)
        self.control = ControlRequests(self, self.jobs)
        self.pins = SavepointPins(self)
        self.keys = SnapshotKeys(self)
        self.cdc_slots = CdcSlots(self)
        self.standbys = Standbys(self)

    # -- jobs and attempts (catalog/jobs.py)
    mark_lost_jobs = _via(_jobs, Jobs.mark_lost_jobs)
    create_job = _via(_jobs, Jobs.create_job)
    set_job_status = _via(_jobs, Jobs.set_job_status)
    set_job_restored_from = _via(_jobs, Jobs.set_job_restored_from)
    set_job_progress_stall = _via(_jobs, Jobs.set_job_progress_stall)
    reserve_job_owner = _via(_jobs, Jobs.reserve_job_owner)
    set_spark_app_id = _via(_jobs, Jobs.set_spark_app_id)
    heartbeat = _via(_jobs, Jobs.heartbeat)
    get_job = _via(_jobs, Jobs.get_job)
    resolve_job = _via(_jobs, Jobs.resolve_job)
    list_jobs = _via(_jobs, Jobs.list_jobs)
    start_attempt = _via(_jobs, Jobs.start_attempt)
    end_attempt = _via(_jobs, Jobs.end_attempt)
    set_attempt_placement = _via(_jobs, Jobs.set_attempt_placement)
    list_attempts = _via(_jobs, Jobs.list_attempts)

    # -- checkpoints and shared state (catalog/checkpoints.py)
    add_pending_checkpoint = _via(_checkpoints, Checkpoints.add_pending_checkpoint)
    complete_checkpoint = _via(_checkpoints, Checkpoints.complete_checkpoint)
    fail_checkpoint = _via(_checkpoints, Checkpoints.fail_checkpoint)
    set_checkpoint_status = _via(_checkpoints, Checkpoints.set_checkpoint_status)
    mark_checkpoint_files_deleted = _via(_checkpoints, Checkpoints.mark_checkpoint_files_deleted)
    checkpoint_at = _via(_checkpoints, Checkpoints.checkpoint_at)
    jobs_restored_from_job = _via(_checkpoints, Checkpoints.jobs_restored_from_job)
    prune_checkpoint_history = _via(_checkpoints, Checkpoints.prune_checkpoint_history)
    get_checkpoint = _via(_checkpoints, Checkpoints.get_checkpoint)
    list_checkpoints = _via(_checkpoints, Checkpoints.list_checkpoints)
    latest_completed_checkpoint = _via(_checkpoints, Checkpoints.latest_completed_checkpoint)
    completed_checkpoints = _via(_checkpoints, Checkpoints.completed_checkpoints)
    max_checkpoint_id = _via(_checkpoints, Checkpoints.max_checkpoint_id)
    register_shared_state = _via(_checkpoints, Checkpoints.register_shared_state)
    unreferenced_shared_state = _via(_checkpoints, Checkpoints.unreferenced_shared_state)
    delete_shared_state = _via(_checkpoints, Checkpoints.delete_shared_state)

    # -- control requests (catalog/control_requests.py)
    submit_control_request = _via(_control, ControlRequests.submit_control_request)
    find_control_request = _via(_control, ControlRequests.find_control_request)
    claim_control_requests = _via(_control, ControlRequests.claim_control_requests)
    finish_control_request = _via(_control, ControlRequests.finish_control_request)
    abort_control_requests = _via(_control, ControlRequests.abort_control_requests)
    get_control_request = _via(_control, ControlRequests.get_control_request)
    list_control_requests = _via(_control, ControlRequests.list_control_requests)

    # -- savepoint pins (catalog/pins.py)
    pin_savepoint = _via(_pins, SavepointPins.pin_savepoint)
    unpin_savepoints = _via(_pins, SavepointPins.unpin_savepoints)
    list_savepoint_pins = _via(_pins, SavepointPins.list_savepoint_pins)
    pinned_locations = _via(_pins, SavepointPins.pinned_locations)
    unreleased_checkpoints = _via(_pins, SavepointPins.unreleased_checkpoints)
    oldest_retained_checkpoint_id = _via(_pins, SavepointPins.oldest_retained_checkpoint_id)

    # -- the snapshot key (catalog/snapshot_keys.py)
    snapshot_key = _via(_keys, SnapshotKeys.snapshot_key)

    # -- CDC slot owners (catalog/cdc_slots.py)
    claim_cdc_slot = _via(_cdc_slots, CdcSlots.claim_cdc_slot)
    cdc_slot_owner = _via(_cdc_slots, CdcSlots.cdc_slot_owner)
    release_cdc_slot = _via(_cdc_slots, CdcSlots.release_cdc_slot)

    # -- standby jobs waiting for a hand-over (catalog/standbys.py)
    mark_standby_ready = _via(_standbys, Standbys.mark_standby_ready)
    end_standby = _via(_standbys, Standbys.end_standby)
    request_standby_cancel = _via(_standbys, Standbys.request_standby_cancel)
    get_standby = _via(_standbys, Standbys.get_standby)



__all__ = [
    "ACTIVE_JOB_STATUSES",
    "MIGRATIONS_DIR",
    "AttemptRecord",
    "CheckpointRecord",
    "CheckpointStatus",
    "ControlRequestRecord",
    "ControlRequestStatus",
    "JobRecord",
    "JobStatus",
    "MetadataSchemaError",
    "MetadataStore",
    "SavepointPinRecord",
    "SlotInUseError",
    "SnapshotKey",
    "StandbyCanceled",
    "StandbyRecord",
    "StandbyStatus",
    "TERMINAL_JOB_STATUSES",
    "alembic_config",
    "configure_sqlite_engine",
    "create_metadata_engine",
    "heartbeat_timeout",
    "redacted_url",
    "to_sqlalchemy_url",
    "upgrade_database",
]
