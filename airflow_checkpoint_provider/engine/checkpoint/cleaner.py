"""Deleting checkpoint files off the job master's thread.

Subsumed and aborted checkpoints and unreferenced shared files are deleted by one background
thread, in the order they were scheduled: on S3 a deletion is a list plus batched deletes,
which must not hold up acks, triggers and control requests on the job master's only
thread. Deletions are best effort (as before): a failure is logged, never raised.
:meth:`close` waits for what is scheduled, so a job that ended has cleaned up.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from ..fs.storage import filesystem_for

log = logging.getLogger(__name__)


class CheckpointCleaner:
    def __init__(self, job_name: str) -> None:
        self.job_name = job_name
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cleaner-{job_name}")

    def remove_tree(self, path: str) -> None:
        self._pool.submit(self._run, "remove_tree", path)

    def remove_file(self, path: str) -> None:
        self._pool.submit(self._run, "remove_file", path)

    def _run(self, what: str, path: str) -> None:
        try:
            getattr(filesystem_for(path), what)(path)
        except Exception as exc:  # noqa: BLE001 - a clean-up must not fail the job
            log.warning("Job %s could not delete %s: %s", self.job_name, path, exc)

    def close(self) -> None:
        """Wait for every scheduled deletion."""
        self._pool.shutdown(wait=True)
