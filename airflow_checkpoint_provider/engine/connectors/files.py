"""An exactly-once file sink (two-phase commit over file renames).

Each sink subtask writes the records of one checkpoint epoch into a staging file under
``<directory>/_staging/``. At the checkpoint barrier the file is flushed, fsynced, closed and
renamed to carry the checkpoint id (pre-commit); its name goes into the checkpoint. When the
checkpoint completes, the staging file is renamed to its final name
``part-<uid>~<job>~c<checkpoint>~s<subtask>.jsonl`` (commit; the names are built in
:mod:`..sink_names`). A commit never replaces an existing part file. After a failure, the
transactions of the restored checkpoint are committed and this job's other staging files from
earlier attempts are deleted (abort). Readers see only ``part-*`` files: committed output.

A restored transaction (untrusted: it comes from a snapshot) must name this sink's uid, one
job (this one, or the job whose snapshot is restored), and a final name that is exactly the
one its staged file's name gives: a snapshot cannot rename anything onto another job's files.

Relocation (issue 51): a transaction records the directory it was staged in (``directory``,
absolute). A new job version whose sink writes to another directory restores it as Flink
restores a pending transaction: it is committed where it was staged (or found committed there
already: a stop savepoint commits everything). The sink's own directory is looked at first (a
directory moved or copied as a whole and the sink pointed at it: the transaction is committed
in the copy the job writes to), then the recorded one. A transaction found in neither is
refused with :class:`FileSinkRestoreError` saying where its records are and what to do: before
the job starts (:meth:`FileSink.check_restored_transactions`; e.g. the old directory was moved
away), or -- a snapshot written before the directory was recorded, restored into a sink that
moved -- when the sink subtask recovers it (the job fails at once, nothing committed);
``allow_missing_restored=True`` skips it instead (output removed or archived on purpose).
Committing into a recorded directory
that is not the sink's needs its ``_staging`` and the staged file to be this user's (not
symbolic links). ``discard_staged_of_job`` and ``discard_committed_after`` (the job master's
clean-ups of an ended job restored from, and of a fallback past corrupt checkpoints) act in
the directories the restored job's transactions name too.

Partitioned (``partition_by``): each record goes to the Hive-style directory of its partition
values (``<directory>/dt=2026-11-25/hm=10-00/part-...``, built in :mod:`.partitions`). A
subtask stages one file per partition it sees in an epoch (same naming scheme; the part file
names the same uid, job, checkpoint and subtask, in the partition's directory), at most
``max_open_writers`` of them open at once: beyond that the least recently used one is flushed
and closed (its staged file stays; it is reopened for appending if its partition comes back in
the same epoch). The barrier pre-commits every staged file of the epoch and the checkpoint's
completion publishes them all; a transaction carries its partition, checked against the
sink's partition columns on restore.

Permissions: what the sink creates is its owner's only by default -- directories ``0700``
(the output directory, ``_staging``, partition directories), files ``0600`` (staged and
committed part files) -- since the records may be replicated database rows (CDC). ``file_mode``
and ``dir_mode`` widen them (e.g. ``0o640`` / ``0o750`` for a reading group); they are exact
(the umask does not narrow them) and must keep the owner's read and write (and, for directories, search).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import msgspec

from ..errors import ConfigurationError, DeterministicError
from ..sink_names import (
    RestoredTransactions,
    SinkName,
    legacy_owners,
    one_owner,
    own,
    parse_part_file_name,
    parse_staged_file_name,
    part_file_name,
    staged_file_name,
    staged_prefix,
)
from ..snapshot.handles import SinkTransaction
from ..snapshot.paths import corrupt
from .base import Sink, SinkWriter, SourceContext, dataset_for_location
from .partitions import (
    check_columns,
    group_by_partition,
    parse_partition_path,
    read_partition_dir,
    without,
)

log = logging.getLogger(__name__)

STAGING = "_staging"
STAGED_EXT = ".inprogress"


DEFAULT_MAX_OPEN_WRITERS = 100
#: longest recorded staging directory a restored transaction may name (PATH_MAX)
MAX_DIRECTORY_LENGTH = 4096


class FileSinkRestoreError(ConfigurationError, DeterministicError):
    """A transaction restored from a snapshot (pre-committed by the job that took it) is
    neither staged nor committed in this sink's directory or in the directory it was staged
    for (moved away, removed, or not recorded by an older snapshot while the sink moved).
    It names where the records are or were and what to do. Raised before the job starts
    (:meth:`FileSink.check_restored_transactions`) when the transaction records its
    directory, else by the sink subtask that recovers it.

    Not a :class:`~..errors.RestoreError`: ``restore="latest"`` must not skip the checkpoint
    and fall back to an older one (the sink cannot remove what the old job committed in
    another directory: it would be written twice). A :class:`~..errors.DeterministicError`:
    a task that meets it fails the job at once (restarting cannot bring the file back)."""

#: default mode of the files a file-writing sink creates (issue 50: the output holds the
#: job's records, replicated database rows for CDC; other local users must not read them)
OUTPUT_FILE_MODE = 0o600
#: default mode of the directories a file-writing sink creates
OUTPUT_DIR_MODE = 0o700


def check_output_modes(file_mode: int, dir_mode: int, *, where: str) -> tuple[int, int]:
    """``(file_mode, dir_mode)`` checked: permission bits (``0o000``..``0o777``, no
    set-uid/gid or sticky bit) that let the owner read and write the files and read, write
    and enter the directories -- committed output must stay readable by the job's user."""
    for name, value, owner in (("file_mode", file_mode, 0o600), ("dir_mode", dir_mode, 0o700)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
            raise ConfigurationError(
                f"{where}: {name} must be permission bits 0o000..0o777 (e.g. 0o640), "
                f"not {value!r}")
        if value & owner != owner:
            raise ConfigurationError(
                f"{where}: {name} {value:#o} does not give the owner {owner:#o} (the job "
                f"must read and write its own output); use e.g. {value | owner:#o}")
    return file_mode, dir_mode


def makedirs_mode(path: str, mode: int) -> str:
    """``os.makedirs`` giving every directory it creates exactly ``mode`` (the umask neither
    narrows nor widens it; the intermediate ones too). Existing directories keep theirs."""
    missing = []
    head = os.path.abspath(path)
    while not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue  # created meanwhile (another subtask): same sink, same mode
        os.chmod(d, mode)
    return path


_umask_lock = threading.Lock()


@contextlib.contextmanager
def output_umask(file_mode: int, dir_mode: int) -> Iterator[None]:
    """Run a library that creates the output files itself (delta-rs, pyiceberg) under the
    umask ``0o777 & ~(file_mode | dir_mode)``: with the defaults ``0o077`` (its files
    ``0600``, its directories ``0700``); ``0o640``/``0o750`` give ``0o027``. The umask is the
    process's: the lock keeps two sinks of one slot from interleaving theirs, and code that
    gives explicit modes (the engine's private files) is not widened by it."""
    mask = 0o777 & ~(file_mode | dir_mode)
    with _umask_lock:
        old = os.umask(mask)
        try:
            yield
        finally:
            os.umask(old)


def open_new_file(path: str, mode: int, *, append: bool = False) -> BinaryIO:
    """Open ``path`` for writing with exactly ``mode`` if this creates it: a new file (never
    one that exists), or -- ``append`` -- this writer's own file, continued."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if append else os.O_EXCL
    fd = os.open(path, flags, mode)
    try:
        if not append:
            os.fchmod(fd, mode)  # exact, whatever the umask
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise


class FileSink(Sink):
    """Write records as JSON lines with exactly-once semantics.

    :param directory: output directory (created if missing).
    :param partition_by: partition columns: each record is written under
        ``<directory>/<col>=<value>/...`` (Hive-style; values escaped as Hive does, ``None``
        and ``""`` in ``__HIVE_DEFAULT_PARTITION__``; see :mod:`.partitions`). A record
        without one of the columns fails the job (:class:`~..errors.BadRecordError`).
    :param keep_partition_columns: keep the partition columns in the written rows too (by
        default they are removed, as Hive, Spark and Flink do: the directory holds them;
        :func:`read_committed` adds them back, as strings).
    :param max_open_writers: partition files one subtask keeps open at once; when a record
        needs another, the least recently used is flushed and closed (still staged, reopened
        for appending if needed: at most one file per subtask, partition and checkpoint).
    :param file_mode: permission bits of the part files (and staged files) the sink creates;
        default ``0o600``, the owner only: the records may be replicated database rows.
        Widen it for other readers, e.g. ``0o640`` (a group) or ``0o644`` (everyone). Exact:
        the umask does not narrow it. It must keep ``0o600`` (the job reads its own output).
    :param dir_mode: permission bits of the directories the sink creates (the output
        directory if missing, ``_staging``, partition directories); default ``0o700``; e.g.
        ``0o750`` with ``file_mode=0o640``. It must keep ``0o700``. Existing directories keep
        their mode, except ``_staging`` (the sink's own), which is set to it.
    :param allow_missing_restored: restore a snapshot even when one of its transactions is
        neither staged nor committed -- in this directory or the one it was staged for --
        because that output was removed or archived on purpose after the snapshot (e.g. the
        old job's directory, after a stop-with-savepoint). Such a transaction is skipped with
        a WARNING naming it: its records are wherever that output went (or gone, if its commit
        was pending). Default ``False``: the restore is refused
        (:class:`FileSinkRestoreError`), saying where the records are and what to do.
    """

    def __init__(self, directory: str, *, partition_by: Sequence[str] | None = None,
                 keep_partition_columns: bool = False,
                 max_open_writers: int = DEFAULT_MAX_OPEN_WRITERS,
                 file_mode: int = OUTPUT_FILE_MODE, dir_mode: int = OUTPUT_DIR_MODE,
                 allow_missing_restored: bool = False) -> None:
        self.directory = os.path.abspath(directory)
        self.allow_missing_restored = bool(allow_missing_restored)
        self.file_mode, self.dir_mode = check_output_modes(
            file_mode, dir_mode, where=f"file sink ({self.directory})")
        self.partition_by = check_columns(partition_by)
        self.keep_partition_columns = bool(keep_partition_columns)
        if isinstance(max_open_writers, bool) or not isinstance(max_open_writers, int) or \
                max_open_writers < 1:
            raise ConfigurationError(f"max_open_writers must be a positive integer, not "
                                     f"{max_open_writers!r}")
        self.max_open_writers = max_open_writers
        #: job id -> directories (not this sink's) its restored transactions were staged in
        self._restored_directories: dict[str, set[str]] = {}

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        return _FileSinkWriter(self, ctx)

    def check_restored_transactions(self, transactions: list[object], *, location: str) -> None:
        """1. Decode them (:func:`check_transactions`: a crafted snapshot is refused); 2.
        each that records its directory must be staged or committed in this sink's
        directory or in that one (:func:`locate`), else :class:`FileSinkRestoreError` --
        before the job starts, nothing changed -- saying where the records are and what to
        do. A transaction of an older snapshot (no directory) is looked for when the sink
        subtask recovers it: the same error then fails the job at once."""
        txns = check_transactions(transactions, location=location, columns=self.partition_by)
        missing = [t for t in txns
                   if t.directory is not None and locate(t, self.directory) is None]
        if missing:
            err = not_found(missing[0], sink=f"file sink ({self.directory})",
                            sink_directory=self.directory, location=f"restoring {location}",
                            more=len(missing) - 1)
            if not self.allow_missing_restored:
                raise err
            log.warning("%s; restoring anyway (allow_missing_restored=True): the records of "
                        "%d restored transactions are not in the output", err, len(missing))
        # the other directories the restored job staged in: the job master's clean-ups
        # (discard_staged_of_job once it ended, discard_committed_after on a fallback past
        # its newer checkpoints) remove its leftovers and replayed output there too
        for t in txns:
            name = parse_staged_file_name(t.txn.staging)
            if name is not None and t.directory not in (None, self.directory):
                self._restored_directories.setdefault(name.job_id, set()).add(t.directory)

    def discard_committed_after(self, operator_uid: str, job_id: str, checkpoint_id: int) -> list[str]:
        """Delete the part files that job ``job_id`` committed for checkpoints after
        ``checkpoint_id`` (the job restores an older checkpoint because a newer one is
        corrupt: their records are replayed and committed again): in this sink's directory
        and in the other directories the restored transactions of ``job_id`` were staged in
        (a new job version that writes elsewhere, see :meth:`check_restored_transactions`;
        only a directory of this user's). Returns the deleted names (relative to this sink's
        directory, absolute in another)."""
        doomed = _discard_committed_in(self.directory, self.partition_by, operator_uid, job_id,
                                       checkpoint_id)
        for d in sorted(self._restored_directories.get(job_id, ())):
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(d)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                    doomed += [os.path.join(d, n) for n in _discard_committed_in(
                        d, self.partition_by, operator_uid, job_id, checkpoint_id)]
        return doomed

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str]:
        """Delete the ``.inprogress`` files job ``job_id`` staged for ``operator_uid`` (called
        for an ended job whose checkpoint a new job restored): in this sink's directory and in
        the other directories its restored transactions were staged in (a new job version
        that writes elsewhere; only a ``_staging`` of this user's). Returns the deleted names."""
        doomed = _discard_staged_in(self.directory, operator_uid, job_id)
        for d in sorted(self._restored_directories.get(job_id, ())):
            staging = os.path.join(d, STAGING)
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(staging)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                    doomed += [os.path.join(staging, n)
                               for n in _discard_staged_in(d, operator_uid, job_id)]
        return doomed

    def lineage_dataset(self) -> tuple[str, str]:
        return dataset_for_location(self.directory)

    def describe(self) -> str:
        return f"files({self.directory})"


def _discard_committed_in(directory: str, columns: Sequence[str], operator_uid: str,
                          job_id: str, checkpoint_id: int) -> list[str]:
    """Delete the part files job ``job_id`` committed for ``operator_uid`` after
    ``checkpoint_id`` under ``directory``; returns their paths relative to it."""
    if not os.path.isdir(directory):
        return []
    doomed = []
    for part in partition_dirs(directory, columns):
        where = os.path.join(directory, part)
        gone = []
        for name in sorted(os.listdir(where)):
            p = parse_part_file_name(name)  # the old encoding is ambiguous: never deleted
            if (p is not None and p.operator_uid == operator_uid and p.job_id == job_id
                    and p.checkpoint_id is not None and p.checkpoint_id > checkpoint_id):
                os.remove(os.path.join(where, name))
                gone.append(f"{part}/{name}" if part else name)
        if gone:
            _fsync_dir(where)
        doomed += gone
    if doomed:
        log.warning("File sink %r: discarded %d part files committed after checkpoint %d of "
                    "job %s in %s (they are written again from checkpoint %d)", operator_uid,
                    len(doomed), checkpoint_id, job_id, directory, checkpoint_id)
    return doomed


def _discard_staged_in(directory: str, operator_uid: str, job_id: str) -> list[str]:
    """Delete the ``.inprogress`` files job ``job_id`` staged for ``operator_uid`` in
    ``directory/_staging``; returns their names."""
    staging = os.path.join(directory, STAGING)
    if not os.path.isdir(staging):
        return []
    doomed = [n for n in sorted(os.listdir(staging))
              if _staged_of(n, operator_uid, job_id) is not None]
    for name in doomed:
        os.remove(os.path.join(staging, name))
    if doomed:
        log.info("File sink %r: removed %d staged files left by ended job %s in %s",
                 operator_uid, len(doomed), job_id, directory)
    return doomed


def _staged_of(name: str, operator_uid: str, job_id: str) -> SinkName | None:
    """``name`` parsed if it is a file ``job_id`` staged for ``operator_uid``. Files of the
    old ``-`` encoding are never matched: they could be another job's (they are invisible to
    readers; remove them by hand once no snapshot names them)."""
    p = parse_staged_file_name(name)
    if (p is None or p.ext != STAGED_EXT or p.operator_uid != operator_uid
            or p.job_id != job_id):
        return None
    return p


def partition_dirs(directory: str, columns: Sequence[str]) -> Iterator[str]:
    """The relative paths of the partition directories under ``directory`` (``""`` itself
    when unpartitioned): those whose names parse as the partition columns, in order."""
    if not columns:
        yield ""
        return
    level = [""]
    for col in columns:
        nxt = []
        for rel in level:
            for name in sorted(os.listdir(os.path.join(directory, rel) if rel else directory)):
                got = read_partition_dir(name)
                if got is not None and got[0] == col and \
                        os.path.isdir(os.path.join(directory, rel, name)):
                    nxt.append(f"{rel}/{name}" if rel else name)
        level = nxt
    yield from level


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
    :class:`~..errors.CorruptCheckpointError` naming the field and ``location``. (Old-encoding
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


_JSON = msgspec.json.Encoder()


def final_name(operator_uid: str, job_id: str, checkpoint_id: int, subtask: int) -> str:
    """The committed name of a subtask's file for a checkpoint."""
    return part_file_name(operator_uid, job_id, checkpoint_id, subtask)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename_no_replace(src: str, dst: str) -> bool:
    """Move ``src`` to ``dst`` unless ``dst`` exists (then ``False``, ``src`` untouched; a
    link left by a crash between the two steps is completed). Atomic: a hard link, then the
    staged name is removed."""
    try:
        os.link(src, dst)
    except FileExistsError:
        if not os.path.samefile(src, dst):
            return False
    except OSError as exc:  # a file system without hard links
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        if os.path.exists(dst):
            return False
        os.rename(src, dst)
        return True
    os.remove(src)
    return True


class _Staged:
    """One partition's staged file of the open epoch (``file`` is ``None`` once rolled)."""

    __slots__ = ("file", "name", "partition", "token", "written")

    def __init__(self, partition: str, token: str, name: str) -> None:
        self.partition, self.token, self.name = partition, token, name
        self.file: BinaryIO | None = None
        self.written = False


def _encode(records: list[dict]) -> bytes:
    """One compact JSON object per line, UTF-8. Encoded by msgspec (C, ~40x faster than
    ``json.dumps`` per record); a batch msgspec cannot encode (e.g. a dict key that is not a
    string or an integer) goes through ``json.dumps``. NaN and infinities are written as
    ``null`` by msgspec (``json.dumps`` wrote the non-standard ``NaN``)."""
    try:
        return _JSON.encode_lines(records)
    except (TypeError, msgspec.EncodeError, OverflowError):
        return "".join(json.dumps(r, separators=(",", ":")) + "\n"
                       for r in records).encode("utf-8")


class _FileSinkWriter(SinkWriter):
    def __init__(self, sink: FileSink, ctx: SourceContext) -> None:
        directory = sink.directory
        self.dir = directory
        self.staging_dir = os.path.join(directory, STAGING)
        self.file_mode, self.dir_mode = sink.file_mode, sink.dir_mode
        makedirs_mode(self.staging_dir, self.dir_mode)
        st = os.lstat(self.staging_dir)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != self.dir_mode:
            os.chmod(self.staging_dir, self.dir_mode)  # an older version's 0755 _staging
        self.ctx = ctx
        self.columns = sink.partition_by
        self.keep_columns = sink.keep_partition_columns
        self.max_open = sink.max_open_writers
        self.allow_missing = sink.allow_missing_restored
        self.sink_name = f"file sink {ctx.operator_uid!r} ({directory})"
        # the full job id: two jobs whose ids share a prefix must never share file names
        self.prefix = staged_prefix(ctx.operator_uid, ctx.job_id)
        #: the epoch's staged files by partition path, least recently written first
        self._staged: OrderedDict[str, _Staged] = OrderedDict()
        self._open = 0
        self._paths: dict[tuple, str] = {}  # partition values (typed) -> partition path
        self.rolled = 0  # files closed early to stay within max_open (a metric for tests)

    def _file_for(self, partition: str):
        st = self._staged.get(partition)
        if st is None:
            token = uuid.uuid4().hex[:16]
            name = staged_file_name(self.ctx.operator_uid, self.ctx.job_id, self.ctx.attempt,
                                    self.ctx.subtask_index, token, STAGED_EXT)
            own(name, parse_staged_file_name(name), sink=self.sink_name)
            st = self._staged[partition] = _Staged(partition, token, name)
        else:
            self._staged.move_to_end(partition)
        if st.file is None:
            if self._open >= self.max_open:
                self._roll_least_recent()
            # new: never replaces another file; append: a rolled file is continued
            st.file = open_new_file(os.path.join(self.staging_dir, st.name), self.file_mode,
                                    append=st.written)
            st.written = True
            self._open += 1
        return st.file

    def _roll_least_recent(self) -> None:
        """Flush, fsync and close the least recently written open file (it stays staged)."""
        for st in self._staged.values():
            if st.file is not None:
                _close_durably(st.file)
                st.file = None
                self._open -= 1
                self.rolled += 1
                log.debug("%s: rolled the staged file of partition %r (max_open_writers=%d)",
                          self.sink_name, st.partition, self.max_open)
                return

    def write(self, records: list[dict]) -> None:
        if not self.columns:
            self._file_for("").write(_encode(records))
            return
        groups = group_by_partition(records, self.columns, self._paths, where=self.sink_name)
        for path, rows in groups.items():
            if not self.keep_columns:
                rows = without(rows, self.columns)
            self._file_for(path).write(_encode(rows))

    def pre_commit(self, checkpoint_id: int) -> list[object]:
        """Per staged file of the epoch: 1. flush, fsync and close it; 2. rename it to carry
        the checkpoint id (the final name is derived from it, so a transaction cannot point
        elsewhere); then 3. fsync the staging directory (the renames must survive a crash)."""
        if not self._staged:
            return []
        c = self.ctx
        out: list[object] = []
        for st in self._staged.values():
            if st.file is not None:
                _close_durably(st.file)
                st.file = None
            staged = staged_file_name(c.operator_uid, c.job_id, c.attempt, c.subtask_index,
                                      st.token, STAGED_EXT, checkpoint_id)
            final = final_name(c.operator_uid, c.job_id, checkpoint_id, c.subtask_index)
            _check_pair(own(staged, parse_staged_file_name(staged), sink=self.sink_name),
                        own(final, parse_part_file_name(final), sink=self.sink_name),
                        self.sink_name, 0)
            os.rename(os.path.join(self.staging_dir, st.name),
                      os.path.join(self.staging_dir, staged))
            # the directory: a new job version restoring it commits it here (issue 51)
            txn: dict = {"staging": staged, "final": final, "directory": self.dir}
            if st.partition:
                txn["partition"] = st.partition
            out.append(txn)
        _fsync_dir(self.staging_dir)
        self._staged.clear()
        self._open = 0
        return out

    def _transactions(self, transactions: Sequence[object]) -> list[StagedTransaction]:
        where = f"(file sink {self.ctx.operator_uid!r} transactions for {self.dir})"
        return check_transactions(transactions, location=where, columns=self.columns)

    def _check_restored(self, txns: list[StagedTransaction]) -> None:
        """Every restored transaction names this sink's uid and one job, in both names."""
        where = f"snapshot restored into {self.sink_name}"
        rule = RestoredTransactions(operator_uid=self.ctx.operator_uid, job_id=self.ctx.job_id,
                                    location=where)
        uid = self.ctx.operator_uid
        for i, t in enumerate(s.txn for s in txns):
            staged = rule.check(parse_staged_file_name(t.staging, operator_uid=uid), t.staging,
                                f"transactions[{i}].staging")
            final = rule.check(parse_part_file_name(t.final, operator_uid=uid), t.final,
                               f"transactions[{i}].final")
            if staged.ext != STAGED_EXT:
                raise rule.refuse(f"transactions[{i}].staging", "is not a staged JSON lines file")
            if staged.legacy or final.legacy:
                # old encoding: no checkpoint id in the staged name; the rest must agree
                if (staged.job_id, staged.subtask) != (final.job_id, final.subtask):
                    raise rule.refuse(f"transactions[{i}].final",
                                      f"{t.final!r} is not the part file of {t.staging!r}")
            else:
                _check_pair(staged, final, where, i)

    def commit(self, transactions: list[object]) -> None:
        self._publish(transactions, "committing a completed checkpoint")

    def _publish(self, transactions: Sequence[object], doing: str, *,
                 restored: bool = False) -> None:
        """Publish pre-committed transactions (idempotent): each is renamed from the
        ``_staging`` of the directory it is found staged in (:func:`locate`: this sink's, or
        for a restored one the directory it was staged for) to its part file there; one found
        committed already is done. Every one is located before any is renamed (one found
        nowhere refuses them all). Then the directories touched are fsynced."""
        located = []
        for t in self._transactions(transactions):
            found = locate(t, self.dir)
            if found is None:
                err = not_found(t, sink=self.sink_name, sink_directory=self.dir, location=doing)
                if not (restored and self.allow_missing):
                    raise err
                log.warning("%s; skipped (allow_missing_restored=True)", err)
                continue
            located.append((t, *found))
        touched: set[str] = set()
        for t, root, staged in located:
            txn = t.txn
            touched.add(root)
            if not staged:
                continue  # committed already (a repeated notify, or by the job restored)
            if root != self.dir:
                _check_own_staging(root, t, self.sink_name)
                log.info("%s: committing restored transaction %s in %s, the directory it was "
                         "staged for", self.sink_name, txn.staging, root)
            src = os.path.join(root, STAGING, txn.staging)
            where = root
            if txn.partition:  # checked: col=value/... of this sink's columns
                where = os.path.join(root, txn.partition)
                makedirs_mode(where, self.dir_mode)
                touched.update(_ancestors(root, txn.partition))
            dst = os.path.join(where, txn.final)
            try:
                moved = _rename_no_replace(src, dst)
            except FileNotFoundError:
                if not os.path.exists(dst):  # neither any more: removed meanwhile
                    raise not_found(t, sink=self.sink_name, sink_directory=self.dir,
                                    location=doing) from None
                continue
            if not moved:
                raise RuntimeError(
                    f"file sink {self.ctx.operator_uid!r}: committing {txn.staging} would "
                    f"replace the existing part file {txn.final} in {where}; refusing (a "
                    "committed file is never overwritten)")
        for d in sorted(touched, key=len, reverse=True):  # new directories, then parents
            _fsync_dir(d)

    def recover(self, transactions: list[object]) -> None:
        # Every subtask receives every restored transaction; subtask 0 commits and aborts.
        txns = self._transactions(transactions)  # every subtask refuses a crafted snapshot
        self._check_restored(txns)
        if self.ctx.subtask_index != 0:
            return
        self._publish(txns, "recovering the transactions of the restored snapshot",
                      restored=True)
        keep = {t.txn.staging for t in txns}
        for name in os.listdir(self.staging_dir):
            staged = _staged_of(name, self.ctx.operator_uid, self.ctx.job_id)
            if staged is None or name in keep:
                continue  # another job's, or another sink's, or kept
            if staged.attempt != self.ctx.attempt:
                os.remove(os.path.join(self.staging_dir, name))
                log.debug("aborted staged transaction %s", name)

    def close(self) -> None:
        # Records after the last checkpoint are not part of any transaction to commit.
        for st in self._staged.values():
            if st.file is not None:
                st.file.close()
                st.file = None
        self._open = 0


def _close_durably(f) -> None:
    f.flush()
    os.fsync(f.fileno())
    f.close()


def _ancestors(root: str, partition: str) -> list[str]:
    """The directories of ``partition`` under ``root``: ``root/a=1``, ``root/a=1/b=2``."""
    parts = partition.split("/")
    return [os.path.join(root, *parts[:k]) for k in range(1, len(parts) + 1)]


def read_committed(directory: str) -> Iterator[dict]:
    """Yield every committed record of a :class:`FileSink` directory, partitioned or not:
    a partitioned sink's records get their partition columns back from the directory names
    (as strings; ``None`` for the default partition) unless the rows kept them."""
    yield from _read_dir(directory, {})


def _read_dir(directory: str, values: dict) -> Iterator[dict]:
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith("part-"):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    record = json.loads(line)
                    for col, value in values.items():
                        record.setdefault(col, value)
                    yield record
        elif (got := read_partition_dir(name)) is not None and os.path.isdir(path):
            yield from _read_dir(path, {**values, got[0]: got[1]})
