"""What a runner needs to run a job, and what it returns: the seam between the pipeline API
(:mod:`.api`) and the runners, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import CheckpointConfig, RestartStrategy

#: Arrow batches cost per batch (a few hundred microseconds of Python and Arrow calls per
#: operator), not per row: bigger ones amortize it. Measured on the aggregate job, int64 keys:
#: 65,536-row batches ~1.45x the throughput of 8,192-row ones. The task's mailbox holds at
#: most 8 batches, so what a barrier waits behind stays bounded.
DEFAULT_ARROW_BATCH_SIZE = 65536


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
    heap_incremental: bool = False
    version: str | None = None
    batch_size: int = 1024
    #: rows per read once a source emits Arrow batches (None: max(batch_size, 65536))
    arrow_batch_size: int | None = None
    #: sinks hold their commits: a blue-green validation run whose output is never published
    fence_sinks: bool = False

    def effective_arrow_batch_size(self) -> int:
        return self.arrow_batch_size or max(self.batch_size, DEFAULT_ARROW_BATCH_SIZE)


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
