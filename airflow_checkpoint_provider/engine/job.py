"""What a runner needs to run a job, and what it returns: the seam between the pipeline API
(:mod:`.api`) and the runners, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import CheckpointConfig, RestartStrategy


@dataclass(frozen=True)
class JobConfig:
    """A job's settings, taken from its :class:`~.api.Pipeline` when it is run."""

    name: str
    max_parallelism: int
    checkpoint: CheckpointConfig
    restart_strategy: RestartStrategy
    metadata_url: str
    state_backend: str = "heap"
    incremental: bool = True
    version: str | None = None
    batch_size: int = 1024


@dataclass
class JobResult:
    """What :meth:`Pipeline.run` returns."""

    job_id: str
    job_name: str
    status: str
    checkpoints_completed: int
    checkpoints_failed: int
    restarts: int
    latest_checkpoint: str | None
    restored_from: str | None = None
    failure_reason: str | None = None
    metadata_url: str = ""
    extra: dict = field(default_factory=dict)
