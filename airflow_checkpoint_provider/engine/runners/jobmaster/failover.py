"""Failover: running attempts under the restart strategy, choosing the checkpoint each restart
restores, and failing fast when a failure repeats identically after each restore.

**Repeated failure after restore.** An attempt's failure has a *signature* when a task
reported it: the operator uid, the phase (:mod:`...runtime.task.failure_place`) and the exception's
type and message. When ``RestartStrategy.identical_failures`` (N, default 2) consecutive
attempts, each restored from a checkpoint, failed with the same signature and no checkpoint
completed in between, a restart restores the same state and meets the same failure: the job
fails at once with :class:`~...errors.RepeatedFailureAfterRestoreError` naming the operator and
phase, instead of spending its remaining restarts. Any other failure (a lost slot, a
timeout), an attempt that started from empty state or a completed checkpoint resets the
count.

**Falling back within a running job.** A restart restores the newest retained checkpoint
that verifies. Skipping a damaged one means the sinks must remove what this job committed
after the one restored; :func:`.restore_plan.check_restore_plan` asks every source and sink
first, and a refusal fails the job (nothing removed, the skipped checkpoints stay
COMPLETED for the next ``restore="latest"`` to decide again).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...catalog import MetadataStore
from ...catalog.models import CheckpointStatus, JobStatus
from ...checkpoint.coordinator import CompletedCheckpoint
from ...checkpoint.restore import assign_restore
from ...errors import (
    CorruptCheckpointError,
    RepeatedFailureAfterRestoreError,
    RestoreError,
    UnsafeRestoreFallbackError,
)
from ...snapshot.codec import LoadedSnapshot
from .attempt import AttemptHost, AttemptOutcome, AttemptRun
from .restore_plan import check_restore_plan

if TYPE_CHECKING:
    from ...checkpoint.trust import SnapshotTrust
    from .metrics import JobMetrics
    from .promote import Promoter
    from .restore_plan import RestorePlanner

log = logging.getLogger(__name__)


@dataclass
class JobEnd:
    """How the attempts ended: the job's status, its failure reason (summary and remote
    traceback) and the typed error :meth:`JobMaster._finish` raises for a FAILED job."""

    status: str
    failure: str | None = None
    restarts: int = 0
    error: type[Exception] | None = None


class RepeatedFailureGuard:
    """Counts consecutive attempts that were restored from a checkpoint and failed with the
    same signature, with no checkpoint completed in between (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.signature: tuple[str, str, str] | None = None
        self.count = 0

    def observe(self, outcome: AttemptOutcome, *, restored: bool, completed: bool) -> bool:
        """Record an attempt's failure; True when it is the ``limit``-th identical one in a
        row (the job should fail now)."""
        sig = outcome.signature
        if self.limit <= 0 or not restored or completed or sig is None:
            self.signature, self.count = None, 0
            return False
        if sig == self.signature:
            self.count += 1
        else:
            self.signature, self.count = sig, 1
        return self.count >= self.limit


class FailoverHost(AttemptHost, Protocol):
    """What :class:`Failover` needs from the job master (:class:`.master.JobMaster`)
    besides what an attempt needs: a protocol, so this module never imports it."""

    trust: SnapshotTrust
    metrics: JobMetrics | None
    initial: LoadedSnapshot | None
    allow_non_restored_state: bool
    restorer: RestorePlanner
    promoter: Promoter


class Failover:
    """The attempt loop of :class:`.master.JobMaster`: attempts under the restart
    strategy, the checkpoint each restart restores (see the module docstring)."""

    def __init__(self, master: FailoverHost) -> None:
        self.master = master

    def run_attempts(self, initial: LoadedSnapshot | None) -> JobEnd:
        """Run attempts until one ends the job or the restart strategy gives up. Each restart
        restores the latest completed checkpoint that verifies (else the initial snapshot)."""
        m = self.master
        p, db, coord = m.config, m.coordinator.db, m.coordinator
        strategy = p.restart_strategy
        guard = RepeatedFailureGuard(strategy.identical_failures)
        restarts, attempt, snapshot = 0, 0, initial
        while True:
            db.write(
                MetadataStore.start_attempt,
                m.job_id,
                attempt,
                restored_checkpoint_id=snapshot.checkpoint_id if snapshot else None,
                restored_from=snapshot.directory if snapshot else None,
            )
            completed_before = coord.num_completed
            outcome = self.run_attempt(attempt, snapshot)
            db.write(
                MetadataStore.end_attempt, m.job_id, attempt, failure_reason=outcome.full_failure
            )
            if outcome.status in (JobStatus.FINISHED, JobStatus.STOPPED, JobStatus.CANCELED):
                return JobEnd(outcome.status, None, restarts)
            if outcome.promotion is not None:  # restore in place (:mod:`.promote`)
                attempt = outcome.next_attempt if outcome.next_attempt is not None \
                    else attempt + 1
                try:
                    snapshot = initial = m.promoter.apply(outcome.promotion, attempt)
                except Exception as exc:  # noqa: BLE001 - the fenced attempt has stopped
                    reason = (f"PROMOTE failed after the fenced attempt stopped: "
                              f"{type(exc).__name__}: {exc}")
                    m.control.fail_request(outcome.promotion.request_id, reason)
                    log.error("Job %s: %s", p.name, reason)
                    return JobEnd(JobStatus.FAILED, reason, restarts)
                guard = RepeatedFailureGuard(strategy.identical_failures)
                continue
            failure = outcome.full_failure
            if m.control.stop_completed is not None:
                # The stop savepoint completed (and its request succeeded): what failed is
                # the wind-down. A restart would write output after the savepoint that the
                # job restoring it writes again; the savepoint's pending commits are made by
                # that job. So the job ends STOPPED, as requested.
                log.warning(
                    "Job %s failed after its stop savepoint %s completed (%s); it ends STOPPED",
                    p.name,
                    m.control.stop_completed.location,
                    outcome.failure,
                )
                return JobEnd(JobStatus.STOPPED, None, restarts)
            if guard.observe(
                outcome,
                restored=snapshot is not None,
                completed=coord.num_completed > completed_before,
            ):
                assert snapshot is not None
                reason = (
                    f"RepeatedFailureAfterRestoreError: the same failure followed each of "
                    f"the last {guard.count} restores of checkpoint "
                    f"{snapshot.checkpoint_id} ({snapshot.directory}) with no checkpoint "
                    f"completed in between, so restarting again cannot help "
                    f"({restarts} of {strategy.attempts} restarts used): "
                    f"{outcome.failure}"
                )
                log.error("Job %s fails at once: %s", p.name, reason)
                detail = f"\n{outcome.detail}" if outcome.detail else ""
                return JobEnd(
                    JobStatus.FAILED, reason + detail, restarts, RepeatedFailureAfterRestoreError
                )
            if outcome.fatal or not strategy.can_restart(restarts):
                log.error(
                    "Job %s failed and will not restart (%d restarts, strategy %s): %s",
                    p.name,
                    restarts,
                    strategy.kind,
                    outcome.failure,
                )
                return JobEnd(JobStatus.FAILED, failure, restarts, outcome.error)
            restarts += 1
            if m.metrics:
                m.metrics.on_restart()
            if m.progress:
                m.progress.update(status=JobStatus.RESTARTING, restarts=restarts)
            delay = strategy.delay_for(restarts)
            db.write(
                MetadataStore.set_job_status,
                m.job_id,
                JobStatus.RESTARTING,
                failure_reason=failure,
            )
            log.warning(
                "Job %s failed (%s); restart %d/%d in %.1f s",
                p.name,
                outcome.failure,
                restarts,
                strategy.attempts,
                delay,
            )
            time.sleep(delay)
            attempt += 1
            try:
                snapshot = self.latest_restorable() or initial
            except UnsafeRestoreFallbackError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                log.error("Job %s cannot restart: %s", p.name, reason)
                return JobEnd(JobStatus.FAILED, reason, restarts, UnsafeRestoreFallbackError)

    def run_attempt(self, attempt: int, snapshot: LoadedSnapshot | None) -> AttemptOutcome:
        m = self.master
        try:
            assignments = (
                assign_restore(
                    snapshot, m.graph, allow_non_restored_state=m.allow_non_restored_state
                )
                if snapshot
                else {}
            )
        except (RestoreError, CorruptCheckpointError) as exc:
            return AttemptOutcome(JobStatus.FAILED, str(exc), fatal=True)
        return AttemptRun(m, attempt, assignments).run()

    def latest_restorable(self) -> LoadedSnapshot | None:
        """On failover: the newest retained completed checkpoint that verifies. Damaged ones
        are skipped; skipping any needs every source's and sink's consent first
        (:func:`check_restore_plan`, else :class:`UnsafeRestoreFallbackError` with nothing
        changed); then they are marked CORRUPT, dropped from the retained list (their files
        are kept) and the sinks remove what this job committed after the restored one."""
        m = self.master
        coord = m.coordinator
        bad: list[tuple[CompletedCheckpoint, str]] = []
        chosen: LoadedSnapshot | None = None
        for c in reversed(list(coord.completed)):
            what = f"checkpoint {c.checkpoint_id} of job {m.config.name} ({m.job_id})"
            # only as the job that took it (issue 50): this job's own, or the claimed
            # snapshot's job; another job's checkpoint copied there is skipped like a
            # damaged one (ForeignSnapshotError is a RestoreError)
            owner = c.job_id or m.job_id

            def load(location: str, owner: str = owner) -> LoadedSnapshot:
                return m.trust.load(location, owner=owner)

            chosen, problem = _load_restorable(load, m.restorer.check_snapshot, c.location, what)
            if chosen is not None:
                break
            bad.append((c, problem or "unusable"))
        if not bad:
            return chosen
        restored_id = chosen.checkpoint_id if chosen is not None else -1
        skipped = ", ".join(str(c.checkpoint_id) for c, _ in bad)
        # with no retained checkpoint left the restart restores the job's initial snapshot
        check_restore_plan(
            m.graph,
            chosen if chosen is not None else m.initial,
            job_name=m.config.name,
            discard={m.job_id: restored_id},
            what=(
                f"job {m.config.name} ({m.job_id}) falling back to "
                f"{chosen.directory if chosen else 'empty state'} past its damaged "
                f"checkpoint(s) {skipped} ({bad[0][1]})"
            ),
            remedy=(
                "The skipped checkpoints stay COMPLETED; repair them, or restore an "
                "explicit checkpoint or savepoint (restore=PATH)"
            ),
        )
        for c, reason in bad:
            coord.completed.remove(c)
            if not c.claimed:  # a claimed snapshot is not this job's row
                try:
                    coord.db.write(
                        MetadataStore.fail_checkpoint,
                        m.job_id,
                        c.checkpoint_id,
                        reason=reason,
                        status=CheckpointStatus.CORRUPT,
                    )
                except Exception as exc:  # noqa: BLE001 - the fallback goes on without the mark
                    log.warning(
                        "Could not mark checkpoint %d CORRUPT in the metadata DB: %s",
                        c.checkpoint_id,
                        exc,
                    )
            log.warning(
                "Checkpoint %d of job %s marked CORRUPT: %s", c.checkpoint_id, m.job_id, reason
            )
        m.restorer.discard_sink_output_after(m.job_id, restored_id)
        return chosen


def _load_restorable(
    load, check, location: str, what: str
) -> tuple[LoadedSnapshot | None, str | None]:
    """Load and verify the snapshot at ``location`` for an automatic restore: ``(snapshot,
    None)``, or ``(None, why)`` (after a warning naming the bad file) when it is corrupt or
    incomplete. Storage outages (CheckpointStorageError) propagate: they may pass."""
    try:
        snapshot = load(location)
        check(snapshot)
        return snapshot, None
    except (CorruptCheckpointError, RestoreError) as exc:
        log.warning("Cannot restore %s; trying the next older checkpoint: %s", what, exc)
        return None, str(exc)
