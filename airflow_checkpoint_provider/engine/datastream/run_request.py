"""One request to run a job, the same from every starting point.

Airflow's ``SubmitCheckpointedJobOperator``, the ``ckpt run`` command and the spark-submit
entry point (:mod:`..launch`) all describe a run with a :class:`RunRequest`: the pipeline
reference, the job's name and id, what to restore (:class:`Restore`, a small tagged type
instead of one string with four meanings), the checkpoint options that override the
pipeline's (:class:`CheckpointOverrides`, in which ``interval_ms=0`` always means "no
periodic checkpoints"), fencing and the runner's options. It has one serialized form, the
arguments of ``ckpt run`` (:meth:`RunRequest.to_argv`), which ``ckpt run`` reads back into
an equal request (:func:`..cli.jobs.parse_run_argv`); :meth:`RunRequest.apply` turns it into the pipeline's
:class:`~..config.CheckpointConfig` and restart strategy, and :meth:`RunRequest.run_options`
into the keyword arguments of :meth:`~..datastream.api.Pipeline.run`.

The metadata DB URL is not part of a request: it may hold a password, and travels in the
environment (``$CKPT_METADATA_URL``) only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import CheckpointConfig, RestartStrategy
from ..errors import ConfigurationError
from ..plan.job import STANDBY_PREFIX, Restore, RestoreKind

if TYPE_CHECKING:
    from .api import Pipeline

@dataclass(frozen=True)
class CheckpointOverrides:
    """Checkpoint options that win over the pipeline's own; ``None`` keeps the pipeline's.

    :param interval_ms: periodic checkpoint interval; ``0``: no periodic checkpoints (the
        same meaning on the command line, in Airflow, here and in
        :class:`~..config.CheckpointConfig`, which stores it as ``None``).
    :param directory: checkpoint root (local path or ``s3://bucket/prefix``).
    :param savepoint_directory: default target of savepoints.
    """

    interval_ms: int | None = None
    directory: str | None = None
    savepoint_directory: str | None = None

    def __post_init__(self) -> None:
        if self.interval_ms is not None and (isinstance(self.interval_ms, bool)
                                             or not isinstance(self.interval_ms, int)
                                             or self.interval_ms < 0):
            raise ConfigurationError(f"checkpoint interval_ms {self.interval_ms!r} must be a "
                                     "whole number of milliseconds >= 0 (0: no periodic "
                                     "checkpoints)")

    def apply(self, config: CheckpointConfig) -> CheckpointConfig:
        """``config`` with these overrides."""
        changes: dict[str, Any] = {}
        if self.interval_ms is not None:
            changes["interval_ms"] = self.interval_ms  # 0: off, as in CheckpointConfig
        if self.directory:
            changes["directory"] = self.directory
        if self.savepoint_directory:
            changes["savepoint_directory"] = self.savepoint_directory
        return dataclasses.replace(config, **changes) if changes else config


@dataclass(frozen=True)
class RunRequest:
    """Everything that starts one job (see the module docstring).

    :param pipeline: ``module.path:function`` returning the :class:`~..datastream.api.Pipeline`.
    :param job_name: the job's name (default: the pipeline's).
    :param job_id: the job's id (default: a new uuid).
    :param restore: what the job starts from (a :class:`Restore` or its text form).
    :param restart: restart strategy spec (``none``, ``fixed:ATTEMPTS:DELAY_MS``, ...),
        ``None`` keeps the pipeline's.
    :param runner: ``local`` or ``spark``; ``master``: the Spark master (runner ``spark``).

    There is no ``parallelism`` field, by decision: the engine has no job-level parallelism
    to override. Each operator declares its own (``source(..., parallelism=2)``,
    ``process(..., parallelism=3)``; a chain's vertex takes its nodes'), so one number for a
    job would either be ignored or silently overwrite the pipeline's choices. A pipeline
    whose parallelism is an option reads it itself (the bundled examples read it from the
    job's environment, ``env_vars=`` in Airflow), and
    a restore at another parallelism redistributes the keyed state by key group.
    """

    pipeline: str
    job_name: str | None = None
    job_id: str | None = None
    restore: Restore = field(default_factory=Restore)
    allow_non_restored_state: bool = False
    trust_snapshot: bool = False
    fence_sinks: bool = False
    checkpoint: CheckpointOverrides = field(default_factory=CheckpointOverrides)
    restart: str | None = None
    runner: str = "local"
    master: str | None = None
    coordinator_port: int = 0
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.restore, Restore):
            object.__setattr__(self, "restore", Restore.parse(self.restore))
        if self.runner not in ("local", "spark"):
            raise ConfigurationError(f"runner must be 'local' or 'spark', not {self.runner!r}")
        if self.restart:
            RestartStrategy.parse(self.restart)  # a bad spec fails here, naming it

    def to_argv(self) -> list[str]:
        """The arguments of ``ckpt run`` for this request (the one serialized form; the
        metadata DB URL is never among them)."""
        argv = [self.pipeline]
        options: list[tuple[str, object]] = [
            ("--job-id", self.job_id), ("--job-name", self.job_name),
            ("--restore", self.restore.text),
            ("--checkpoint-dir", self.checkpoint.directory),
            ("--savepoint-dir", self.checkpoint.savepoint_directory),
            ("--interval-ms", self.checkpoint.interval_ms), ("--restart", self.restart),
            ("--runner", self.runner), ("--master", self.master),
            ("--coordinator-port", self.coordinator_port or None),
            ("--metrics-port", self.metrics_port)]
        for flag, value in options:
            if value is not None and value != "":
                argv += [flag, str(value)]
        for flag, on in (("--allow-non-restored-state", self.allow_non_restored_state),
                         ("--trust-snapshot", self.trust_snapshot),
                         ("--fence-sinks", self.fence_sinks)):
            if on:
                argv.append(flag)
        return argv

    def apply(self, pipeline: Pipeline, *, metadata_url: str | None = None) -> Pipeline:
        """``pipeline`` with this request's overrides (and the metadata DB URL, when given):
        its checkpoint config, restart strategy and name."""
        pipeline.checkpoint = self.checkpoint.apply(pipeline.checkpoint)
        if metadata_url:
            pipeline.metadata_url = metadata_url
        if self.restart:
            pipeline.restart_strategy = RestartStrategy.parse(self.restart)
        if self.job_name:
            pipeline.name = self.job_name
            pipeline._graph.name = self.job_name
        return pipeline

    def run_options(self) -> dict[str, Any]:
        """The keyword arguments of :meth:`Pipeline.run` (after ``runner``)."""
        options: dict[str, Any] = {
            "restore": self.restore, "job_id": self.job_id,
            "allow_non_restored_state": self.allow_non_restored_state,
            "trust_snapshot": self.trust_snapshot, "fence_sinks": self.fence_sinks,
            "coordinator_port": self.coordinator_port, "metrics_port": self.metrics_port}
        if self.runner == "spark":
            options["master"] = self.master
        return options


__all__ = ["STANDBY_PREFIX", "CheckpointOverrides", "Restore", "RestoreKind", "RunRequest"]
