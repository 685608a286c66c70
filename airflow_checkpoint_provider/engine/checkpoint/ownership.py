"""Whose snapshot a location holds: the check before a checkpoint or savepoint found through
the metadata DB is deleted or restored (security issue 50).

A ``checkpoints`` row's ``location`` is untrusted input: whoever can write the metadata DB
can point a row of job A at job B's directory, and a snapshot-store writer can copy B's
(validly signed) checkpoint over A's. The files themselves say whose they are: every
``_metadata`` carries the ``job_id`` of the job that wrote it (signed, see :mod:`.trust`).

* **Deleting** (savepoint retention, disposal through a row, subsumption, aborted and
  partial checkpoints): :func:`deletion_refusal` -- a location is deleted only when its
  ``_metadata`` names the job it is deleted for; a savepoint must also carry the name
  ``savepoint-<job-id or its prefix>-<N>`` of that checkpoint and, when savepoint roots are
  configured (:func:`allowed_savepoint_roots`), lie under one of them. A directory without
  ``_metadata`` (a partial checkpoint: ``_metadata`` is written last), or with one that names
  no job (no snapshot this engine writes), is judged by its path alone where the caller
  allows it (``require_metadata=False``); an unreadable one is kept. Anything else is kept and
  the reason returned, naming the path and both job ids.
* **Restoring** a snapshot found through a job's history (``restore="latest"``, failover,
  standby): :func:`check_owner` -- its signed ``_metadata`` must name the job of the row it
  was found through, else :class:`ForeignSnapshotError`. Another job's snapshot restores
  only by its explicit path (``restore=PATH``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from ..errors import (
    CheckpointStorageError,
    EngineError,
    InvalidNameError,
    UntrustedSnapshotError,
)
from ..fs.storage import (
    METADATA_FILE,
    absolute_location,
    basename,
    filesystem_for,
    join,
    split_locations,
)
from ..names import ensure_under
from ..settings import ALLOWED_SAVEPOINT_ROOTS

log = logging.getLogger(__name__)

#: ``os.pathsep``-separated savepoint roots (the control plane's allowed roots, too)
ENV_ALLOWED_SAVEPOINT_ROOTS = ALLOWED_SAVEPOINT_ROOTS.name
#: the shortest job-id prefix a savepoint name may carry (``job_id[:8]``)
MIN_PREFIX = 8
_SAVEPOINT_NAME = re.compile(r"^savepoint-(?P<job>.+)-(?P<id>\d+)$")


class ForeignSnapshotError(UntrustedSnapshotError):
    """A snapshot found through a job's history (a ``checkpoints`` row) was written by
    another job: its signed ``_metadata`` names another job id. It is not restored that way;
    restore another job's snapshot only by its explicit path (``restore=PATH``)."""

    def __init__(self, location: str, expected: str, found: object) -> None:
        self.location, self.expected, self.found = location, expected, found
        super().__init__(
            f"snapshot {location} was found through the history of job {expected}, but its "
            f"signed {METADATA_FILE} names job {found}: another job's snapshot was copied "
            "there (or the row was edited). It is not restored as this job's; to restore that "
            f"job's state deliberately, pass its path explicitly (restore={location!r}, "
            "'ckpt run --restore PATH'), and find out who wrote it")


def check_owner(location: str, found: str, expected_job_id: str | None) -> None:
    """Raise :class:`ForeignSnapshotError` unless ``found`` (the job id a loaded
    ``_metadata`` names) is ``expected_job_id`` (``None``: no expectation, an explicit
    path)."""
    if expected_job_id is None:
        return
    if found != expected_job_id:
        raise ForeignSnapshotError(location, expected_job_id, found)


def allowed_savepoint_roots(extra: Iterable[str | None] = ()) -> list[str]:
    """The configured savepoint roots: ``extra`` (a job's savepoint directory and its
    ``allowed_savepoint_roots``) and ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``; empty: none
    configured (then no root check applies)."""
    env = split_locations(ALLOWED_SAVEPOINT_ROOTS.get())
    return [absolute_location(r) for r in dict.fromkeys([*extra, *env]) if r]


def savepoint_name_matches(location: str, job_id: str, checkpoint_id: int | None) -> bool:
    """``savepoint-<job_id or a prefix of it, at least 8 chars>-<checkpoint_id>``."""
    m = _SAVEPOINT_NAME.match(basename(location))
    if m is None or (checkpoint_id is not None and int(m["id"]) != int(checkpoint_id)):
        return False
    prefix = m["job"]
    return prefix == job_id or (len(prefix) >= min(MIN_PREFIX, len(job_id))
                                and job_id.startswith(prefix))


def metadata_job_id(location: str, fs: Any = None) -> tuple[bool, object]:
    """``(False, None)`` when ``location`` has no ``_metadata``; else ``(True, job id it
    names)`` (``None`` when it names none). Raises :class:`ValueError` when it cannot be
    read or parsed (kept then: whose it is cannot be told)."""
    fs = fs if fs is not None else filesystem_for(location)
    meta = join(location, METADATA_FILE)
    if not fs.exists(meta):
        return False, None
    try:
        doc = json.loads(fs.read_bytes(meta))
    except (CheckpointStorageError, ValueError) as exc:
        raise ValueError(f"its {METADATA_FILE} cannot be read ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"its {METADATA_FILE} is not a metadata document")
    return True, doc.get("job_id")


def path_refusal(location: str) -> str | None:
    """Why ``location`` is no place this engine would delete (``None``: it may be)."""
    if not location or "\x00" in location:
        return "no location"
    local = not location.startswith("s3://")
    if local and not os.path.isabs(location):
        return "not an absolute path"
    if ".." in location.replace("\\", "/").split("/"):
        return "it contains '..'"
    if local and os.path.islink(location):
        return "a symlink"
    return None


def deletion_refusal(location: str, *, job_id: str, kind: str = "CHECKPOINT",
                     checkpoint_id: int | None = None, roots: Iterable[str | None] = (),
                     require_metadata: bool = True, fs: Any = None) -> str | None:
    """Why ``location`` must not be deleted for job ``job_id`` (``None``: it may be).

    :param kind: ``SAVEPOINT``: the name and root rules apply too (module docstring).
    :param roots: savepoint roots besides ``$CKPT_ALLOWED_SAVEPOINT_ROOTS`` (savepoints).
    :param require_metadata: refuse a directory without ``_metadata`` (else it is judged by
        its path: a partial checkpoint the caller named itself).
    :param fs: the file system of ``location`` (default: :func:`filesystem_for`)."""
    why = path_refusal(location)
    if why is not None:
        return f"{location} is {why}" if why != "no location" else "the row has no location"
    if kind == "SAVEPOINT":  # the rules without I/O first
        if not savepoint_name_matches(location, job_id, checkpoint_id):
            return (f"{location} is not named savepoint-<job-id>-{checkpoint_id} for job "
                    f"{job_id}{_whose(location, fs)}")
        wanted = allowed_savepoint_roots(roots)
        if wanted and not any(_under(r, location) for r in wanted):
            return (f"{location} is outside the allowed savepoint roots "
                    f"({', '.join(wanted)}; ${ENV_ALLOWED_SAVEPOINT_ROOTS}) for job "
                    f"{job_id}{_whose(location, fs)}")
    return metadata_refusal(location, job_id, require_metadata=require_metadata, fs=fs)


def _whose(location: str, fs: Any) -> str:
    """``; its _metadata names job X`` (best effort, for a refusal's message)."""
    try:
        present, owner = metadata_job_id(location, fs)
    except (ValueError, EngineError):
        return ""
    return f"; its {METADATA_FILE} names job {owner}" if present else ""


def metadata_refusal(location: str, job_id: str, *, require_metadata: bool = True,
                     fs: Any = None) -> str | None:
    """The ``_metadata`` rule of :func:`deletion_refusal` alone (for a directory the job named
    itself: its own checkpoint, an aborted one)."""
    try:
        present, owner = metadata_job_id(location, fs)
    except ValueError as exc:
        return f"{location} may not be job {job_id}'s: {exc}"
    if not present or owner is None:
        if require_metadata:
            what = "no" if not present else "a job id-less"
            return (f"{location} has {what} {METADATA_FILE}: it cannot be told to be job "
                    f"{job_id}'s")
        return None  # judged by its path, which the caller checked or named
    if owner != job_id:
        return (f"{location} belongs to job {owner} (its {METADATA_FILE} says so), "
                f"not to job {job_id}")
    return None


def _under(root: str, path: str) -> bool:
    try:
        ensure_under(root, path, "savepoint location")
    except InvalidNameError:
        return False
    return True


__all__ = ["ForeignSnapshotError", "allowed_savepoint_roots", "check_owner",
           "deletion_refusal", "metadata_job_id", "metadata_refusal", "savepoint_name_matches"]
