"""What a runner needs to run a job, and what it returns: the seam between the pipeline API
(:mod:`.api`) and the runners, so that neither imports the other.

:class:`Restore` (what a job starts from) lives here for that reason: the run request
(:mod:`..datastream.run_request`) builds it, the runners and the job master ``match`` on its
:class:`RestoreKind`; its text form is parsed once, where a request enters the engine
(``ckpt run --restore``, ``Pipeline.run(restore="...")``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..config import CheckpointConfig, RestartStrategy
from ..errors import ConfigurationError

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


#: the prefix of a standby restore in its text form (``standby:JOB``)
STANDBY_PREFIX = "standby:"


class RestoreKind(enum.StrEnum):
    """What a job starts from."""

    #: empty state
    NONE = "none"
    #: the newest completed checkpoint of any job of the name that verifies
    LATEST = "latest"
    #: a checkpoint or savepoint directory
    PATH = "path"
    #: start now, wait until another job ended, then restore what it left (its stop
    #: savepoint, else its latest checkpoint)
    STANDBY = "standby"


@dataclass(frozen=True)
class Restore:
    """What a job starts from: a :class:`RestoreKind` and, for ``PATH`` and ``STANDBY``,
    its target (the snapshot's path, or the job id or name waited for)."""

    kind: RestoreKind = RestoreKind.NONE
    target: str | None = None

    def __post_init__(self) -> None:
        needs_target = self.kind in (RestoreKind.PATH, RestoreKind.STANDBY)
        if needs_target and not (self.target and self.target.strip()):
            raise ConfigurationError(
                "restore 'standby:' needs a job: standby:JOB_ID or standby:JOB_NAME"
                if self.kind == RestoreKind.STANDBY
                else "restore 'path' needs a target: the path of a checkpoint or savepoint")
        if not needs_target and self.target is not None:
            raise ConfigurationError(f"restore {self.kind.value!r} takes no target "
                                     f"(got {self.target!r})")

    @classmethod
    def parse(cls, value: str | Restore | None) -> Restore:
        """The text form (``None``/``""``/``"none"``, ``"latest"``, ``"standby:JOB"`` or a
        path), as ``ckpt run --restore`` and ``Pipeline.run(restore=)`` take it."""
        if isinstance(value, Restore):
            return value
        text = "" if value is None else str(value).strip()
        if text in ("", "none"):
            return cls()
        if text == "latest":
            return cls(RestoreKind.LATEST)
        if text.startswith(STANDBY_PREFIX):
            return cls(RestoreKind.STANDBY, text[len(STANDBY_PREFIX):].strip())
        return cls(RestoreKind.PATH, text)

    @property
    def text(self) -> str | None:
        """The text form :meth:`parse` reads (``None`` for empty state)."""
        match self.kind:
            case RestoreKind.NONE:
                return None
            case RestoreKind.LATEST:
                return "latest"
            case RestoreKind.STANDBY:
                return f"{STANDBY_PREFIX}{self.target}"
            case RestoreKind.PATH:
                return self.target
        raise AssertionError(self.kind)  # pragma: no cover - every kind is matched


#: start from empty state (``Restore()``)
EMPTY_STATE = Restore()
