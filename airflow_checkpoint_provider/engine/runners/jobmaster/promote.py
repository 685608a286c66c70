"""Restore in place: a running job restarts from another job's snapshot inside its own
application (control request ``PROMOTE``, issue 41).

The exactly-once blue-green cut-over used to cancel the fenced green and submit it again
unfenced from blue's final savepoint: a new Spark application (tens of seconds on a cluster)
during which nothing is published. ``PROMOTE`` does the same restore in the running green:

1. checks, while green goes on running fenced (a refusal fails the request, nothing else
   changes): the snapshot verifies and is trusted (signed with this metadata DB's key, else
   ``UntrustedSnapshotError``; the job's ``trust_snapshot`` applies), it is not a fenced
   job's snapshot when green is to be unfenced, every source and sink can restore it, and
   the job that took it has ended (two live jobs publishing the same input would duplicate
   it; the savepoint of a completed stop waits up to ``OWNER_WAIT_SECONDS`` for its job to
   end);
2. the fenced attempt stops (pending checkpoints aborted), what it staged is discarded,
   its (fenced) checkpoints are dropped from the restore candidates;
3. the next attempt restores the snapshot in the same application and executors,
   unfenced (``params["unfence"]``, default true), with checkpoint ids after the
   snapshot's; the request SUCCEEDS once every slot of that attempt runs
   (``result["restored_from"]``). A failure after this point is a failover of the promoted
   job (it restores the promoted snapshot or its own newer checkpoints), and errors the
   task raises on restore (a key type change) fail the job like a fresh start would.

Params: ``{"snapshot": PATH, "unfence": true}``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Protocol

from ...catalog import MetadataStore
from ...catalog.models import ControlRequestStatus, JobStatus
from ...errors import RestoreError
from .fencing import check_job_start, discard_held, fenced_restore_error, snapshot_is_fenced
from .restore_plan import RestorePlanner, check_restore_plan

if TYPE_CHECKING:
    from ...checkpoint.coordinator import CheckpointCoordinator
    from ...checkpoint.trust import SnapshotTrust
    from ...plan.graph import ExecutionGraph
    from ...plan.job import JobConfig
    from ...snapshot.codec import LoadedSnapshot

log = logging.getLogger(__name__)

ACTION = "PROMOTE"
#: how long a PROMOTE waits for the job whose stop savepoint it restores to end
OWNER_WAIT_SECONDS = 60.0


@dataclasses.dataclass
class Promotion:
    """A checked PROMOTE request, handed from the attempt to the attempt loop."""

    request_id: str
    snapshot: LoadedSnapshot
    unfence: bool


class PromoteHost(Protocol):
    """What :class:`Promoter` reads and changes in the job master that runs the job
    (:class:`.master.JobMaster`): a protocol, so this module never imports it."""

    config: JobConfig  # replaced when a promotion unfences the job
    graph: ExecutionGraph
    job_id: str
    store: MetadataStore
    trust: SnapshotTrust
    coordinator: CheckpointCoordinator
    initial: LoadedSnapshot | None  # the promoted snapshot from then on
    restorer: RestorePlanner


class Promoter:
    """The job master's side of ``PROMOTE`` (the module docstring's steps 1-3)."""

    def __init__(self, master: PromoteHost) -> None:
        self.master = master
        #: the PROMOTE request finished once the promoted attempt runs
        self.request: str | None = None
        #: the attempt that started from the promoted snapshot (its start clears staged files)
        self.attempt: int | None = None
        #: request id -> when its check first found the snapshot's job still winding down
        self.owner_wait_since: dict[str, float] = {}

    def check(self, req) -> Promotion | None:
        """Every refusal of step 1 (module docstring), as a ``RestoreError`` (or the
        ``CorruptCheckpointError`` of a damaged snapshot); nothing changes. ``None``: not
        yet -- the snapshot is the final savepoint of a stop that completed, and its job is
        winding down (committing, ending): asked again shortly, for up to
        ``OWNER_WAIT_SECONDS``."""
        m = self.master
        params = req.params or {}
        location = params.get("snapshot")
        if not isinstance(location, str) or not location:
            raise RestoreError(f"{ACTION} needs params.snapshot: the path of the snapshot to "
                               f"restore (got {location!r})")
        unfence = params.get("unfence", True)
        if not isinstance(unfence, bool):
            raise RestoreError(f"{ACTION} params.unfence must be true or false, not {unfence!r}")
        if not m.config.fence_sinks:
            raise RestoreError(
                f"job {m.config.name} ({m.job_id}) is not fenced: it published "
                f"output past its own state, so restoring {location} in place would "
                f"publish records twice or never; {ACTION} is for a fenced (blue-green "
                "validation) job. Stop this job with a savepoint and start a new one instead")
        snapshot = m.trust.load(location)
        if unfence and snapshot_is_fenced(snapshot.metadata.operators):
            raise RestoreError(fenced_restore_error(snapshot.directory))
        owner = snapshot.metadata.job_id
        if owner and owner != m.job_id:
            rec = m.store.get_job(owner)
            if rec is not None and not rec.is_terminal:
                stopping = any(  # its stop-with-savepoint took this very snapshot
                    r.action == "STOP_WITH_SAVEPOINT" and r.status == "SUCCEEDED"
                    and (r.result or {}).get("checkpoint_id") == snapshot.checkpoint_id
                    for r in m.store.list_control_requests(owner))
                since = self.owner_wait_since.setdefault(req.request_id, time.monotonic())
                waited = time.monotonic() - since
                if stopping and waited < OWNER_WAIT_SECONDS:
                    return None  # its stop savepoint completed: it ends in a moment
                raise RestoreError(
                    f"snapshot {snapshot.directory} belongs to job {rec.job_name} ({owner}), "
                    f"which is {rec.status}: it still publishes, so a promoted job would "
                    "publish the same records again. Stop it first (stop-with-savepoint, or "
                    "cancel it for a last-state hand-over)")
        m.restorer.check_snapshot(snapshot)
        check_restore_plan(m.graph, snapshot, job_name=m.config.name,
                           discard={}, what=f"{ACTION} restoring {snapshot.directory}")
        return Promotion(req.request_id, snapshot, unfence)

    def apply(self, promotion: Promotion, next_attempt: int) -> LoadedSnapshot:
        """Step 2, after the fenced attempt stopped; returns the snapshot the next attempt
        restores."""
        m = self.master
        snapshot, store, job_id = promotion.snapshot, m.store, m.job_id
        if m.config.fence_sinks:
            discard_held(m.graph, job_id)
        if promotion.unfence:
            m.config = dataclasses.replace(m.config, fence_sinks=False)
        coord = m.coordinator
        dropped = [c.checkpoint_id for c in coord.completed]
        coord.completed.clear()  # a failover must never go back to a fenced checkpoint
        coord.next_id = max(coord.next_id, snapshot.checkpoint_id + 1)
        check_job_start(m.graph, store, m.config, job_id, snapshot)
        store.set_job_restored_from(job_id, snapshot.directory)
        coord.db.write(MetadataStore.set_job_status, job_id, JobStatus.RESTARTING)
        m.initial = snapshot
        self.request, self.attempt = promotion.request_id, next_attempt
        log.info("Job %s (%s) restores %s in place (%s); fenced checkpoints %s are no longer "
                 "restore candidates", m.config.name, job_id, snapshot.directory,
                 "unfenced" if promotion.unfence else "still fenced", dropped)
        return snapshot

    def finish(self, attempt: int) -> None:
        """The promoted attempt's slots all run: the request succeeds."""
        if self.request is None:
            return
        m, rid, self.request = self.master, self.request, None
        m.coordinator.db.write(
            MetadataStore.finish_control_request, rid, status=ControlRequestStatus.SUCCEEDED,
            result={"restored_from": m.initial.directory if m.initial else None,
                    "attempt": attempt,
                    "fenced": bool(m.config.fence_sinks)})
