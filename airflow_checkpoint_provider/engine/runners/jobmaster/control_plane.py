"""The control plane: executes requests that Airflow and the CLI put in the metadata DB.

Nobody needs network access to the driver: a client inserts a row in ``control_requests``
and polls it; the job master claims PENDING rows of its job (exactly once), executes them
and writes the result:

* ``CHECKPOINT``: trigger a checkpoint now -> ``{"checkpoint_id", "location"}``;
* ``SAVEPOINT``: a savepoint into ``params["directory"]`` (or the job's default) ->
  ``{"checkpoint_id", "location"}``;
* ``STOP_WITH_SAVEPOINT``: a savepoint after which sources emit nothing, sinks commit, and
  the job ends STOPPED (``params["drain"]``: end the input first); if the savepoint fails the
  job keeps running and the request reports why;
* ``CANCEL``: stop the job now, status CANCELED (no savepoint);
* ``PROMOTE``: restore another job's snapshot in place, in the running application
  (``params["snapshot"]``, ``params["unfence"]``): claimed here, checked and carried out by
  the attempt and the attempt loop (:mod:`.promote`).

A savepoint (or stop-with-savepoint) is triggered once no checkpoint is pending (see
:meth:`CheckpointCoordinator.savepoint_blocked_by`); while it waits, no periodic checkpoint
and no later ``CHECKPOINT`` request starts. A request that still finds a checkpoint pending
``timeout_ms`` after it first found one pending fails, naming the checkpoint it waited for.
"""

from __future__ import annotations

import logging
import os

from ...catalog import MetadataStore
from ...catalog.models import ControlRequestStatus
from ...checkpoint.coordinator import CheckpointCoordinator, CompletedCheckpoint
from ...errors import CheckpointDeclined
from ...fs.storage import (
    absolute_location,
    is_s3,
    parent,
    savepoint_directory,
    split_locations,
)
from ...protocol import BarrierKind
from ...settings import ALLOWED_SAVEPOINT_ROOTS

SAVEPOINT_ACTIONS = ("SAVEPOINT", "STOP_WITH_SAVEPOINT")

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25


class ControlPlane:
    def __init__(self, *, store, job_id: str, coordinator: CheckpointCoordinator,
                 savepoint_root: str, allowed_roots: tuple[str, ...] = ()) -> None:
        self.store = store
        self.db = coordinator.db  # one write backlog, replayed in order
        self.job_id = job_id
        self.coordinator = coordinator
        self.savepoint_root = savepoint_root
        env = split_locations(ALLOWED_SAVEPOINT_ROOTS.get())
        self.allowed_roots = [_resolved(r) for r in (savepoint_root, *allowed_roots, *env)]
        self.queued: list = []                  # claimed, waiting until they can trigger
        #: savepoint request id -> when it first found a checkpoint pending
        self.blocked_since: dict[str, float] = {}
        self.waiting: dict[int, str] = {}       # checkpoint id -> request id
        self.stop_checkpoint: int | None = None
        self.stop_completed: CompletedCheckpoint | None = None
        self.cancel_request: str | None = None
        #: a claimed PROMOTE request the attempt has not taken yet (:mod:`.promote`)
        self.promote_request = None
        self._last_poll = float("-inf")
        coordinator.listeners.append(self._on_checkpoint_done)

    def poll(self, now: float, running: bool) -> None:
        """Claim new requests (every ``POLL_SECONDS``) and trigger what can be triggered now.
        Queued requests go before periodic checkpoints (see :attr:`has_queued`)."""
        if now - self._last_poll >= POLL_SECONDS:
            self._last_poll = now
            self.queued.extend(self.db.read(MetadataStore.claim_control_requests, self.job_id) or [])
        if not self.queued:
            return
        still: list = []
        for req in self.queued:
            # first come, first triggered: nothing overtakes a savepoint that waits
            behind = bool(still) and req.action != "CANCEL"
            if behind or not self._execute(req, now, running):
                still.append(req)
            else:
                self.blocked_since.pop(req.request_id, None)
        self.queued = still
        self.coordinator.queued_savepoints = {r.request_id for r in still
                                              if r.action in SAVEPOINT_ACTIONS}

    def checked_directory(self, requested: str | None) -> str:
        """The savepoint directory of a request, refused unless it lies under an allowed root
        (a control request must not make the job write anywhere it likes)."""
        if not requested:
            return self.savepoint_root
        if ".." in requested.replace("\\", "/").split("/"):
            raise CheckpointDeclined(f"savepoint directory {requested!r} must not contain '..'")
        path = _resolved(requested)
        # The checkpoint root holds every job's checkpoint directories, which retention
        # deletes: a savepoint in there would be deleted with them (its row still COMPLETED).
        # Only the configured savepoint root may lie inside it.
        checkpoint_root = _resolved(parent(parent(self.coordinator.job_dir)))
        if _under(path, checkpoint_root) and not _under(path, _resolved(self.savepoint_root)):
            raise CheckpointDeclined(
                f"savepoint directory {requested!r} is inside the checkpoint directory "
                f"{checkpoint_root}, whose job directories are deleted by checkpoint retention; "
                f"use {self.savepoint_root} or a directory outside the checkpoint directory")
        for root in self.allowed_roots:
            if _under(path, root):
                return path
        raise CheckpointDeclined(
            f"savepoint directory {requested!r} is outside the allowed roots "
            f"({', '.join(self.allowed_roots)}); add it to allowed_savepoint_roots or "
            "$CKPT_ALLOWED_SAVEPOINT_ROOTS")

    @property
    def has_queued(self) -> bool:
        return bool(self.queued)

    def _execute(self, req, now: float, running: bool) -> bool:
        """Return True when the request was handled (or failed), False to retry later."""
        action, params = req.action, req.params or {}
        if action == "CANCEL":
            self.cancel_request = req.request_id
            log.info("Cancel requested for job %s (request %s)", self.job_id, req.request_id)
            return True
        if not running or self.stop_checkpoint is not None:
            return False
        if action == "PROMOTE":
            if self.promote_request is not None:
                return False  # one at a time, in order
            self.promote_request = req
            return True
        coord = self.coordinator
        if action == "CHECKPOINT" and len(coord.pending) >= coord.config.max_concurrent:
            return False
        try:
            if action == "CHECKPOINT":
                chk = coord.trigger(now, BarrierKind.CHECKPOINT)
            else:
                if params.get("unaligned"):
                    raise CheckpointDeclined(
                        "a savepoint cannot be unaligned: savepoints are always aligned (they "
                        "must be self-contained and restorable at any parallelism)")
                directory = self.checked_directory(params.get("directory"))
                blocked_by = coord.savepoint_blocked_by()
                if blocked_by:
                    waited = now - self.blocked_since.setdefault(req.request_id, now)
                    if waited * 1000.0 < coord.config.timeout_ms:
                        return False
                    raise CheckpointDeclined(
                        f"checkpoint {blocked_by[0]} was still pending after the savepoint "
                        f"waited {waited:.1f} s for it (a savepoint starts only once no "
                        "checkpoint is pending, so that two-phase-commit sinks have committed "
                        "it); retry the request, and check why checkpoints take so long "
                        f"(timeout_ms {coord.config.timeout_ms})")
                kind = BarrierKind.SAVEPOINT
                if action == "STOP_WITH_SAVEPOINT":
                    kind = (BarrierKind.SAVEPOINT_DRAIN if params.get("drain")
                            else BarrierKind.SAVEPOINT_STOP)
                location = savepoint_directory(directory, self.job_id, coord.next_id)
                chk = coord.trigger(now, kind, location=location)
                if action == "STOP_WITH_SAVEPOINT":
                    self.stop_checkpoint = chk
        except CheckpointDeclined as exc:
            self.db.write(MetadataStore.finish_control_request, req.request_id, status=ControlRequestStatus.FAILED,
                                              error=f"{action} declined: {exc}")
            return True
        self.waiting[chk] = req.request_id
        return True

    def _on_checkpoint_done(self, chk: int, completed: CompletedCheckpoint | None,
                            reason: str | None) -> None:
        if chk == self.stop_checkpoint:
            if completed is not None:
                self.stop_completed = completed
            else:
                self.stop_checkpoint = None  # sources resume on the abort notification
        request_id = self.waiting.pop(chk, None)
        if request_id is None:
            return
        if completed is not None:
            self.db.write(MetadataStore.finish_control_request,
                request_id, status=ControlRequestStatus.SUCCEEDED,
                result={"checkpoint_id": chk, "location": completed.location, "kind": completed.kind})
        else:
            self.db.write(MetadataStore.finish_control_request, request_id, status=ControlRequestStatus.FAILED,
                                              error=f"checkpoint {chk} failed: {reason}")

    def fail_request(self, request_id: str, error: str) -> None:
        self.db.write(MetadataStore.finish_control_request, request_id,
                      status=ControlRequestStatus.FAILED, error=error)

    def finish_cancel(self) -> None:
        if self.cancel_request:
            self.db.write(MetadataStore.finish_control_request, self.cancel_request, status=ControlRequestStatus.SUCCEEDED,
                                              result={"status": "CANCELED"})


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _resolved(location: str) -> str:
    """Absolute, symlink-free local path or normalized S3 URI, for root checks."""
    loc = absolute_location(location)
    return loc if is_s3(loc) else os.path.realpath(loc)
