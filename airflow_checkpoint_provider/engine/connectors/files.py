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
"""

from __future__ import annotations

import errno
import json
import logging
import os
import uuid
from collections.abc import Iterator

import msgspec

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

log = logging.getLogger(__name__)

STAGING = "_staging"
STAGED_EXT = ".inprogress"


class FileSink(Sink):
    """Write records as JSON lines with exactly-once semantics.

    :param directory: output directory (created if missing).
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        return _FileSinkWriter(self.directory, ctx)

    def check_restored_transactions(self, transactions: list[object], *, location: str) -> None:
        check_transactions(transactions, location=location)

    def discard_committed_after(self, operator_uid: str, job_id: str, checkpoint_id: int) -> list[str]:
        """Delete the part files that job ``job_id`` committed for checkpoints after
        ``checkpoint_id`` (the job restores an older checkpoint because a newer one is
        corrupt: their records are replayed and committed again). Returns the deleted names."""
        if not os.path.isdir(self.directory):
            return []
        doomed = []
        for name in sorted(os.listdir(self.directory)):
            p = parse_part_file_name(name)  # the old encoding is ambiguous: never deleted
            if (p is not None and p.operator_uid == operator_uid and p.job_id == job_id
                    and p.checkpoint_id is not None and p.checkpoint_id > checkpoint_id):
                os.remove(os.path.join(self.directory, name))
                doomed.append(name)
        if doomed:
            _fsync_dir(self.directory)
            log.warning("File sink %r: discarded %d part files committed after checkpoint %d of "
                        "job %s (they are written again from checkpoint %d)", operator_uid,
                        len(doomed), checkpoint_id, job_id, checkpoint_id)
        return doomed

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str]:
        """Delete the ``.inprogress`` files job ``job_id`` staged for ``operator_uid`` (called
        for an ended job whose checkpoint a new job restored). Returns the deleted names."""
        staging = os.path.join(self.directory, STAGING)
        if not os.path.isdir(staging):
            return []
        doomed = [n for n in sorted(os.listdir(staging))
                  if _staged_of(n, operator_uid, job_id) is not None]
        for name in doomed:
            os.remove(os.path.join(staging, name))
        if doomed:
            log.info("File sink %r: removed %d staged files left by ended job %s", operator_uid,
                     len(doomed), job_id)
        return doomed

    def lineage_dataset(self) -> tuple[str, str]:
        return dataset_for_location(self.directory)

    def describe(self) -> str:
        return f"files({self.directory})"


def _staged_of(name: str, operator_uid: str, job_id: str) -> SinkName | None:
    """``name`` parsed if it is a file ``job_id`` staged for ``operator_uid``. Files of the
    old ``-`` encoding are never matched: they could be another job's (they are invisible to
    readers; remove them by hand once no snapshot names them)."""
    p = parse_staged_file_name(name)
    if (p is None or p.ext != STAGED_EXT or p.operator_uid != operator_uid
            or p.job_id != job_id):
        return None
    return p


def check_transactions(transactions: list[object], *, location: str) -> list[SinkTransaction]:
    """Decode transactions (restored ones come from a snapshot: untrusted): both names must
    be bare file names, ``staging`` a staged ``.inprogress`` file and ``final`` a ``part-``
    file, so a commit only renames inside the sink's directory; in this encoding both must
    name the same uid, job, subtask and checkpoint. Anything else is a
    :class:`~..errors.CorruptCheckpointError` naming the field and ``location``. (Old-encoding
    names are attributed by the writer, which knows its uid.)"""
    out, owners = [], set()
    for i, raw in enumerate(transactions):
        txn = raw if isinstance(raw, SinkTransaction) else SinkTransaction.from_dict(
            raw, location=location, field=f"transactions[{i}]")
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
        out.append(txn)
    one_owner(owners, location)
    return out


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


class _FileSinkWriter(SinkWriter):
    def __init__(self, directory: str, ctx: SourceContext) -> None:
        self.dir = directory
        self.staging_dir = os.path.join(directory, STAGING)
        os.makedirs(self.staging_dir, exist_ok=True)
        self.ctx = ctx
        self.sink_name = f"file sink {ctx.operator_uid!r} ({directory})"
        # the full job id: two jobs whose ids share a prefix must never share file names
        self.prefix = staged_prefix(ctx.operator_uid, ctx.job_id)
        self._file = None
        self._name: str | None = None
        self._token = ""

    def _open(self) -> None:
        self._token = uuid.uuid4().hex[:8]
        self._name = staged_file_name(self.ctx.operator_uid, self.ctx.job_id, self.ctx.attempt,
                                      self.ctx.subtask_index, self._token, STAGED_EXT)
        own(self._name, parse_staged_file_name(self._name), sink=self.sink_name)
        self._file = open(os.path.join(self.staging_dir, self._name), "wb")

    def write(self, records: list[dict]) -> None:
        """One compact JSON object per line, UTF-8. Encoded by msgspec (C, ~40x faster than
        ``json.dumps`` per record); a batch msgspec cannot encode (e.g. a dict key that is
        not a string or an integer) goes through ``json.dumps``. NaN and infinities are
        written as ``null`` by msgspec (``json.dumps`` wrote the non-standard ``NaN``)."""
        if self._file is None:
            self._open()
        try:
            data = _JSON.encode_lines(records)
        except (TypeError, msgspec.EncodeError, OverflowError):
            data = "".join(json.dumps(r, separators=(",", ":")) + "\n"
                           for r in records).encode("utf-8")
        self._file.write(data)

    def pre_commit(self, checkpoint_id: int) -> list[object]:
        """1. flush, fsync and close the epoch's file; 2. rename it to carry the checkpoint
        id (the final name is derived from it, so a transaction cannot point elsewhere);
        3. fsync the staging directory (the rename must survive a crash)."""
        if self._file is None:
            return []
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        c = self.ctx
        staged = staged_file_name(c.operator_uid, c.job_id, c.attempt, c.subtask_index,
                                  self._token, STAGED_EXT, checkpoint_id)
        final = final_name(c.operator_uid, c.job_id, checkpoint_id, c.subtask_index)
        _check_pair(own(staged, parse_staged_file_name(staged), sink=self.sink_name),
                    own(final, parse_part_file_name(final), sink=self.sink_name),
                    self.sink_name, 0)
        os.rename(os.path.join(self.staging_dir, self._name),
                  os.path.join(self.staging_dir, staged))
        _fsync_dir(self.staging_dir)
        self._file, self._name = None, None
        return [{"staging": staged, "final": final}]

    def _transactions(self, transactions: list[object]) -> list[SinkTransaction]:
        where = f"(file sink {self.ctx.operator_uid!r} transactions for {self.dir})"
        return check_transactions(transactions, location=where)

    def _check_restored(self, txns: list[SinkTransaction]) -> None:
        """Every restored transaction names this sink's uid and one job, in both names."""
        where = f"snapshot restored into {self.sink_name}"
        rule = RestoredTransactions(operator_uid=self.ctx.operator_uid, job_id=self.ctx.job_id,
                                    location=where)
        uid = self.ctx.operator_uid
        for i, t in enumerate(txns):
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
        for txn in self._transactions(transactions):
            src = os.path.join(self.staging_dir, txn.staging)
            dst = os.path.join(self.dir, txn.final)
            try:
                moved = _rename_no_replace(src, dst)
            except FileNotFoundError:
                if not os.path.exists(dst):
                    raise RuntimeError(
                        f"file sink {self.ctx.operator_uid!r}: transaction {txn.staging} is "
                        f"neither staged nor committed in {self.dir}; its data is lost"
                    ) from None
                continue
            if not moved:
                raise RuntimeError(
                    f"file sink {self.ctx.operator_uid!r}: committing {txn.staging} would "
                    f"replace the existing part file {txn.final} in {self.dir}; refusing (a "
                    "committed file is never overwritten)")
        if transactions:
            _fsync_dir(self.dir)

    def recover(self, transactions: list[object]) -> None:
        # Every subtask receives every restored transaction; subtask 0 commits and aborts.
        txns = self._transactions(transactions)  # every subtask refuses a crafted snapshot
        self._check_restored(txns)
        if self.ctx.subtask_index != 0:
            return
        self.commit(txns)
        keep = {t.staging for t in txns}
        for name in os.listdir(self.staging_dir):
            staged = _staged_of(name, self.ctx.operator_uid, self.ctx.job_id)
            if staged is None or name in keep:
                continue  # another job's, or another sink's, or kept
            if staged.attempt != self.ctx.attempt:
                os.remove(os.path.join(self.staging_dir, name))
                log.debug("aborted staged transaction %s", name)

    def close(self) -> None:
        if self._file is not None:
            # Records after the last checkpoint are not part of any transaction to commit.
            self._file.close()
            self._file = None


def read_committed(directory: str) -> Iterator[dict]:
    """Yield every committed record of a :class:`FileSink` directory."""
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)
