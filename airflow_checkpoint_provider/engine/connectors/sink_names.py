"""File names and transaction ids that sinks build from job ids and operator uids: one
unambiguous encoding, built and parsed here only.

Names and ids are ``[A-Za-z0-9._-]`` (:mod:`.names`), so ``-`` cannot separate them: job
``a-b`` with uid ``c`` and job ``a`` with uid ``b-c`` both gave ``part-c-a-b-...`` /
``part-b-c-a-...``-style collisions and the Delta application id ``ckpt-a-b-c-0``. The fields
are separated by ``~``, which no name can contain (and which is safe in file names, S3 keys,
PostgreSQL gids and table metadata)::

    part file (FileSink)     part-<uid>~<job id>~c<checkpoint:06>~s<subtask:03>.jsonl
    staged file              <uid>~<job id>~a<attempt>~s<subtask>[~c<checkpoint>]~<hex><ext>
    application id (Delta, Iceberg)   ckpt~<job id>~<uid>~<subtask>
    prepared transaction (PostgreSQL) ckpt~<job id>~<uid hash>~<subtask>~<checkpoint>

Every parser uses ``re.fullmatch`` and returns ``None`` for anything else. Names of the old
``-`` encoding (before this module) are parsed too, but only given the operator uid they
must carry: with the uid known the old names parse one way only, so a restored old
transaction can still be committed or aborted when it belongs to this sink.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CorruptCheckpointError, DeterministicError, InvalidNameError

SEP = "~"
#: a validated name or id (see names.PATTERN), as a regex group
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
#: bounds for numbers read back from names (a snapshot is untrusted input)
MAX_CHECKPOINT_ID = 10**12
MAX_SUBTASK = 32767   # max_parallelism is at most 32768
MAX_ATTEMPT = 10**6

_PART = re.compile(rf"part-({_NAME}){SEP}({_NAME}){SEP}c(\d{{1,13}}){SEP}s(\d{{1,5}})\.jsonl")
_STAGED = re.compile(rf"({_NAME}){SEP}({_NAME}){SEP}a(\d{{1,7}}){SEP}s(\d{{1,5}})"
                     rf"(?:{SEP}c(\d{{1,13}}))?{SEP}([0-9a-f]{{8,32}})(\.[a-z]+)")
_APP_ID = re.compile(rf"ckpt{SEP}({_NAME}){SEP}({_NAME}){SEP}(\d{{1,5}})")
_GID = re.compile(rf"ckpt{SEP}({_NAME}){SEP}([0-9a-f]{{12}}){SEP}(\d{{1,5}}){SEP}(\d{{1,13}})")

# the old encoding: fixed-shape tails after ``<uid>-<job>`` (parsed only with the uid known)
_OLD_PART_TAIL = re.compile(rf"({_NAME})-c(\d{{1,13}})-s(\d{{1,5}})\.jsonl")
_OLD_STAGED_TAIL = re.compile(rf"({_NAME})-a(\d{{1,7}})-s(\d{{1,5}})(?:-c(\d{{1,13}}))?"
                              rf"-([0-9a-f]{{8,32}})(\.[a-z]+)")
_OLD_GID = re.compile(rf"ckpt-({_NAME})-([0-9a-f]{{12}})-(\d{{1,5}})-(\d{{1,13}})")


class TransactionIdError(InvalidNameError, DeterministicError):
    """A sink built a file name or transaction id from this job's own names that does not
    parse back. Never a reason to skip a checkpoint: the job fails at once, naming the sink."""


@dataclass(frozen=True)
class SinkName:
    """What a sink file name or transaction id says. ``operator_uid`` is the uid hash for a
    PostgreSQL gid; ``legacy`` marks the old ``-`` encoding."""

    operator_uid: str
    job_id: str
    subtask: int
    checkpoint_id: int | None = None
    attempt: int | None = None
    token: str = ""
    ext: str = ""
    legacy: bool = False


def _bounded(subtask: str, checkpoint: str | None = None, attempt: str | None = None) -> bool:
    return (int(subtask) <= MAX_SUBTASK
            and (checkpoint is None or int(checkpoint) <= MAX_CHECKPOINT_ID)
            and (attempt is None or int(attempt) <= MAX_ATTEMPT))


def _valid(*names: str) -> bool:
    return all(".." not in n and len(n) <= 128 for n in names)


def _after(text: str, prefix: str) -> str | None:
    return text[len(prefix):] if text.startswith(prefix) else None


# -- part files (FileSink) -------------------------------------------------------------------

def part_file_name(operator_uid: str, job_id: str, checkpoint_id: int, subtask: int) -> str:
    return f"part-{operator_uid}{SEP}{job_id}{SEP}c{checkpoint_id:06d}{SEP}s{subtask:03d}.jsonl"


def parse_part_file_name(name: object, *, operator_uid: str | None = None) -> SinkName | None:
    """The fields of a part file name; old names only with ``operator_uid`` given."""
    if not isinstance(name, str):
        return None
    m = _PART.fullmatch(name)
    if m and _valid(m[1], m[2]) and _bounded(m[4], m[3]):
        return SinkName(m[1], m[2], int(m[4]), int(m[3]))
    rest = _after(name, f"part-{operator_uid}-") if operator_uid else None
    m = _OLD_PART_TAIL.fullmatch(rest) if rest is not None else None
    if m and _valid(m[1]) and _bounded(m[3], m[2]):
        return SinkName(operator_uid or "", m[1], int(m[3]), int(m[2]), legacy=True)
    return None


# -- staged files (FileSink, DeltaSink, IcebergSink) -----------------------------------------

def staged_file_name(operator_uid: str, job_id: str, attempt: int, subtask: int, token: str,
                     ext: str, checkpoint_id: int | None = None) -> str:
    c = "" if checkpoint_id is None else f"{SEP}c{checkpoint_id}"
    return f"{operator_uid}{SEP}{job_id}{SEP}a{attempt}{SEP}s{subtask}{c}{SEP}{token}{ext}"


def staged_prefix(operator_uid: str, job_id: str) -> str:
    """What every staged file of ``job_id`` for ``operator_uid`` starts with."""
    return f"{operator_uid}{SEP}{job_id}{SEP}"


def parse_staged_file_name(name: object, *, operator_uid: str | None = None) -> SinkName | None:
    """The fields of a staged file name; old names only with ``operator_uid`` given."""
    if not isinstance(name, str):
        return None
    m = _STAGED.fullmatch(name)
    if m and _valid(m[1], m[2]) and _bounded(m[4], m[5], m[3]):
        return SinkName(m[1], m[2], int(m[4]), None if m[5] is None else int(m[5]),
                        int(m[3]), m[6], m[7])
    rest = _after(name, f"{operator_uid}-") if operator_uid else None
    m = _OLD_STAGED_TAIL.fullmatch(rest) if rest is not None else None
    if m and _valid(m[1]) and _bounded(m[3], m[4], m[2]):
        return SinkName(operator_uid or "", m[1], int(m[3]), None if m[4] is None else int(m[4]),
                        int(m[2]), m[5], m[6], legacy=True)
    return None


# -- application ids (DeltaSink, IcebergSink) ------------------------------------------------

def app_id(job_id: str, operator_uid: str, subtask: int) -> str:
    return f"ckpt{SEP}{job_id}{SEP}{operator_uid}{SEP}{subtask}"


def parse_app_id(text: object, *, operator_uid: str | None = None) -> SinkName | None:
    """The fields of an application id; old ids only with ``operator_uid`` given."""
    if not isinstance(text, str):
        return None
    m = _APP_ID.fullmatch(text)
    if m and _valid(m[1], m[2]) and _bounded(m[3]):
        return SinkName(m[2], m[1], int(m[3]))
    if operator_uid and text.startswith("ckpt-"):
        head, sep, subtask = text.rpartition("-")
        job = _after(head, "ckpt-")
        if (sep and subtask.isdigit() and len(subtask) <= 5 and job is not None
                and job.endswith(f"-{operator_uid}")):
            job = job[:-len(operator_uid) - 1]
            if re.fullmatch(_NAME, job) and _valid(job) and _bounded(subtask):
                return SinkName(operator_uid, job, int(subtask), legacy=True)
    return None


# -- prepared transaction ids (PostgresSink) -------------------------------------------------

def gid(job_id: str, uid_hash: str, subtask: int, checkpoint_id: int) -> str:
    return f"ckpt{SEP}{job_id}{SEP}{uid_hash}{SEP}{subtask}{SEP}{checkpoint_id}"


def parse_gid(text: object) -> SinkName | None:
    """The fields of a prepared transaction id, new or old encoding (the old one parses one
    way only: the uid hash, subtask and checkpoint have fixed shapes)."""
    if not isinstance(text, str):
        return None
    for pattern, legacy in ((_GID, False), (_OLD_GID, True)):
        m = pattern.fullmatch(text)
        if m and _valid(m[1]) and len(m[1]) <= 64 and _bounded(m[3], m[4]):
            return SinkName(m[2], m[1], int(m[3]), int(m[4]), legacy=legacy)
    return None


# -- checks ----------------------------------------------------------------------------------

def legacy_owners(staging: str, other: str, parse_other) -> list[SinkName]:
    """The ways an old-encoding transaction (``staging`` with the part file name or app id
    ``other``, parsed by ``parse_other``) can be read consistently: for each uid the staged
    name could start with, both names parse with it and name the same job, subtask and (where
    both carry one) checkpoint. Empty: the transaction contradicts itself."""
    out = []
    for k, ch in enumerate(staging):
        if ch != "-":
            continue
        uid = staging[:k]
        staged = parse_staged_file_name(staging, operator_uid=uid)
        named = parse_other(other, operator_uid=uid)
        if (staged is None or named is None or not staged.legacy or not named.legacy
                or (staged.job_id, staged.subtask) != (named.job_id, named.subtask)):
            continue
        if None not in (staged.checkpoint_id, named.checkpoint_id) and \
                staged.checkpoint_id != named.checkpoint_id:
            continue
        out.append(staged)
    return out


def own(name: str, parsed: SinkName | None, *, sink: str) -> SinkName:
    """``parsed`` for a name this job just built; if it does not parse back, a
    :class:`TransactionIdError` naming the sink and the id (fails the job, never a checkpoint)."""
    if parsed is None:
        raise TransactionIdError(
            f"{sink}: the transaction id {name!r} built from this job's own id and operator "
            "uid does not parse back; fix the job id or uid (letters, digits, '.', '_', '-')")
    return parsed


def one_owner(owners: set[tuple[str, str]], location: str) -> None:
    """A snapshot holds the transactions of one job for one sink: ``owners`` (the
    ``(job id, uid)`` pairs its transactions name) has at most one element."""
    if len(owners) > 1:
        shown = ", ".join(f"job {j!r} uid {u!r}" for j, u in sorted(owners)[:4])
        raise CorruptCheckpointError(
            f"{location}: the restored transactions of one sink name several owners ({shown}); "
            "the snapshot is corrupt or was tampered with")


class RestoredTransactions:
    """The rule for transactions restored from a snapshot (untrusted input) in a sink writer:
    each names this sink's operator uid, and all name one job -- this job (failover) or the
    job whose snapshot it restored. Anything else is a :class:`CorruptCheckpointError` that
    names the field; the job fails (a snapshot may not reach other jobs' output)."""

    def __init__(self, *, operator_uid: str, job_id: str, location: str) -> None:
        self.operator_uid, self.job_id, self.location = operator_uid, job_id, location
        self.restored_job: str | None = None

    def refuse(self, field: str, problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"{self.location}: restored transaction field {field} {problem}; the snapshot is "
            "corrupt or was tampered with (a restored transaction must belong to this sink "
            "and to this job or the job it restores)")

    def check(self, parsed: SinkName | None, raw: object, field: str, *,
              uid_is_hash: str | None = None) -> SinkName:
        if parsed is None:
            raise self.refuse(field, f"is not a transaction of sink {self.operator_uid!r}: "
                              f"{raw!r:.200}")
        want_uid = uid_is_hash or self.operator_uid
        if parsed.operator_uid != want_uid:
            what = "the hash of operator uid" if uid_is_hash else "operator uid"
            raise self.refuse(field, f"names {what} {parsed.operator_uid!r}, not {want_uid!r}"
                              + (f" (uid {self.operator_uid!r})" if uid_is_hash else ""))
        if parsed.job_id != self.job_id:
            if self.restored_job is None:
                self.restored_job = parsed.job_id
            elif parsed.job_id != self.restored_job:
                raise self.refuse(field, f"names job {parsed.job_id!r}; the other restored "
                                  f"transactions name {self.restored_job!r}")
        return parsed


__all__ = ["MAX_CHECKPOINT_ID", "SEP", "RestoredTransactions", "SinkName", "TransactionIdError",
           "app_id", "gid", "legacy_owners", "one_owner", "own", "parse_app_id", "parse_gid", "parse_part_file_name",
           "parse_staged_file_name", "part_file_name", "staged_file_name", "staged_prefix"]
