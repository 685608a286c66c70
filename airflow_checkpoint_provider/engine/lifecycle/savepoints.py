"""Savepoint housekeeping: dispose one, pin one, or apply a retention policy to a job's
savepoints, with a report of what was kept and why.

Savepoints are self-contained directories (``savepoint-<job-id-prefix>-<N>/_metadata`` plus
state files, relative paths only). They are never used for automatic recovery and never
subsumed by checkpoint retention: deleting them is an explicit act.

Retention rules (:func:`apply_savepoint_retention`), checked in this order for every
completed savepoint of the jobs of one name; the first that applies decides:

1. ``newest`` -- the newest completed savepoint of the name is always kept;
2. ``restored`` -- kept while a job that is not terminal (CREATED, RUNNING, RESTARTING) was
   restored from it, whatever its claim mode (the restore mode is not recorded on the job:
   a NO_CLAIM job may still fall back to it, a CLAIM job owns and deletes it itself);
3. ``pinned`` -- kept while it has an unexpired pin (:func:`pin_savepoint`), e.g. by the DAG
   run of an upgrade between stopping v1 and starting v2;
4. ``retained`` -- kept: within ``max_count`` newest and not older than ``max_age_seconds``;
5. ``disposed`` -- files deleted and the row marked DISCARDED; ``missing`` when the files
   were already gone (the row is marked DISCARDED too); ``refused`` when a concurrent
   restore or pin appeared between the decision and the deletion (kept); ``foreign`` when
   the row's location is not that job's savepoint (kept, see below).

:func:`dispose_savepoint` enforces rules 2 and 3 for explicit disposals as well.

A row's ``location`` is untrusted (security issue 50: a metadata-DB writer pointed a row of
job A at job B's savepoint, and retention deleted B's). Retention disposes a location only
when its ``_metadata`` names the row's job, its name is ``savepoint-<job-id>-<N>`` of that
row and, when savepoint roots are configured (``$CKPT_ALLOWED_SAVEPOINT_ROOTS``, or
``allowed_roots``), it lies under one (:func:`~..checkpoint.ownership.deletion_refusal`);
anything else is kept, logged and reported as ``foreign`` with the path and both job ids.
An explicit ``ckpt dispose PATH`` deletes the savepoint the operator named (and marks only
the row recorded at that location).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..catalog.models import CheckpointKind, CheckpointStatus, JobStatus
from ..checkpoint.ownership import deletion_refusal, metadata_job_id
from ..errors import EngineError
from ..fs.storage import (
    canonical_location,
    filesystem_for,
)
from ..snapshot.codec import load_snapshot

log = logging.getLogger(__name__)


class DisposeRefused(EngineError):
    """The path is not a savepoint, or a running job still needs it."""


class ForeignSavepointRefused(DisposeRefused):
    """A ``checkpoints`` row's location is not that job's savepoint (its ``_metadata`` names
    another job, its name or root is wrong): nothing is deleted. Find out who wrote the row;
    dispose the savepoint by its path (``ckpt dispose PATH``) if it really must go."""


def dispose_savepoint(path: str, store=None, *, record=None,
                      allowed_roots: tuple[str, ...] = ()) -> None:
    """Delete the savepoint at ``path`` and mark its row DISCARDED.

    Refuses a path that is not a savepoint (a checkpoint is owned by its job, which deletes
    it when it is subsumed) and, with a ``store``, a snapshot that a RUNNING job was restored
    from and may still need.

    :param record: the ``checkpoints`` row ``path`` was read from (retention, the dispose
        operator going through the DB): the savepoint must be that row's job's
        (:func:`~..checkpoint.ownership.deletion_refusal`, with ``allowed_roots`` besides
        ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``), else :class:`ForeignSavepointRefused`. Without
        it, ``path`` was named by the operator and is disposed as named.
    """
    snap = load_snapshot(path)
    if snap.metadata.kind != CheckpointKind.SAVEPOINT:
        raise DisposeRefused(
            f"{snap.directory} is a {snap.metadata.kind.lower()}, not a savepoint; "
            "checkpoints are deleted by their job's retention"
        )
    if record is not None:
        why = deletion_refusal(snap.directory, job_id=record.job_id, kind="SAVEPOINT",
                               checkpoint_id=record.checkpoint_id, roots=allowed_roots)
        if why is not None:
            raise ForeignSavepointRefused(_foreign_text(snap.directory, record, why))
    mine = canonical_location(snap.directory)
    if store is not None:
        for job in restoring_jobs(store, mine):
            raise DisposeRefused(
                f"savepoint {snap.directory} is still used by running job {job.job_name} "
                f"({job.job_id}), which was restored from it"
            )
        for pin in active_pins(store, mine):
            raise DisposeRefused(f"savepoint {snap.directory} is {_pin_text(pin)}; release the "
                                 f"pin first (ckpt unpin {snap.directory} --holder {pin.holder})")
    filesystem_for(snap.directory).remove_tree(snap.directory)
    if store is not None:
        row = record or store.get_checkpoint(snap.metadata.job_id, snap.metadata.checkpoint_id)
        # only the row recorded at this very location (another row may name the same ids)
        if row is not None and row.location and canonical_location(row.location) == mine:
            store.set_checkpoint_status(row.job_id, [row.checkpoint_id], CheckpointStatus.DISCARDED)
    log.info("Disposed savepoint %s of job %s", snap.directory, snap.metadata.job_id)


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


_ACTIVE = (JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.CREATED)


def restoring_jobs(store, location: str, jobs: list | None = None) -> list:
    """Jobs that are not terminal and were restored from ``location`` (canonical)."""
    jobs = store.list_jobs() if jobs is None else jobs
    return [j for j in jobs if j.status in _ACTIVE and j.restored_from
            and canonical_location(j.restored_from) == location]


# -- pins --------------------------------------------------------------------------------------

def pin_savepoint(store, path: str, *, holder: str, ttl_seconds: float | None = None,
                  reason: str | None = None, now: datetime | None = None):
    """Pin the savepoint at ``path`` for ``holder``: retention and dispose keep it until the
    pin expires (``ttl_seconds`` from now; ``None``: until :func:`unpin_savepoint`).
    Pinning again with the same holder renews the pin. Refuses a path that is not a
    completed savepoint. Returns the :class:`SavepointPinRecord`."""
    snap = load_snapshot(path)
    if snap.metadata.kind != CheckpointKind.SAVEPOINT:
        raise DisposeRefused(f"{snap.directory} is a {snap.metadata.kind.lower()}, "
                             "not a savepoint; only savepoints can be pinned")
    expires = None
    if ttl_seconds is not None:
        if ttl_seconds <= 0:
            raise ValueError(f"a pin's ttl must be positive, not {ttl_seconds}")
        expires = (now or datetime.now(UTC)) + timedelta(seconds=ttl_seconds)
    return store.pin_savepoint(canonical_location(snap.directory), holder=holder,
                               expires_at=expires, reason=reason)


def pin_checkpoint(store, job_id: str, checkpoint_id: int, *, holder: str,
                   ttl_seconds: float, reason: str | None = None, now: datetime | None = None):
    """Pin a completed checkpoint of a running job for ``holder`` (a last-state hand-over
    that a new job is about to restore): the job's coordinator keeps its files, and the
    shared files it references, after subsuming it, until the pin is released
    (:func:`unpin_savepoint`) or expires after ``ttl_seconds``.

    Returns the pin record, or ``None`` when the checkpoint was subsumed before the pin
    took effect (its files may be gone: pin the job's newest one instead). The status is
    read again after pinning; the coordinator marks a checkpoint SUBSUMED before it reads
    the pins, so one of the two sees the other."""
    if ttl_seconds <= 0:
        raise ValueError(f"a pin's ttl must be positive, not {ttl_seconds}")
    rec = store.get_checkpoint(job_id, checkpoint_id)
    if rec is None:
        raise LookupError(f"job {job_id} has no checkpoint {checkpoint_id}")
    if rec.status != CheckpointStatus.COMPLETED:
        return None
    location = canonical_location(rec.location)
    expires = (now or datetime.now(UTC)) + timedelta(seconds=ttl_seconds)
    pin = store.pin_savepoint(location, holder=holder, expires_at=expires, reason=reason)
    again = store.get_checkpoint(job_id, checkpoint_id)
    if again is None or again.status != CheckpointStatus.COMPLETED:
        store.unpin_savepoints(holder=holder, location=location)
        return None
    return pin


def unpin_savepoint(store, *, holder: str, path: str | None = None) -> int:
    """Release ``holder``'s pins (on ``path`` only, if given); returns how many."""
    return store.unpin_savepoints(holder=holder,
                                  location=None if path is None else canonical_location(path))


def active_pins(store, location: str | None = None, now: datetime | None = None) -> list:
    """Unexpired pins (of the canonical ``location``, if given)."""
    return store.list_savepoint_pins(location=location, active_at=now or datetime.now(UTC))


def _pin_text(pin) -> str:
    until = (f"until {pin.expires_at:%Y-%m-%d %H:%M:%S} UTC" if pin.expires_at
             else "until unpinned")
    return f"pinned by {pin.holder} {until}" + (f" ({pin.reason})" if pin.reason else "")


# -- retention ---------------------------------------------------------------------------------

KEPT, DISPOSED = "kept", "disposed"


@dataclass(frozen=True)
class RetentionDecision:
    """What retention did with one savepoint, and why.

    ``decision`` is ``kept`` or ``disposed``; ``rule`` one of ``newest``, ``restored``,
    ``pinned``, ``retained``, ``disposed``, ``missing``, ``refused``, ``foreign`` (see the module
    docstring); ``reason`` says it in words, with the job or pin that decided."""

    location: str
    job_id: str
    job_name: str
    checkpoint_id: int
    complete_time: str | None
    decision: str
    rule: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RetentionReport:
    """Every completed savepoint of ``job_name`` seen by one retention run, oldest first."""

    job_name: str
    max_age_seconds: float | None
    max_count: int | None
    decisions: list[RetentionDecision] = field(default_factory=list)

    @property
    def disposed(self) -> list[str]:
        return [d.location for d in self.decisions if d.decision == DISPOSED]

    @property
    def kept(self) -> list[str]:
        return [d.location for d in self.decisions if d.decision == KEPT]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the ``--json`` output of ``ckpt savepoints`` and the operator's XCom."""
        return {"job_name": self.job_name, "max_age_seconds": self.max_age_seconds,
                "max_count": self.max_count, "disposed": self.disposed, "kept": self.kept,
                "savepoints": [d.to_dict() for d in self.decisions]}

    def lines(self) -> list[str]:
        """One line per savepoint: ``disposed|kept (rule): location -- reason``."""
        return [f"{d.decision} ({d.rule}) savepoint {d.checkpoint_id} of {d.job_id[:8]}: "
                f"{d.location} -- {d.reason}" for d in self.decisions]


def _dispose(store, row, why: str, allowed_roots: tuple[str, ...], decide) -> None:
    """Retention's disposal of ``row`` (rules ``disposed``, ``foreign``, ``refused``,
    ``missing``)."""
    try:
        dispose_savepoint(row.location, store, record=row, allowed_roots=allowed_roots)
        decide(DISPOSED, "disposed", why)
    except ForeignSavepointRefused as exc:  # its files changed since the ranking
        decide(KEPT, "foreign", str(exc))
    except DisposeRefused as exc:
        decide(KEPT, "refused", str(exc))
    except EngineError as exc:  # already gone: record it
        store.set_checkpoint_status(row.job_id, [row.checkpoint_id], CheckpointStatus.DISCARDED)
        decide(DISPOSED, "missing", f"{why}; its files could not be read ({exc}): row marked "
                                    "DISCARDED")


def _foreign_text(location: str, record, why: str) -> str:
    return (f"not disposing {location} for savepoint {record.checkpoint_id} of job "
            f"{record.job_id}: {why}. The row's location is not that job's savepoint; nothing "
            "was deleted. Check who wrote the row, or dispose the path explicitly (ckpt "
            "dispose PATH) if it must go")


def _foreign_reason(row, allowed_roots: tuple[str, ...]) -> str | None:
    """Why ``row``'s location, whose files exist, is not its job's savepoint (``None``: it
    is, or its files are gone or cannot be read now: decided when it is disposed)."""
    if not row.location:
        return None
    try:
        present, _owner = metadata_job_id(row.location)
    except ValueError:
        present = True  # an unreadable _metadata: not shown to be the job's
    except EngineError:
        return None  # storage unavailable: dispose_savepoint decides (and checks again)
    if not present:
        return None
    why = deletion_refusal(row.location, job_id=row.job_id, kind="SAVEPOINT",
                           checkpoint_id=row.checkpoint_id, roots=allowed_roots)
    return None if why is None else _foreign_text(row.location, row, why)


def _age_text(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def apply_savepoint_retention(store, *, job_name: str, max_age_seconds: float | None = None,
                              max_count: int | None = None,
                              now: datetime | None = None,
                              allowed_roots: tuple[str, ...] = ()) -> RetentionReport:
    """Dispose savepoints of ``job_name`` older than ``max_age_seconds`` or beyond the newest
    ``max_count``, except those the rules of this module keep (the newest; one a job that is
    not terminal was restored from; a pinned one). Returns a :class:`RetentionReport` with a
    decision and its reason for every completed savepoint; each decision is also logged.
    A location that is not the row's job's savepoint is kept (rule ``foreign``; see the
    module docstring; ``allowed_roots``: savepoint roots besides
    ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``)."""
    report = RetentionReport(job_name, max_age_seconds, max_count)
    rows = list_savepoints(store, job_name=job_name)
    now = now or datetime.now(UTC)
    jobs = store.list_jobs()
    names = {j.job_id: j.job_name for j in jobs}
    pins = active_pins(store, now=now)
    count = None if max_count is None else max(max_count, 1)
    # A row whose location holds another job's savepoint (or one misnamed or outside the
    # roots) is kept and reported, and takes no place in the ranking: a row a DB writer
    # dated newest must not push the job's real newest savepoint out of max_count.
    foreign = {(r.job_id, r.checkpoint_id): why for r in rows
               if (why := _foreign_reason(r, allowed_roots)) is not None}
    ranked = [(r.job_id, r.checkpoint_id) for r in rows
              if (r.job_id, r.checkpoint_id) not in foreign]
    ranks = {key: len(ranked) - i for i, key in enumerate(ranked)}
    for row in rows:
        location = canonical_location(row.location)

        def decide(decision: str, rule: str, reason: str, row=row) -> None:
            report.decisions.append(RetentionDecision(
                row.location, row.job_id, names.get(row.job_id, job_name), row.checkpoint_id,
                row.complete_time.isoformat() if row.complete_time else None,
                decision, rule, reason))

        why_foreign = foreign.get((row.job_id, row.checkpoint_id))
        if why_foreign is not None:
            decide(KEPT, "foreign", why_foreign)
            continue
        rank = ranks[(row.job_id, row.checkpoint_id)]  # 1 = newest
        age = (now - row.complete_time).total_seconds() if row.complete_time else None
        too_many = count is not None and rank > count
        too_old = max_age_seconds is not None and age is not None and age > max_age_seconds
        restoring = restoring_jobs(store, location, jobs)
        pinned = [p for p in pins if p.location == location]
        if rank == 1:
            decide(KEPT, "newest", "the newest savepoint is always kept")
        elif restoring:
            decide(KEPT, "restored", "restored by running job " + ", ".join(
                f"{j.job_name} ({j.job_id}, {j.status})" for j in restoring))
        elif pinned:
            decide(KEPT, "pinned", "; ".join(_pin_text(p) for p in pinned))
        elif not (too_many or too_old):
            within = []
            if count is not None:
                within.append(f"newest {rank} of max_count {count}")
            if max_age_seconds is not None and age is not None:
                within.append(f"{_age_text(age)} old, max_age {_age_text(max_age_seconds)}")
            decide(KEPT, "retained", "within retention: " + ("; ".join(within) or "no limit"))
        else:
            reasons = []
            if too_many:
                reasons.append(f"beyond max_count {count} (newest {rank})")
            if too_old:
                reasons.append(f"older than max_age ({_age_text(age or 0)} > "
                               f"{_age_text(max_age_seconds or 0)})")
            _dispose(store, row, "; ".join(reasons), allowed_roots, decide)
    for decision, line in zip(report.decisions, report.lines(), strict=True):
        # a foreign location is a security event (a row pointing at another job's files)
        level = logging.WARNING if decision.rule == "foreign" else logging.INFO
        log.log(level, "Savepoint retention of %s: %s", job_name, line)
    return report
