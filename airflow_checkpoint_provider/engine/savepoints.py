"""Savepoint housekeeping: dispose one, or apply a retention policy to a job's savepoints.

Savepoints are self-contained directories (``savepoint-<job-id-prefix>-<N>/_metadata`` plus
state files, relative paths only). They are never used for automatic recovery and never
subsumed by checkpoint retention: deleting them is an explicit act.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta

from .catalog.models import CheckpointStatus, JobStatus
from .checkpoint.storage import (
    METADATA_FILE,
    absolute_location,
    basename,
    filesystem_for,
    is_s3,
    parent,
)
from .errors import EngineError
from .snapshot.codec import load_snapshot

log = logging.getLogger(__name__)


class DisposeRefused(EngineError):
    """The path is not a savepoint, or a running job still needs it."""


def dispose_savepoint(path: str, store=None) -> None:
    """Delete the savepoint at ``path`` and mark its row DISCARDED.

    Refuses a path that is not a savepoint (a checkpoint is owned by its job, which deletes
    it when it is subsumed) and, with a ``store``, a snapshot that a RUNNING job was restored
    from and may still need.
    """
    snap = load_snapshot(path)
    if snap.doc.get("kind") != "SAVEPOINT":
        raise DisposeRefused(
            f"{snap.directory} is a {snap.doc.get('kind', 'unknown').lower()}, not a savepoint; "
            "checkpoints are deleted by their job's retention"
        )
    if store is not None:
        mine = canonical_location(snap.directory)
        for job in store.list_jobs():
            if (job.status in (JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.CREATED) and job.restored_from
                    and canonical_location(job.restored_from) == mine):
                raise DisposeRefused(
                    f"savepoint {snap.directory} is still used by running job {job.job_name} "
                    f"({job.job_id}), which was restored from it"
                )
    filesystem_for(snap.directory).remove_tree(snap.directory)
    if store is not None:
        row = store.get_checkpoint(snap.doc["job_id"], int(snap.doc["checkpoint_id"]))
        if row is not None:
            store.set_checkpoint_status(row.job_id, [row.checkpoint_id], CheckpointStatus.DISCARDED)
    log.info("Disposed savepoint %s", snap.directory)


def canonical_location(location: str) -> str:
    """One spelling per snapshot directory, to compare locations: a local path made absolute
    with symlinks, ``.``/``..``, duplicate and trailing slashes resolved (``file://`` too),
    an S3 URI normalized (``s3://bucket/key``), a ``.../_metadata`` file taken as its
    directory."""
    loc = absolute_location(location)
    if basename(loc) == METADATA_FILE:
        loc = parent(loc)
    return loc if is_s3(loc) else os.path.realpath(loc)


def list_savepoints(store, *, job_name: str | None = None, job_id: str | None = None,
                    status: str | None = CheckpointStatus.COMPLETED) -> list:
    """Savepoint rows of one job, or of every job with ``job_name``, oldest first."""
    if job_id is not None:
        jobs = [store.get_job(job_id)]
    else:
        jobs = store.list_jobs(job_name=job_name)
    rows = [r for j in jobs if j is not None
            for r in store.list_checkpoints(j.job_id, kind="SAVEPOINT", status=status)]
    return sorted(rows, key=lambda r: (r.complete_time or r.trigger_time, r.checkpoint_id))


def apply_savepoint_retention(store, *, job_name: str, max_age_seconds: float | None = None,
                              max_count: int | None = None, now: datetime | None = None) -> list[str]:
    """Dispose savepoints of ``job_name`` older than ``max_age_seconds`` or beyond the newest
    ``max_count``. The newest completed savepoint is always kept. Returns disposed locations."""
    rows = list_savepoints(store, job_name=job_name)
    if not rows:
        return []
    now = now or datetime.now(UTC)
    keep = {id(rows[-1])}
    doomed = []
    for i, row in enumerate(rows):
        if id(row) in keep:
            continue
        too_many = max_count is not None and i < len(rows) - max(max_count, 1)
        too_old = (max_age_seconds is not None and row.complete_time is not None
                   and now - row.complete_time > timedelta(seconds=max_age_seconds))
        if too_many or too_old:
            doomed.append(row)
    disposed = []
    for row in doomed:
        try:
            dispose_savepoint(row.location, store)
            disposed.append(row.location)
        except DisposeRefused as exc:
            log.warning("Kept savepoint %s: %s", row.location, exc)
        except EngineError as exc:  # already gone: record it
            log.warning("Savepoint %s could not be read (%s); marking it DISCARDED", row.location, exc)
            store.set_checkpoint_status(row.job_id, [row.checkpoint_id], CheckpointStatus.DISCARDED)
    return disposed
