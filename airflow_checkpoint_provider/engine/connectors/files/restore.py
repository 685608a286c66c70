"""The restore of a :class:`~.sink.FileSink`'s transactions (issue 51): decoding and
checking them (:func:`check_transactions`; a restored one comes from a snapshot: untrusted),
finding each in the sink's directory or in the directory it records it was staged in
(:func:`locate`), the checks before committing it in a recorded directory that is not the
sink's, and :class:`FileSinkRestoreError` for one found nowhere (:func:`not_found`: where its
records are and what to do). The relocation rules are in :mod:`.sink`' docstring.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...snapshot.handles import SinkTransaction
from ...snapshot.paths import corrupt
from ..sink_names import (
    SinkName,
    legacy_owners,
    one_owner,
    parse_part_file_name,
    parse_staged_file_name,
)
from .errors import FileSinkRestoreError as FileSinkRestoreError  # defined here before issue 53
from .partitions import parse_partition_path

STAGING = "_staging"
STAGED_EXT = ".inprogress"

#: longest recorded staging directory a restored transaction may name (PATH_MAX)
MAX_DIRECTORY_LENGTH = 4096


@dataclass(frozen=True)
class StagedTransaction:
    """A pre-committed file: the :class:`SinkTransaction` and the sink directory it was
    staged in (``None``: not recorded -- a snapshot written before issue 51)."""

    txn: SinkTransaction
    directory: str | None = None

    def final_path(self, directory: str) -> str:
        """Where it is committed when staged in ``directory``."""
        return os.path.join(directory, self.txn.partition, self.txn.final)


def _recorded_directory(raw: object, *, location: str, field: str) -> str | None:
    """The absolute, normalized directory a transaction records, or ``None``."""
    d = raw.get("directory") if isinstance(raw, Mapping) else None
    if d is None:
        return None
    if (not isinstance(d, str) or not os.path.isabs(d) or len(d) > MAX_DIRECTORY_LENGTH
            or "\0" in d or os.path.normpath(d) != d):
        raise corrupt(location, field, f"must be the absolute, normalized path of the sink's "
                      f"directory, not {d!r:.200}")
    return d


def check_transactions(transactions: Sequence[object], *, location: str,
                       columns: Sequence[str] = ()) -> list[StagedTransaction]:
    """Decode transactions (restored ones come from a snapshot: untrusted): both names must
    be bare file names, ``staging`` a staged ``.inprogress`` file and ``final`` a ``part-``
    file, ``partition`` a partition directory of exactly ``columns`` (``""`` when
    unpartitioned), so a commit only renames inside a sink directory, and ``directory`` (if
    recorded) an absolute normalized path; in this encoding both names must name the same
    uid, job, subtask and checkpoint. Anything else is a
    :class:`~...errors.CorruptCheckpointError` naming the field and ``location``. (Old-encoding
    names are attributed by the writer, which knows its uid.)"""
    out, owners = [], set()
    for i, raw in enumerate(transactions):
        if isinstance(raw, StagedTransaction):
            txn, directory = raw.txn, raw.directory
        else:
            txn = raw if isinstance(raw, SinkTransaction) else SinkTransaction.from_dict(
                raw, location=location, field=f"transactions[{i}]")
            directory = _recorded_directory(raw, location=location,
                                            field=f"transactions[{i}].directory")
        if parse_partition_path(txn.partition, columns) is None:
            raise corrupt(location, f"transactions[{i}].partition",
                          f"{txn.partition!r} is not a partition directory of the sink's "
                          f"partition_by {list(columns)} (restore with the partition_by the "
                          "snapshot was written with)")
        if not txn.staging.endswith(STAGED_EXT):
            raise corrupt(location, f"transactions[{i}].staging",
                          f"must name a staged .inprogress file, not {txn.staging!r}")
        if not txn.final.startswith("part-"):
            raise corrupt(location, f"transactions[{i}].final",
                          f"must name a part- file, not {txn.final!r}")
        staged, final = parse_staged_file_name(txn.staging), parse_part_file_name(txn.final)
        if staged is not None and final is not None:
            _check_pair(staged, final, location, i)
            owners.add((staged.job_id, staged.operator_uid))
        elif staged is not None or final is not None:
            raise corrupt(location, f"transactions[{i}]", "mixes name encodings: "
                          f"{txn.staging!r} -> {txn.final!r}")
        elif not legacy_owners(txn.staging, txn.final, parse_part_file_name):
            raise corrupt(location, f"transactions[{i}].final",
                          f"{txn.final!r} is not the part file of {txn.staging!r}")
        out.append(StagedTransaction(txn, directory))
    one_owner(owners, location)
    return out


def locate(t: StagedTransaction, sink_directory: str) -> tuple[str, bool] | None:
    """Where a restored transaction is: ``(directory, True)`` if staged in
    ``directory/_staging`` (to commit there), ``(directory, False)`` if committed there
    already, ``None`` if neither in ``sink_directory`` nor in the directory it records. The
    sink's own directory first: a directory moved or copied whole, with the sink pointed at
    the copy, gets its records there; then the one it was staged for (a new job version that
    writes elsewhere). In each the staged name before the part file: a job that still runs
    (blue-green) may be committing it meanwhile."""
    for d in dict.fromkeys([sink_directory, t.directory or sink_directory]):
        if os.path.lexists(os.path.join(d, STAGING, t.txn.staging)):
            return d, True
        if os.path.lexists(t.final_path(d)):
            return d, False
    return None


_ON_PURPOSE = (
    "If that output was removed or archived on purpose, restore with FileSink(..., "
    "allow_missing_restored=True): the transaction is skipped (its records are where the "
    "output went, or gone if its commit was pending). Nothing was changed")


def not_found(t: StagedTransaction, *, sink: str, sink_directory: str, location: str,
              more: int = 0) -> FileSinkRestoreError:
    """The error for a restored transaction :func:`locate` did not find (and ``more`` others
    of the same snapshot): where its records are (or were) and what to do."""
    txn = t.txn
    name = parse_staged_file_name(txn.staging)
    what = f"transaction {txn.staging}" + (
        f" (checkpoint {name.checkpoint_id} of job {name.job_id})" if name is not None else "")
    if more:
        what += f" (and {more} more of the snapshot's transactions)"
    part = os.path.join(txn.partition, txn.final)
    staged = os.path.join(STAGING, txn.staging)
    head = f"{sink} ({location}): {what}"
    if t.directory is None:
        return FileSinkRestoreError(
            f"{head} is neither staged ({staged}) nor committed ({part}) in {sink_directory}. "
            "The snapshot does not record the directory it was staged in (written by an older "
            "FileSink): it is the directory the job that took the snapshot wrote to. If that "
            f"was another directory, the records are there ({part}, or {staged} if their "
            "commit is pending): restore this snapshot with FileSink(directory=<that "
            "directory>) to commit them there, take a savepoint, and restore that one with the "
            f"new directory (a transaction records its directory now). If it was "
            f"{sink_directory}, the file was removed after the checkpoint. {_ON_PURPOSE}")
    if t.directory != sink_directory and not os.path.isdir(t.directory):
        return FileSinkRestoreError(
            f"{head} was staged for {t.directory}, which does not exist (moved or removed?), "
            f"and is neither staged nor committed in {sink_directory}. Its records are in "
            f"{os.path.join(t.directory, staged)} (or committed as {part}) wherever that "
            f"directory is now: move it back to {t.directory}, or restore with "
            f"FileSink(directory=<its new location>) to commit them there. {_ON_PURPOSE}")
    looked = " or ".join(dict.fromkeys([sink_directory, t.directory]))
    return FileSinkRestoreError(
        f"{head} is neither staged ({staged}) nor committed ({part}) in {looked}, where it "
        "was staged: the file was removed after the checkpoint, so the checkpoint's records "
        "are not in the output. Put the file back, or restore another checkpoint or "
        f"savepoint. {_ON_PURPOSE}")


def _check_own_staging(directory: str, t: StagedTransaction, sink: str) -> None:
    """Before committing in ``directory``, a recorded directory that is not the sink's:
    its ``_staging`` and the staged file are this user's, not symbolic links (a snapshot,
    even a trusted one, only moves the files this user's sink staged)."""
    staging = os.path.join(directory, STAGING)
    for path, kind in ((staging, stat.S_ISDIR),
                       (os.path.join(staging, t.txn.staging), stat.S_ISREG)):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return  # committed meanwhile (see _rename_no_replace's caller)
        if not kind(st.st_mode) or st.st_uid != os.getuid():
            raise FileSinkRestoreError(
                f"{sink}: the restored transaction {t.txn.staging} was staged for {directory}, "
                f"but {path} is not a {'directory' if kind is stat.S_ISDIR else 'file'} of "
                "this user (or is a symbolic link); refusing to commit it there. Restore "
                f"with FileSink(directory={directory!r}) if that directory is the output")


def _check_pair(staged: SinkName, final: SinkName, location: str, i: int) -> None:
    """A transaction's final name is the one its staged file's name gives, nothing else."""
    for field in ("operator_uid", "job_id", "subtask", "checkpoint_id"):
        if getattr(staged, field) != getattr(final, field):
            raise corrupt(location, f"transactions[{i}].final",
                          f"names {field} {getattr(final, field)!r} but its staged file "
                          f"names {getattr(staged, field)!r}")
