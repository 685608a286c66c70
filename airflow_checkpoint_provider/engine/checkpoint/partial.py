"""Clean up what an ended job left behind: the files of checkpoints that never completed.

A running job deletes the files of every checkpoint it aborts (``CheckpointCoordinator.abort``).
A job whose driver died cannot: its last checkpoints stay PENDING with partial directories.
Once the job has ended (a terminal status, or ``LOST``), restoring ``latest`` from it calls
:func:`discard_partial_checkpoints`. COMPLETED, SUBSUMED and CORRUPT rows are left alone
(a CORRUPT checkpoint's files are kept for inspection).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..catalog.models import TERMINAL_JOB_STATUSES, CheckpointStatus, JobStatus
from ..errors import InvalidNameError
from ..fs.storage import absolute_location, basename, filesystem_for, parent
from ..names import ensure_under
from .ownership import metadata_refusal, path_refusal

log = logging.getLogger(__name__)

ENDED_JOB_STATUSES = frozenset({*TERMINAL_JOB_STATUSES, JobStatus.LOST})


def discard_partial_checkpoints(store, job_id: str,
                                roots: Sequence[str | None] = ()) -> list[str]:
    """Mark the PENDING checkpoints of an ended job FAILED and delete the directories of its
    FAILED ones; return the deleted locations. Does nothing while the job may still run.

    A location read from the DB is untrusted: only a directory this engine named for that
    checkpoint of that job is deleted -- ``<root>/<job-name>/<job-id>/chk-<N>`` or
    ``<root>/savepoint-<job-id>-<N>`` (absolute, no ``..``, not a symlink), inside one of
    ``roots`` (symlinks resolved) when they are given (the checkpoint and savepoint roots of
    the restoring job), and whose ``_metadata``, if it has one, names that job (issue 50: a
    completed checkpoint of another job copied there, or a row pointing at one, is kept)."""
    job = store.get_job(job_id)
    if job is None or job.status not in ENDED_JOB_STATUSES:
        return []
    removed = []
    for row in store.list_checkpoints(job_id):
        if row.status == CheckpointStatus.PENDING:
            store.fail_checkpoint(job_id, row.checkpoint_id,
                                  reason=f"job ended ({job.status}) before the checkpoint completed")
        elif row.status != CheckpointStatus.FAILED:
            continue
        reason = _foreign(row.location or "", job.job_name, job_id, row.checkpoint_id, roots)
        if reason is not None:
            log.warning("Not deleting %s of FAILED checkpoint %d of job %s (%s): %s",
                        row.location, row.checkpoint_id, job.job_name, job_id, reason)
            continue
        fs = filesystem_for(row.location)
        if fs.exists(row.location):
            fs.remove_tree(row.location)
            removed.append(row.location)
    if removed:
        log.info("Deleted %d partial checkpoint directories of ended job %s (%s)", len(removed),
                 job.job_name, job_id)
    return removed


def _foreign(location: str, job_name: str, job_id: str, checkpoint_id: int,
             roots: Sequence[str | None]) -> str | None:
    """Why ``location`` is not the engine's directory of that checkpoint (``None``: it is)."""
    why = path_refusal(location)
    if why is not None:
        return why
    name = basename(location)
    if name == f"chk-{checkpoint_id}":
        if basename(parent(location)) != job_id or basename(parent(parent(location))) != job_name:
            return f"not in the job's own directory <root>/{job_name}/{job_id}"
    elif name != f"savepoint-{job_id}-{checkpoint_id}":
        return f"not named chk-{checkpoint_id} or savepoint-{job_id}-{checkpoint_id}"
    wanted = [absolute_location(r) for r in roots if r]
    if wanted:
        if not any(_under(root, location) for root in wanted):
            return f"outside {', '.join(wanted)}"
    # last (it reads the file): whose checkpoint it is; a partial one has no _metadata yet
    return metadata_refusal(location, job_id, require_metadata=False)


def _under(root: str, location: str) -> bool:
    try:
        ensure_under(root, location, "checkpoint location")
    except InvalidNameError:
        return False
    return True
