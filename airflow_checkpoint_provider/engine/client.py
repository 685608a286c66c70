"""The engine's public surface for clients that control jobs from outside: the Airflow
provider, scripts, dashboards.

A client reads and writes the metadata DB (jobs, attempts, checkpoints, control requests)
and launches jobs; it never talks to a job's driver. Everything a client needs is importable
from here, so the engine's internal modules can move without breaking the provider: the
import contract test (``tests/unit/architecture/test_import_contract.py``) keeps the provider on this module.

* the metadata store and its records: :class:`MetadataStore`, :class:`JobRecord`,
  :class:`AttemptRecord`, :class:`CheckpointRecord`, :class:`ControlRequestRecord`, the
  status groups, :func:`upgrade_database` (``ckpt db upgrade``), :class:`MetadataSchemaError`;
* standbys (``restore="standby:JOB"``): :class:`StandbyRecord` / :class:`StandbyStatus`
  (``store.get_standby(job_id)``: ``READY`` once the standby only waits for the hand-over,
  ``store.request_standby_cancel(job_id)`` withdraws it) and :class:`StandbyCanceled`;
* launching: :data:`LAUNCH_SCRIPT` (the spark-submit entry point), :data:`METADATA_URL_ENV`,
  :func:`code_archives` / :data:`SHIP_CODE_ENV` (``--py-files`` for executors without the
  project);
* savepoints: :func:`dispose_savepoint`, :func:`apply_savepoint_retention` (returns a
  :class:`RetentionReport`), :func:`list_savepoints`, :func:`pin_savepoint` / :func:`pin_checkpoint` /
  :func:`unpin_savepoint` / :func:`active_pins`, :func:`absolute_location` (a directory as
  jobs will resolve it);
* stability: :class:`StabilityCriteria`, :func:`assess_stability`, :func:`early_verdict`
  (the gate of blue-green deployments and upgrades, :mod:`.stability`);
* fencing: :func:`is_fenced_snapshot` (a snapshot of a blue-green validation run, whose
  output was never published, :mod:`.runners.jobmaster.fencing`);
* names: :func:`validate_job_name`, :func:`validate_job_id` (the one rule for names that
  become paths, :mod:`.names`);
* reports and lineage: :class:`ReportData` / :func:`render_report_html` (the ``ckpt report``
  page; imported on first use, it needs matplotlib), :func:`upgrade_chain`,
  :func:`pipeline_datasets` (the datasets a pipeline reads and writes, for OpenLineage);
* change data capture: :func:`drop_cdc_slot` (a PostgreSQL CDC job's replication slot
  and publication), :func:`copy_cdc_slot` (``ckpt cdc copy-slot``: a slot for the green job
  of a blue-green upgrade), :func:`cdc_object_name` (their default name for a job);
* Spark: :func:`spark_session` (the session ``Pipeline.run("spark", spark=...)`` takes, set
  up for barrier jobs, as ``ckpt run --runner spark`` makes it);
* Kafka: :func:`checkpoint_consumer_lag` (a completed checkpoint's consumer lag per
  topic-partition, a :class:`ConsumerLag`; the ``KafkaCaughtUpSensor``'s measure);
* settings: :data:`SETTINGS` (every ``CKPT_*`` variable the engine reads, each a
  :class:`Setting` read at the time of use, :mod:`.settings`), the ones the provider reads
  itself (:data:`SNAPSHOT_HMAC_KEY`, :data:`ALLOWED_SAVEPOINT_ROOTS`) and the shared
  defaults (:data:`DEFAULT_HEARTBEAT_TIMEOUT_S`, :func:`heartbeat_timeout`,
  :data:`CLIENT_POLL_SECONDS`);
* errors: :class:`EngineError` and its subclasses in :mod:`.errors`.
"""

from __future__ import annotations

import os

from . import launch as _launch
from .catalog import (
    ACTIVE_JOB_STATUSES,
    TERMINAL_JOB_STATUSES,
    AttemptRecord,
    CheckpointRecord,
    CheckpointStatus,
    ControlRequestRecord,
    ControlRequestStatus,
    JobRecord,
    JobStatus,
    MetadataSchemaError,
    MetadataStore,
    StandbyCanceled,
    StandbyRecord,
    StandbyStatus,
    heartbeat_timeout,
    upgrade_database,
)
from .catalog.driver import driver_is_gone
from .connectors.kafka.lag import ConsumerLag, checkpoint_consumer_lag
from .connectors.postgres.cdc.slots import copy_slot as copy_cdc_slot
from .connectors.postgres.cdc.source import drop_slot as drop_cdc_slot
from .connectors.postgres.cdc.source import job_object_name as cdc_object_name
from .datastream.api import DEFAULT_METADATA_ENV as METADATA_URL_ENV
from .datastream.run_request import CheckpointOverrides, Restore, RestoreKind, RunRequest
from .errors import EngineError, InvalidNameError
from .fs.private import (
    SPARK_ENV_PREFIX,
    SPARK_REDACTION_REGEX,
    makedirs_private,
    open_private,
    user_temp_dir,
    write_private,
)
from .fs.storage import absolute_location, canonical_location
from .lifecycle import lineage as _lineage
from .lifecycle.lineage import upgrade_chain
from .lifecycle.savepoints import (
    RetentionReport,
    active_pins,
    apply_savepoint_retention,
    dispose_savepoint,
    list_savepoints,
    pin_checkpoint,
    pin_savepoint,
    unpin_savepoint,
)
from .lifecycle.stability import (
    StabilityCriteria,
    StabilityVerdict,
    assess_stability,
    early_verdict,
)
from .names import MAX_NAME_LENGTH, validate_job_id, validate_job_name
from .packaging import SHIP_CODE_ENV, code_archives
from .settings import (
    ALLOWED_SAVEPOINT_ROOTS,
    CLIENT_POLL_SECONDS,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    SETTINGS,
    SNAPSHOT_HMAC_KEY,
    Setting,
)


def __getattr__(name: str):
    """``ReportData`` and ``render_report_html`` load the report module (matplotlib) lazily."""
    if name in ("ReportData", "render_report_html"):
        from .extras import require

        require("report")
        from .lifecycle import report

        return report.ReportData if name == "ReportData" else report.render_html
    raise AttributeError(name)


def pipeline_datasets(pipeline) -> dict[str, list[dict[str, str]]]:
    """What a pipeline (a ``Pipeline``, or its ``module:function`` reference, loaded as
    ``ckpt run`` loads it) reads and writes: ``{"inputs": [...], "outputs": [...]}``
    (:func:`.lifecycle.lineage.pipeline_datasets`)."""
    if isinstance(pipeline, str):
        from .cli import load_pipeline

        pipeline = load_pipeline(pipeline)
    return _lineage.pipeline_datasets(pipeline)


def is_fenced_snapshot(location: str) -> bool:
    """Whether the checkpoint or savepoint at ``location`` was taken by a job with fenced
    sinks (``fence_sinks=True``): its data was never published, so it announces nothing."""
    from .runners.jobmaster.fencing import snapshot_is_fenced
    from .snapshot.codec import load_snapshot

    return snapshot_is_fenced(load_snapshot(location, check_hmac=False).metadata.operators)


def spark_session(master: str | None, app_name: str, *, extra_conf: dict | None = None):
    """A ``SparkSession`` for ``master`` set up for the engine's barrier jobs, to pass as
    ``Pipeline.run("spark", spark=session)`` (what ``ckpt run --runner spark`` and the
    spark-submit entry point make). ``None``: the master spark-submit (or
    ``spark-defaults.conf``) configured, else ``local[*]``; ``extra_conf``: further Spark
    settings. Settings the user configured are never overridden. Needs ``pyspark`` (the
    ``spark`` extra); see :func:`.runners.spark.session.session_for`."""
    from .runners.spark.session import session_for

    return session_for(master, app_name, extra_conf=extra_conf)


#: The engine's spark-submit entry point (a plain Python file; its arguments are ``ckpt run``'s).
LAUNCH_SCRIPT = os.path.abspath(_launch.__file__)

__all__ = [
    "StandbyCanceled",
    "StandbyRecord",
    "StandbyStatus",
    "ACTIVE_JOB_STATUSES",
    "ALLOWED_SAVEPOINT_ROOTS",
    "CLIENT_POLL_SECONDS",
    "DEFAULT_HEARTBEAT_TIMEOUT_S",
    "JobStatus",
    "LAUNCH_SCRIPT",
    "MAX_NAME_LENGTH",
    "METADATA_URL_ENV",
    "SETTINGS",
    "SHIP_CODE_ENV",
    "SNAPSHOT_HMAC_KEY",
    "SPARK_ENV_PREFIX",
    "SPARK_REDACTION_REGEX",
    "TERMINAL_JOB_STATUSES",
    "AttemptRecord",
    "CheckpointOverrides",
    "CheckpointRecord",
    "CheckpointStatus",
    "ConsumerLag",
    "ControlRequestRecord",
    "ControlRequestStatus",
    "EngineError",
    "InvalidNameError",
    "JobRecord",
    "MetadataSchemaError",
    "MetadataStore",
    "Restore",
    "RestoreKind",
    "RetentionReport",
    "RunRequest",
    "Setting",
    "StabilityCriteria",
    "StabilityVerdict",
    "absolute_location",
    "canonical_location",
    "checkpoint_consumer_lag",
    "active_pins",
    "apply_savepoint_retention",
    "assess_stability",
    "cdc_object_name",
    "code_archives",
    "copy_cdc_slot",
    "driver_is_gone",
    "drop_cdc_slot",
    "dispose_savepoint",
    "early_verdict",
    "heartbeat_timeout",
    "is_fenced_snapshot",
    "list_savepoints",
    "makedirs_private",
    "open_private",
    "pin_checkpoint",
    "pin_savepoint",
    "pipeline_datasets",
    "spark_session",
    "unpin_savepoint",
    "upgrade_chain",
    "upgrade_database",
    "user_temp_dir",
    "validate_job_id",
    "validate_job_name",
    "write_private",
]
