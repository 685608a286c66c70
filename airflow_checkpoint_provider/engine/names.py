"""Names and ids that become parts of paths: validated here, and only here.

Job names, job ids and operator uids end up in checkpoint paths
(``<root>/<job-name>/<job-id>/chk-N``), savepoint names, part-file names and S3 keys. They
arrive from untrusted places: the CLI, a DAG run's conf, a control request, a snapshot.
Every entry point (``Pipeline()``, ``Pipeline.run``, ``ckpt run``, the spark-submit entry
point, the provider's operators) calls the functions below, so the rule is in one place:

    a name is 1 to 128 characters (a job id 1 to 64) of ``A-Z a-z 0-9 . _ -``, starting
    with a letter or digit: ``[A-Za-z0-9][A-Za-z0-9._-]*``, matched against the WHOLE
    value (``re.fullmatch``: ``re.match`` with ``$`` would accept a trailing newline)

That is safe as one path component on local disks (no ``/``, no ``..``, no leading ``.``
or ``-``) and in S3 keys, and short enough that every file name built from it stays under
255 bytes. :func:`ensure_under` checks that a path the engine is about to write stays under
its root after normalization (``..``, symlinks on local disks).
"""

from __future__ import annotations

import os
import posixpath
import re

from .errors import InvalidNameError

PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_NAME = re.compile(PATTERN)
MAX_NAME_LENGTH = 128
MAX_JOB_ID_LENGTH = 64


def _check(value: object, what: str, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidNameError(f"{what} must be a string, not {type(value).__name__}")
    shown = value if len(value) <= 40 else value[:37] + "..."
    if not value or len(value) > max_length:
        raise InvalidNameError(f"{what} {shown!r} must be 1 to {max_length} characters "
                               f"(got {len(value)})")
    if not _NAME.fullmatch(value) or ".." in value:
        raise InvalidNameError(f"{what} {shown!r} may hold only letters, digits, '.', '_' and "
                               f"'-', must start with a letter or digit and must not contain "
                               f"'..' (the whole value must match {PATTERN})")
    return value


def validate_job_name(value: object, what: str = "job name") -> str:
    """Return ``value`` if it is a valid job name, else raise :class:`InvalidNameError`."""
    return _check(value, what, MAX_NAME_LENGTH)


def validate_job_id(value: object, what: str = "job id") -> str:
    """Return ``value`` if it is a valid job id (at most 64 characters)."""
    return _check(value, what, MAX_JOB_ID_LENGTH)


def validate_uid(value: object, what: str = "operator uid") -> str:
    """Return ``value`` if it is a valid operator uid."""
    return _check(value, what, MAX_NAME_LENGTH)


def ensure_under(root: str, path: str, what: str = "path") -> str:
    """Return ``path`` if, normalized, it lies inside ``root`` (local path or ``s3://``
    URI); else raise :class:`InvalidNameError`. Local paths are resolved (``..`` and
    symlinks) before the comparison."""
    if root.startswith("s3://") or path.startswith("s3://"):
        if not (root.startswith("s3://") and path.startswith("s3://")):
            raise InvalidNameError(f"{what} {path!r} is not under {root!r}")
        r = posixpath.normpath(root[len("s3://"):]).rstrip("/")
        p = posixpath.normpath(path[len("s3://"):])
        inside = p == r or p.startswith(r + "/")
    else:
        r = os.path.realpath(root)
        p = os.path.realpath(path)
        inside = p == r or p.startswith(r.rstrip(os.sep) + os.sep)
    if not inside:
        raise InvalidNameError(f"{what} {path!r} escapes its root {root!r}")
    return path


__all__ = ["MAX_JOB_ID_LENGTH", "MAX_NAME_LENGTH", "PATTERN", "ensure_under",
           "validate_job_id", "validate_job_name", "validate_uid"]
