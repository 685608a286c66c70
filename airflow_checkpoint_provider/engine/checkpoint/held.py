"""Checkpoints a pin holds after their subsumption, also across a driver restart.

A subsumed checkpoint with an unexpired pin (``savepoint_pins``: e.g. a last-state hand-over
that a new job is about to restore) keeps its files, and the shared files it references,
until the pin is released or expires: it is *held*. Its row stays SUBSUMED with
``files_deleted`` unset (revision 0009) until its files are deleted, so what a job held is
in the metadata DB, not only in its driver's memory:

* a job starts by *adopting* the SUBSUMED checkpoints of the ended jobs of its name whose
  files were not deleted (:meth:`HeldCheckpoints.adopt`): what a pin held when the job
  ended, and what its driver died (SIGKILL) before deleting;
* every sweep (:meth:`HeldCheckpoints.sweep`: at the start, then once per completed
  checkpoint) reads the pins of the held and just subsumed checkpoints (one indexed query,
  whatever the size of ``savepoint_pins``), keeps the pinned ones and deletes the others;
  once a deletion is done the row is marked ``files_deleted``;
* a directory is deleted only as the job its ``_metadata`` names (the job's own, an
  adopted one's job, a claimed snapshot's job; :mod:`.ownership`, issue 50): another job's
  checkpoint copied there, or a row pointing elsewhere, is kept and logged;
* an adopted checkpoint's shared files (in its own job's ``shared/``) are deleted once no
  COMPLETED or CORRUPT checkpoint of that job and none of its held ones references them.

The race with :func:`~..lifecycle.savepoints.pin_checkpoint` stays closed: the coordinator
marks a checkpoint SUBSUMED before it reads the pins (one ordered queue), and the pinner
re-reads the status after pinning; an adopted checkpoint is SUBSUMED already, so it cannot
be pinned anew (``pin_checkpoint`` refuses it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.exc import SQLAlchemyError

from ..catalog import MetadataStore
from ..errors import CorruptCheckpointError, EngineError, InvalidNameError
from ..fs.storage import canonical_location, join, parent
from ..names import ensure_under
from ..snapshot.handles import safe_shared_key
from .partial import _foreign

if TYPE_CHECKING:
    from .db_writer import MetadataWriter
    from .deleter import CheckpointCleaner

log = logging.getLogger(__name__)


class Snapshot(Protocol):
    """What a sweep needs of a checkpoint (a ``CompletedCheckpoint`` or :class:`Adopted`)."""

    checkpoint_id: int
    location: str
    claimed: bool


@dataclass
class Adopted:
    """A SUBSUMED checkpoint of an ended job of the name whose files were not deleted."""

    checkpoint_id: int
    location: str
    job_id: str  # the job that took it (not the adopting one)
    claimed: bool = False


class HeldCheckpoints:
    """The checkpoints whose files a pin keeps, this job's and adopted ones (see the module
    docstring). Runs on the job master's thread, like the coordinator."""

    def __init__(
        self,
        *,
        job_id: str,
        job_name: str,
        job_dir: str,
        checkpoint_root: str,
        store: MetadataStore | None,
        db: MetadataWriter,
        cleaner: CheckpointCleaner,
    ) -> None:
        self.job_id, self.job_name, self.job_dir = job_id, job_name, job_dir
        self.checkpoint_root = checkpoint_root
        self.store, self.db, self.cleaner = store, db, cleaner
        self.held: list[Snapshot] = []
        #: adopted job -> its job directory (its ``shared/`` files)
        self.job_dirs: dict[str, str] = {}
        #: adopted job -> ids of its unreleased checkpoints not in its own directory: never
        #: deleted here, nor the shared files they may reference
        self.untouchable: dict[str, set[int]] = {}
        #: how many times the pins were read (tests: at most once per sweep)
        self.pin_reads = 0

    def own_ids(self) -> list[int]:
        """Ids of this job's own held checkpoints (not claimed, not adopted)."""
        return [c.checkpoint_id for c in self.held if not c.claimed and not isinstance(c, Adopted)]

    # -- adoption ---------------------------------------------------------------------------
    def adopt(self) -> int:
        """Take over the unreleased checkpoints of the ended jobs of the name (their files
        are checked by the next :meth:`sweep`); returns how many were adopted."""
        if self.store is None:
            return 0
        try:
            rows = self.store.unreleased_checkpoints(self.job_name, exclude_job_id=self.job_id)
        except (SQLAlchemyError, EngineError) as exc:
            log.warning(
                "Job %s could not read the checkpoints its predecessors held (%s): "
                "their files stay until a later job of the name adopts them",
                self.job_name,
                exc,
            )
            return 0
        for row in rows:
            why = _foreign(
                row.location, self.job_name, row.job_id, row.checkpoint_id, [self.checkpoint_root]
            )
            if why is not None:
                log.warning(
                    "Not adopting SUBSUMED checkpoint %d of job %s (%s) at %s: %s",
                    row.checkpoint_id,
                    self.job_name,
                    row.job_id,
                    row.location,
                    why,
                )
                self.untouchable.setdefault(row.job_id, set()).add(row.checkpoint_id)
                continue
            self.job_dirs[row.job_id] = parent(row.location)
            self.held.append(Adopted(row.checkpoint_id, row.location, row.job_id))
        if self.held:
            log.info(
                "Job %s adopted %d subsumed checkpoint(s) of its ended predecessors "
                "whose files were not deleted: %s",
                self.job_name,
                len(self.held),
                ", ".join(
                    f"{c.job_id[:8]}/chk-{c.checkpoint_id}"
                    for c in self.held
                    if isinstance(c, Adopted)
                ),
            )
        return len(self.held)

    # -- the sweep --------------------------------------------------------------------------
    def sweep(self, subsumed: Iterable[Snapshot] = ()) -> None:
        """Hold the pinned ones of the held and just ``subsumed`` checkpoints, delete the
        others (one read of the pins)."""
        candidates = [*self.held, *subsumed]
        if not candidates:
            return
        fresh = {id(c) for c in candidates[len(self.held) :]}
        pinned = self._pinned([c.location for c in candidates])
        held: list[Snapshot] = []
        released: set[str] = set()
        for old in candidates:
            if pinned is None or canonical_location(old.location) in pinned:
                if id(old) in fresh and pinned is not None:
                    log.info(
                        "Checkpoint %d of job %s is pinned: its files are kept until "
                        "the pin is released",
                        old.checkpoint_id,
                        self.job_name,
                    )
                held.append(old)
            elif isinstance(old, Adopted):  # its location was checked on adoption
                log.info(
                    "Deleting checkpoint %d of ended job %s (%s): its pin was released or expired",
                    old.checkpoint_id,
                    self.job_name,
                    old.job_id,
                )
                self.cleaner.remove_tree(
                    old.location, self._mark_deleted(old.job_id, old), owner=old.job_id
                )
                released.add(old.job_id)
            elif old.claimed:  # another job's snapshot that this job owns
                owner = getattr(old, "job_id", None)
                if owner is None:  # whose it is was not recorded: its files are kept
                    log.warning(
                        "Job %s is not deleting claimed snapshot %s: the job it was taken "
                        "by is unknown",
                        self.job_name,
                        old.location,
                    )
                else:
                    self.cleaner.remove_tree(old.location, owner=owner)
            elif _inside(self.job_dir, old.location):  # never another job's checkpoint
                if id(old) not in fresh:
                    log.info(
                        "Deleting checkpoint %d of job %s: its pin was released or expired",
                        old.checkpoint_id,
                        self.job_name,
                    )
                self.cleaner.remove_tree(
                    old.location, self._mark_deleted(self.job_id, old), owner=self.job_id
                )
        self.held = held
        for job_id in sorted(released):
            self._discard_shared_of(job_id)

    def _pinned(self, locations: list[str]) -> set[str] | None:
        """Which ``locations`` (canonical) have an unexpired pin; None when the DB cannot say
        (keep them all)."""
        if self.store is None:
            return set()
        self.pin_reads += 1
        return self.db.read(
            MetadataStore.pinned_locations,
            sorted({canonical_location(loc) for loc in locations}),
            active_at=datetime.now(UTC),
        )

    def _mark_deleted(self, job_id: str, old: Snapshot):
        """Called on the cleaner's thread once ``old``'s directory is gone (the writer's
        queue is thread safe)."""
        if self.store is None:
            return None
        chk = old.checkpoint_id
        return lambda: self.db.write(MetadataStore.mark_checkpoint_files_deleted, job_id, [chk])

    def _discard_shared_of(self, job_id: str) -> None:
        """Delete the shared files of the adopted job ``job_id`` that none of its checkpoints
        with files references: last used before its oldest COMPLETED or CORRUPT checkpoint,
        its oldest held one and its oldest untouchable one."""
        oldest = self.db.read(MetadataStore.oldest_retained_checkpoint_id, job_id)
        if oldest is None:
            return  # the DB cannot say now: the files stay (a later job adopts nothing more)
        floor = min(
            [
                oldest,
                *self.untouchable.get(job_id, ()),
                *(
                    c.checkpoint_id
                    for c in self.held
                    if isinstance(c, Adopted) and c.job_id == job_id
                ),
            ]
        )
        doomed = self.db.read(MetadataStore.unreferenced_shared_state, job_id, floor) or []
        job_dir = self.job_dirs[job_id]
        for key in doomed:
            path = own_shared_file(job_dir, key)
            if path is None:
                log.warning(
                    "Ignoring shared-state row %r of job %s: not a file in %s/shared",
                    key,
                    job_id,
                    job_dir,
                )
                continue
            self.cleaner.remove_file(path)
        if doomed:
            self.db.write(MetadataStore.delete_shared_state, job_id, doomed)
            log.info(
                "Deleted %d shared files of ended job %s (%s) no kept checkpoint references",
                len(doomed),
                self.job_name,
                job_id,
            )


def _inside(root: str, path: str) -> bool:
    """Whether ``path`` lies inside ``root`` (normalized, symlinks resolved on local disks;
    ``/a/job1`` is not inside ``/a/job``)."""
    try:
        ensure_under(root, path, "checkpoint location")
    except InvalidNameError:
        return False
    return True


def own_shared_file(job_dir: str, key: object) -> str | None:
    """``<job_dir>/shared/<name>`` for a valid key, else ``None`` (a key read back from the
    DB is untrusted: a row saying '/abs/path' or '../../x' is dropped)."""
    try:
        path = join(job_dir, safe_shared_key(key, location=job_dir, field="shared_state.file_key"))
    except CorruptCheckpointError:
        return None
    return path if _inside(job_dir, path) else None
