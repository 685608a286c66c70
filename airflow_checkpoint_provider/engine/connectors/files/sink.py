"""An exactly-once file sink (two-phase commit over file renames).

Each sink subtask writes the records of one checkpoint epoch into a staging file under
``<directory>/_staging/``. At the checkpoint barrier the file is flushed, fsynced, closed and
renamed to carry the checkpoint id (pre-commit); its name goes into the checkpoint. When the
checkpoint completes, the staging file is renamed to its final name
``part-<uid>~<job>~c<checkpoint>~s<subtask>.jsonl`` (commit; the names are built in
:mod:`...sink_names`). A commit never replaces an existing part file. After a failure, the
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

Arrow batches (``accepts_arrow``): a ``RecordBatch`` is written without a dict per row --
grouped by partition with Arrow (:func:`.partitions.group_batch_by_partition`), the
partition columns dropped by selecting the others, the rows encoded column by column
(:mod:`.arrow_lines`) -- to the same files, byte for byte, as its ``to_pylist()`` dicts; a
batch of a type not proven identical takes the dict path.

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
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import BinaryIO

import msgspec
import numpy as np
import pyarrow as pa

from ...errors import ConfigurationError
from ...fs.private import makedirs_mode
from ..base import ConnectorContext, Sink, SinkWriter, dataset_for_location
from ..capabilities import (
    SupportsDiscardCommitted,
    SupportsFencing,
    SupportsRelocation,
    Transaction,
)
from ..sink_names import (
    RestoredTransactions,
    own,
    parse_part_file_name,
    parse_staged_file_name,
    part_file_name,
    staged_file_name,
    staged_prefix,
)
from .arrow_lines import json_lines, lines_buffer
from .cleanup import _discard_committed_in, _discard_staged_in, _staged_of, partition_dirs
from .committed import read_committed
from .errors import FileSinkRestoreError
from .modes import (
    OUTPUT_DIR_MODE,
    OUTPUT_FILE_MODE,
    _fsync_dir,
    check_output_modes,
    open_new_file,
    output_umask,
)
from .partitions import (
    check_columns,
    group_batch_by_partition,
    group_by_partition,
    without,
)
from .restore import (
    MAX_DIRECTORY_LENGTH,
    STAGED_EXT,
    STAGING,
    StagedTransaction,
    _check_own_staging,
    _check_pair,
    check_transactions,
    locate,
    not_found,
)

__all__ = ["DEFAULT_MAX_OPEN_WRITERS", "MAX_DIRECTORY_LENGTH", "OUTPUT_DIR_MODE",
           "OUTPUT_FILE_MODE", "STAGED_EXT", "STAGING", "FileSink", "FileSinkRestoreError",
           "StagedTransaction", "check_output_modes", "check_transactions", "final_name",
           "locate", "makedirs_mode", "not_found", "open_new_file", "output_umask",
           "partition_dirs", "read_committed"]

log = logging.getLogger(__name__)


DEFAULT_MAX_OPEN_WRITERS = 100


class FileSink(Sink, SupportsDiscardCommitted, SupportsFencing, SupportsRelocation):
    """Write records as JSON lines with exactly-once semantics.

    :param directory: output directory (created if missing).
    :param partition_by: partition columns: each record is written under
        ``<directory>/<col>=<value>/...`` (Hive-style; values escaped as Hive does, ``None``
        and ``""`` in ``__HIVE_DEFAULT_PARTITION__``; see :mod:`.partitions`). A record
        without one of the columns fails the job (:class:`~...errors.BadRecordError`).
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

    def create_writer(self, ctx: ConnectorContext) -> SinkWriter:
        return _FileSinkWriter(self, ctx)

    def check_restored_transactions(self, transactions: Sequence[Transaction], *,
                                    location: str) -> None:
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



_JSON = msgspec.json.Encoder()


def final_name(operator_uid: str, job_id: str, checkpoint_id: int, subtask: int) -> str:
    """The committed name of a subtask's file for a checkpoint."""
    return part_file_name(operator_uid, job_id, checkpoint_id, subtask)



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
    #: Arrow batches are written as they are (:meth:`_write_arrow`), lists of dicts too
    accepts_arrow = True
    accepts_rows = True

    def __init__(self, sink: FileSink, ctx: ConnectorContext) -> None:
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

    def write(self, records: list[dict] | pa.RecordBatch | pa.Table) -> None:
        if isinstance(records, pa.Table):
            for batch in records.to_batches():
                self.write(batch)
            return
        if isinstance(records, pa.RecordBatch):
            if records.num_rows and self._write_arrow(records):
                return
            records = records.to_pylist()  # empty, or a type only the dict path writes
        if not self.columns:
            self._file_for("").write(_encode(records))
            return
        groups = group_by_partition(records, self.columns, self._paths, where=self.sink_name)
        for path, rows in groups.items():
            if not self.keep_columns:
                rows = without(rows, self.columns)
            self._file_for(path).write(_encode(rows))

    def _write_arrow(self, batch: pa.RecordBatch) -> bool:
        """Write ``batch`` without turning its rows into dicts: 1. group its rows by
        partition (:func:`group_batch_by_partition`); 2. drop the partition columns by
        selecting the others (no copy); 3. encode every row to the bytes the dict path
        writes (:func:`json_lines`); 4. write each partition's rows (one ``take`` when the
        batch has several partitions) to its staged file. ``False`` (nothing written) when
        the batch needs the dict path: a type neither proves identical."""
        groups: list[tuple[str, np.ndarray | None]] = [("", None)]
        body = batch
        if self.columns:
            found = group_batch_by_partition(batch, self.columns, self._paths,
                                             where=self.sink_name)
            if found is None:
                return False
            groups = found
            if not self.keep_columns:
                body = batch.drop_columns(list(self.columns))
        lines = json_lines(body)
        if lines is None:
            return False
        if groups[0][1] is None:  # one partition, the rows in order
            self._file_for(groups[0][0]).write(lines_buffer(lines))
            return True
        lines = lines.take(pa.array(np.concatenate([rows for _, rows in groups])))
        start = 0
        for path, rows in groups:
            n = len(rows) if rows is not None else 0
            self._file_for(path).write(lines_buffer(lines.slice(start, n)))
            start += n
        return True

    def pre_commit(self, checkpoint_id: int) -> list[Transaction]:
        """Per staged file of the epoch: 1. flush, fsync and close it; 2. rename it to carry
        the checkpoint id (the final name is derived from it, so a transaction cannot point
        elsewhere); then 3. fsync the staging directory (the renames must survive a crash)."""
        if not self._staged:
            return []
        c = self.ctx
        out: list[Transaction] = []
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

    def commit(self, transactions: Sequence[Transaction]) -> None:
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

    def recover(self, transactions: Sequence[Transaction]) -> None:
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
