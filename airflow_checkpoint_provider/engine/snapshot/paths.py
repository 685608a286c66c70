"""Paths taken from a snapshot: untrusted input, resolved only inside their own directory.

A ``_metadata`` file or a sink transaction may have been written by anyone who can write to
checkpoint storage. Every path it names is checked here before the engine reads, writes or
renames anything: a *name* is one path component (no ``/``, ``\\``, NUL, ``.`` or ``..``); a
*relative path* is names joined by ``/``. Neither can leave the directory it is resolved in.
"""

from __future__ import annotations

from ..errors import CorruptCheckpointError

MAX_NAME_LENGTH = 255


def corrupt(location: str, field: str, problem: str) -> CorruptCheckpointError:
    """The error for a snapshot field that fails validation, naming field and location."""
    return CorruptCheckpointError(
        f"snapshot {location}: field {field} {problem}; the snapshot is corrupt or was "
        "tampered with (restore another checkpoint or savepoint)")


def safe_name(value: object, *, field: str, location: str) -> str:
    """``value`` if it is one bare file name, else :class:`CorruptCheckpointError`."""
    if not isinstance(value, str) or not value:
        raise corrupt(location, field, f"must be a non-empty file name, not {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_LENGTH:
        raise corrupt(location, field, f"is longer than {MAX_NAME_LENGTH} bytes")
    if "/" in value or "\\" in value or "\x00" in value or value in (".", ".."):
        raise corrupt(location, field, f"must be a bare file name inside its directory, not {value!r}")
    return value


def safe_relative_path(value: object, *, field: str, location: str) -> str:
    """``value`` if it is a relative ``/``-separated path of bare names, else an error."""
    if not isinstance(value, str) or not value:
        raise corrupt(location, field, f"must be a non-empty relative path, not {value!r}")
    if value.startswith("/") or "\\" in value or "\x00" in value or ":" in value.split("/", 1)[0]:
        raise corrupt(location, field, f"must be a relative path inside its directory, not {value!r}")
    for part in value.split("/"):
        safe_name(part, field=field, location=location)
    return value


def non_negative_int(value: object, *, field: str, location: str) -> int:
    if type(value) is not int or value < 0:
        raise corrupt(location, field, f"must be a non-negative integer, not {value!r}")
    return value


def hex_digest(value: object, *, field: str, location: str, length: int = 64) -> str:
    if (not isinstance(value, str) or len(value) != length
            or any(c not in "0123456789abcdef" for c in value)):
        raise corrupt(location, field, f"must be a {length}-character lowercase hex digest")
    return value


def string(value: object, *, field: str, location: str) -> str:
    if not isinstance(value, str):
        raise corrupt(location, field, f"must be a string, not {type(value).__name__}")
    return value


def mapping(value: object, *, field: str, location: str) -> dict:
    if not isinstance(value, dict):
        raise corrupt(location, field, f"must be an object, not {type(value).__name__}")
    return value


def sequence(value: object, *, field: str, location: str) -> list:
    if not isinstance(value, list | tuple):
        raise corrupt(location, field, f"must be a list, not {type(value).__name__}")
    return list(value)
