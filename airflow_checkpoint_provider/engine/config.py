"""Job-level configuration: checkpointing options and restart strategies.

Names and defaults follow Flink's so that a Flink user finds them where they expect.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .errors import ConfigurationError
from .settings import DEFAULT_MAX_FRAME_BYTES as DEFAULT_MAX_FRAME_BYTES
from .settings import MAX_FRAME_BYTES
from .settings import env_seconds as env_seconds

#: environment variable: the largest frame (bytes) a runtime connection accepts once its peer
#: is authenticated (read by the job master, which hands it to the slots in its
#: authenticated handshake, and by slots started without one); declared in :mod:`.settings`
MAX_FRAME_BYTES_ENV = MAX_FRAME_BYTES.name


def max_frame_bytes() -> int:
    """The configured frame limit (``$CKPT_MAX_FRAME_BYTES``, default 256 MiB)."""
    return MAX_FRAME_BYTES.get()


class CheckpointingMode(enum.StrEnum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpointing options of a pipeline.

    :param interval_ms: time between periodic checkpoints; ``None`` or ``0`` disables
        periodic checkpoints (a final checkpoint still commits a bounded job's output). ``0``
        means the same here, on the command line (``ckpt run --interval-ms 0``), in Airflow
        (``interval_ms=0``) and in a run request; it is stored as ``None``.
    :param timeout_ms: a checkpoint not completed within this time is expired (aborted).
    :param min_pause_ms: minimum time between the end of one checkpoint and the next trigger.
    :param max_concurrent: how many checkpoints may be in flight at once.
    :param tolerable_failures: consecutive failed (declined or expired) checkpoints tolerated;
        one more fails the job over through its restart strategy, and once restarts are used
        up the job ends FAILED with the checkpoint error. Default 10: a storage hiccup of a
        few intervals is ridden out, a job that can never checkpoint (full disk, a hung task)
        does not run forever without committing. ``None``: unlimited.
    :param retained: completed checkpoints kept; older ones are subsumed and their files deleted.
    :param history: rows of the ``checkpoints`` table kept per job: SUBSUMED and FAILED
        checkpoint rows older than the newest ``history`` checkpoint ids are deleted (checked
        every 100 completed checkpoints). Savepoints, retained, CORRUPT and held (pinned) rows
        are kept.
    :param mode: ``exactly_once`` (aligned barriers) or ``at_least_once`` (no alignment).
    :param directory: checkpoint root, a local path or ``s3://bucket/prefix``;
        ``<dir>/<job-name>/<job-id>/chk-<N>``.
    :param initial_delay_ms: delay before the first periodic checkpoint; ``None`` picks a
        random delay in ``[min_pause_ms, interval_ms]`` so that many jobs do not align.
    :param savepoint_directory: default target of savepoints (``<directory>/savepoints``).
    :param allowed_savepoint_roots: where savepoints requested through the control plane may
        be written besides the savepoint directory (also ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``,
        ``os.pathsep``-separated). A request for a directory outside every root is refused,
        and so is one inside the checkpoint directory other than the savepoint directory
        (checkpoint retention deletes the job directories there).
    :param unaligned: unaligned checkpoints (``exactly_once`` only): a task snapshots on the
        first barrier of a checkpoint, the barrier overtakes the records queued ahead of it,
        and those in-flight records are stored with the checkpoint as channel state and
        replayed on restore. Checkpoints then complete in about the same time under
        backpressure as without. Savepoints stay aligned.
    :param aligned_timeout_ms: with ``unaligned``: start each checkpoint aligned and turn it
        unaligned once it has been pending this long (Flink's
        ``execution.checkpointing.aligned-checkpoint-timeout``); ``None``: unaligned from
        the start.
    :param buffer_debloat_target_ms: buffer debloating (Flink's
        ``taskmanager.network.memory.buffer-debloat.target``): what is in flight to a task
        (queued in its mailbox and in its channels' buffers) is bounded by this much of the
        task's measured processing time, so an aligned barrier waits about this long behind
        the records ahead of it, and a source of a slow job slows down instead of filling
        buffers. ``None``: bounded by counts only (8 batches a mailbox and the sockets'
        buffers), as before.
    :param stall_timeout_ms: the progress watchdog (``checkpoint/progress_watch.py``): a job
        with records queued in front of an operator that has not moved for this long, or an
        event-time operator whose input moves while its watermark has not advanced for this
        long, is reported stalled (``ckpt jobs``, ``ckpt_stalled_seconds{operator}``, the
        checkpoint report), naming the operator. Reported only: the job runs on. ``None``:
        off.
    """

    interval_ms: int | None = 1000
    timeout_ms: int = 60_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int | None = 10
    retained: int = 3
    history: int = 10_000
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    directory: str = "checkpoints"
    initial_delay_ms: int | None = None
    savepoint_directory: str | None = None
    allowed_savepoint_roots: tuple[str, ...] = ()
    unaligned: bool = False
    aligned_timeout_ms: int | None = None
    buffer_debloat_target_ms: int | None = 1000
    stall_timeout_ms: int | None = 300_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", CheckpointingMode(self.mode))
        if self.unaligned and self.mode != CheckpointingMode.EXACTLY_ONCE:
            raise ConfigurationError(
                "checkpoint option unaligned=True needs mode exactly_once: at_least_once "
                "checkpoints never align, so there is nothing to overtake")
        if self.aligned_timeout_ms is not None:
            if not self.unaligned:
                raise ConfigurationError(
                    "checkpoint option aligned_timeout_ms needs unaligned=True (it is when an "
                    "aligned checkpoint turns unaligned)")
            if self.aligned_timeout_ms < 0:
                raise ConfigurationError(
                    f"checkpoint aligned_timeout_ms must be >= 0 (got {self.aligned_timeout_ms})")
        if self.buffer_debloat_target_ms is not None and not (
                isinstance(self.buffer_debloat_target_ms, int)
                and self.buffer_debloat_target_ms >= 10):
            raise ConfigurationError(
                f"checkpoint buffer_debloat_target_ms must be an integer >= 10 or None (got "
                f"{self.buffer_debloat_target_ms!r})")
        if self.stall_timeout_ms is not None and not (
                isinstance(self.stall_timeout_ms, int) and self.stall_timeout_ms >= 100):
            raise ConfigurationError(
                f"checkpoint stall_timeout_ms must be an integer >= 100 or None (got "
                f"{self.stall_timeout_ms!r})")
        if self.interval_ms == 0 and not isinstance(self.interval_ms, bool):
            object.__setattr__(self, "interval_ms", None)  # 0: no periodic checkpoints
        if self.interval_ms is not None and self.interval_ms < 10:
            raise ConfigurationError(f"checkpoint interval_ms must be 0 (no periodic "
                                     f"checkpoints) or >= 10 (got {self.interval_ms})")
        if self.timeout_ms <= 0:
            raise ConfigurationError(f"checkpoint timeout_ms must be > 0 (got {self.timeout_ms})")
        if self.min_pause_ms < 0:
            raise ConfigurationError(f"checkpoint min_pause_ms must be >= 0 (got {self.min_pause_ms})")
        if self.max_concurrent < 1:
            raise ConfigurationError(f"checkpoint max_concurrent must be >= 1 (got {self.max_concurrent})")
        if self.retained < 1:
            raise ConfigurationError(f"checkpoint retained must be >= 1 (got {self.retained})")
        if self.history < self.retained:
            raise ConfigurationError(
                f"checkpoint history must be >= retained ({self.retained}) (got {self.history})")
        if self.tolerable_failures is not None and self.tolerable_failures < 0:
            raise ConfigurationError(
                f"checkpoint tolerable_failures must be >= 0 or None (got {self.tolerable_failures})"
            )


@dataclass(frozen=True)
class RestartStrategy:
    """How the whole job restarts after a failure.

    Use :meth:`fixed_delay`, :meth:`exponential_backoff` or :meth:`none`.
    """

    kind: str = "fixed_delay"
    attempts: int = 3
    delay_ms: int = 1000
    max_delay_ms: int = 60_000
    multiplier: float = 2.0
    #: fail at once (RepeatedFailureAfterRestoreError) when this many consecutive attempts,
    #: each restored from a checkpoint, failed identically (same operator uid, phase,
    #: exception type and message) with no checkpoint completed in between; 0: never
    identical_failures: int = 2
    _valid: tuple[str, ...] = field(default=("fixed_delay", "exponential_backoff", "none"), repr=False)

    def __post_init__(self) -> None:
        if self.kind not in self._valid:
            raise ConfigurationError(
                f"restart strategy {self.kind!r} is unknown; use one of {', '.join(self._valid)}"
            )
        if self.attempts < 0:
            raise ConfigurationError(f"restart attempts must be >= 0 (got {self.attempts})")
        if self.delay_ms < 0:
            raise ConfigurationError(f"restart delay_ms must be >= 0 (got {self.delay_ms})")
        if isinstance(self.identical_failures, bool) or not isinstance(
                self.identical_failures, int) or self.identical_failures < 0:
            raise ConfigurationError(f"restart identical_failures must be an integer >= 0 "
                                     f"(got {self.identical_failures!r})")

    @classmethod
    def fixed_delay(cls, attempts: int = 3, delay_ms: int = 1000, *,
                    identical_failures: int = 2) -> RestartStrategy:
        return cls(kind="fixed_delay", attempts=attempts, delay_ms=delay_ms,
                   identical_failures=identical_failures)

    @classmethod
    def exponential_backoff(
        cls, attempts: int = 10, initial_delay_ms: int = 500, max_delay_ms: int = 60_000,
        multiplier: float = 2.0, *, identical_failures: int = 2,
    ) -> RestartStrategy:
        return cls(kind="exponential_backoff", attempts=attempts, delay_ms=initial_delay_ms,
                   max_delay_ms=max_delay_ms, multiplier=multiplier,
                   identical_failures=identical_failures)

    @classmethod
    def none(cls) -> RestartStrategy:
        return cls(kind="none", attempts=0)

    def can_restart(self, restarts_so_far: int) -> bool:
        return self.kind != "none" and restarts_so_far < self.attempts

    def delay_for(self, restart_number: int) -> float:
        """Seconds to wait before restart ``restart_number`` (1-based)."""
        if self.kind == "exponential_backoff":
            ms = min(self.delay_ms * self.multiplier ** (restart_number - 1), self.max_delay_ms)
        else:
            ms = self.delay_ms
        return ms / 1000.0

    @classmethod
    def parse(cls, text: str) -> RestartStrategy:
        """Parse ``none``, ``fixed:ATTEMPTS:DELAY_MS`` or ``exponential:ATTEMPTS:INITIAL_MS:MAX_MS``,
        optionally ending in ``:identical=N`` (:attr:`identical_failures`)."""
        parts = text.split(":")
        try:
            identical = 2
            if len(parts) > 1 and parts[-1].startswith("identical="):
                identical = int(parts.pop().removeprefix("identical="))
            if parts[0] == "none" and len(parts) == 1:
                return cls.none()
            if parts[0] in ("fixed", "fixed_delay"):
                return cls.fixed_delay(int(parts[1]), int(parts[2]) if len(parts) > 2 else 1000,
                                       identical_failures=identical)
            if parts[0] in ("exponential", "exponential_backoff"):
                return cls.exponential_backoff(
                    int(parts[1]),
                    int(parts[2]) if len(parts) > 2 else 500,
                    int(parts[3]) if len(parts) > 3 else 60_000,
                    identical_failures=identical,
                )
        except (IndexError, ValueError):
            pass
        raise ConfigurationError(
            f"restart strategy {text!r} is not understood; use none, fixed:ATTEMPTS:DELAY_MS "
            "or exponential:ATTEMPTS:INITIAL_MS:MAX_MS, optionally ending in :identical=N"
        )
