"""Clean up what an ended job left behind: the files of checkpoints that never completed.

A running job deletes the files of every checkpoint it aborts (``CheckpointCoordinator.abort``).
A job whose driver died cannot: its last checkpoints stay PENDING with partial directories.
Once the job has ended (a terminal status, or ``LOST``), restoring ``latest`` from it calls
:func:`discard_partial_checkpoints`. COMPLETED, SUBSUMED and CORRUPT rows are left alone
(a CORRUPT checkpoint's files are kept for inspection).
"""

from __future__ import annotations

import logging

from ..catalog.models import TERMINAL_JOB_STATUSES, CheckpointStatus, JobStatus
from .storage import basename, filesystem_for

log = logging.getLogger(__name__)

ENDED_JOB_STATUSES = frozenset({*TERMINAL_JOB_STATUSES, JobStatus.LOST})


def discard_partial_checkpoints(store, job_id: str) -> list[str]:
    """Mark the PENDING checkpoints of an ended job FAILED and delete the directories of its
    FAILED ones; return the deleted locations. Does nothing while the job may still run."""
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
        name = basename(row.location or "")
        if name != f"chk-{row.checkpoint_id}" and not (
                name.startswith("savepoint-") and name.endswith(f"-{row.checkpoint_id}")):
            continue  # not a directory this engine named for that checkpoint: leave it
        fs = filesystem_for(row.location)
        if fs.exists(row.location):
            fs.remove_tree(row.location)
            removed.append(row.location)
    if removed:
        log.info("Deleted %d partial checkpoint directories of ended job %s (%s)", len(removed),
                 job.job_name, job_id)
    return removed
