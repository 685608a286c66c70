"""Deleting checkpoint files off the job master's thread.

Subsumed and aborted checkpoints and unreferenced shared files are deleted by one background
thread, in the order they were scheduled: on S3 a deletion is a list plus batched deletes,
which must not hold up acks, triggers and control requests on the job master's only
thread. Deletions are best effort (as before): a failure is logged, never raised.
:meth:`close` waits for what is scheduled, so a job that ended has cleaned up.

A directory is deleted for its owner only (security issue 50): with ``owner``, a directory
whose ``_metadata`` names another job (copied there, or a row pointing elsewhere) is kept
and logged, checked on the cleaner's thread right before the deletion
(:func:`.ownership.metadata_refusal`; a directory without ``_metadata`` -- a checkpoint that
never completed -- is deleted by its path, which the caller named).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..fs.storage import filesystem_for
from .ownership import metadata_refusal

log = logging.getLogger(__name__)


class CheckpointCleaner:
    def __init__(self, job_name: str, fs_for: Callable[[str], Any] = filesystem_for) -> None:
        self.job_name = job_name
        self._fs_for = fs_for  # a test's file system, seen by this cleaner's thread only
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cleaner-{job_name}")

    def remove_tree(self, path: str, on_deleted: Callable[[], object] | None = None, *,
                    owner: str | None = None) -> None:
        """Delete the directory ``path``; then call ``on_deleted`` (on the cleaner's thread)
        once ``path`` is gone (the file systems log a failed deletion and return, so the
        directory is looked up again). With ``owner`` (a job id), ``path`` is kept when its
        ``_metadata`` names another job (see the module docstring)."""
        self._pool.submit(self._run, "remove_tree", path, on_deleted, owner)

    def remove_file(self, path: str) -> None:
        self._pool.submit(self._run, "remove_file", path, None)

    def _run(self, what: str, path: str, on_deleted: Callable[[], object] | None,
             owner: str | None = None) -> None:
        try:
            fs = self._fs_for(path)
            if owner is not None:
                why = metadata_refusal(path, owner, require_metadata=False, fs=fs)
                if why is not None:
                    log.warning("Job %s is not deleting %s for job %s: %s", self.job_name, path,
                                owner, why)
                    return
            getattr(fs, what)(path)
            if on_deleted is not None and not fs.exists(path):
                on_deleted()
        except Exception as exc:  # noqa: BLE001 - a clean-up must not fail the job
            log.warning("Job %s could not delete %s: %s", self.job_name, path, exc)

    def drain(self) -> None:
        """Wait for the deletions scheduled so far (the cleaner stays open)."""
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        """Wait for every scheduled deletion."""
        self._pool.shutdown(wait=True)
