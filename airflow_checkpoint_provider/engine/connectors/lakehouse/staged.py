"""What the exactly-once table sinks (Delta Lake, Iceberg) share: staged Parquet epochs and
idempotent commits.

Each sink subtask collects the records of a checkpoint epoch; at the barrier it writes them
to one staged Parquet file in the sink's staging directory, whose name goes into the
checkpoint (pre-commit). When the checkpoint completes, the file is appended to the table in
one table commit that carries the *application id* ``ckpt~<job id>~<operator uid>~<subtask>``
(:mod:`...sink_names`: ``~`` cannot occur in a name, so two jobs never share an id) and the
checkpoint id (Delta: an application transaction; Iceberg: snapshot summary
properties). A commit the table already holds (same application id, checkpoint id at least
as high) is skipped, so committing again after a restore never appends twice. After a
failure the restored checkpoint's transactions are committed if the table does not hold them
yet, and this job's other staged files are deleted.

A restored transaction (untrusted: it comes from a snapshot) must be exactly what its staged
file's name says -- this sink's uid, one job (this one or the job whose snapshot is
restored), the subtask, and the checkpoint id as its version -- so a snapshot cannot commit
under another job's application id or at a version that job has not reached.

A subclass says where the table is and how to read its schema, test for a commit and append
(:class:`StagedTableWriter`).
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ...changelog import OP_FIELD
from ...errors import BadRecordError
from ...extras import require
from ...fs.private import makedirs_mode
from ...fs.storage import LocalFileSystem, filesystem_for, join, strip_scheme
from ...snapshot.paths import corrupt, mapping, non_negative_int, safe_name, string
from ..base import ConnectorContext, Sink, SinkWriter
from ..capabilities import SupportsFencing, SupportsRelocation, Transaction
from ..files.modes import OUTPUT_DIR_MODE, OUTPUT_FILE_MODE, output_umask
from ..sink_names import (
    RestoredTransactions,
    app_id,
    legacy_owners,
    one_owner,
    own,
    parse_app_id,
    parse_staged_file_name,
    staged_file_name,
    staged_prefix,
)
from ..upsert import compact

log = logging.getLogger(__name__)

STAGING = "_ckpt_staging"
STAGED_EXT = ".parquet"
# the old ``-`` encoding (before sink_names): its fields are attributed by the writer, which
# knows its uid; here only the shape is checked
_OLD_APP_ID = re.compile(r"ckpt-[A-Za-z0-9._-]{1,200}-\d{1,5}")
_OLD_STAGED = re.compile(r"[A-Za-z0-9._-]+-a\d+-s\d+-c\d+-[0-9a-f]{8}\.parquet")
COMMIT_RETRIES = 5


def check_transactions(transactions: Sequence[object], *, location: str) -> list[dict]:
    """Restored transactions come from a snapshot (untrusted): ``staging`` must be a bare
    staged Parquet file name, ``app_id`` the application id of the same uid, job and subtask,
    and ``version`` the checkpoint id in the staged file's name."""
    out, owners = [], set()
    for i, raw in enumerate(transactions):
        f = f"transactions[{i}]"
        d = mapping(raw, field=f, location=location)
        staging = safe_name(d.get("staging"), field=f"{f}.staging", location=location)
        app = string(d.get("app_id"), field=f"{f}.app_id", location=location)
        version = non_negative_int(d.get("version"), field=f"{f}.version", location=location)
        staged, parsed_app = parse_staged_file_name(staging), parse_app_id(app)
        if staged is not None and parsed_app is not None:
            _check_pair(staged, parsed_app, version, location, f)
            owners.add((staged.job_id, staged.operator_uid))
        elif staged is not None or parsed_app is not None:
            raise corrupt(location, f, f"mixes name encodings: {staging!r}, {app!r}")
        elif not _OLD_STAGED.fullmatch(staging):
            raise corrupt(location, f"{f}.staging", f"must name a staged Parquet file, not {staging!r}")
        elif not _OLD_APP_ID.fullmatch(app):
            raise corrupt(location, f"{f}.app_id", f"is not a sink application id: {app!r}")
        else:
            owners_old = legacy_owners(staging, app, parse_app_id)
            if not owners_old:
                raise corrupt(location, f"{f}.app_id", f"{app!r} is not the application id of "
                              f"the staged file {staging!r}")
            if version != owners_old[0].checkpoint_id:
                raise corrupt(location, f"{f}.version", f"is {version}, but its staged file is "
                              f"of checkpoint {owners_old[0].checkpoint_id}")
        out.append({"staging": staging, "app_id": app, "version": version})
    one_owner(owners, location)
    return out


def _check_pair(staged, app, version: int, location: str, f: str) -> None:
    """The app id and version of a transaction are the ones its staged file's name gives."""
    if staged.ext != STAGED_EXT or staged.checkpoint_id is None:
        raise corrupt(location, f"{f}.staging", "must name a staged Parquet file of a checkpoint")
    for field in ("operator_uid", "job_id", "subtask"):
        if getattr(staged, field) != getattr(app, field):
            raise corrupt(location, f"{f}.app_id", f"names {field} {getattr(app, field)!r} but "
                          f"its staged file names {getattr(staged, field)!r}")
    if version != staged.checkpoint_id:
        raise corrupt(location, f"{f}.version", f"is {version}, but its staged file is of "
                      f"checkpoint {staged.checkpoint_id}")


def _list(fs, directory: str) -> list[str]:
    """Bare names of the files directly in ``directory`` (none if it does not exist)."""
    return [p for p in fs.list_files(directory) if "/" not in p]


class StagedTableSink(Sink, SupportsFencing, SupportsRelocation):
    """Base of the table sinks: subclasses set :attr:`staging_dir`, :attr:`writer_class`
    and :attr:`extra` (the package extra their library comes with)."""

    writer_class: type[StagedTableWriter]
    extra: str
    staging_dir: str
    #: modes of the table files the library writes on a local file system (:func:`..files.sink.output_umask`)
    file_mode: int = OUTPUT_FILE_MODE
    dir_mode: int = OUTPUT_DIR_MODE

    def create_writer(self, ctx: ConnectorContext) -> SinkWriter:
        require(self.extra)
        return self.writer_class(self, ctx)

    def check_restored_transactions(self, transactions: Sequence[Transaction], *,
                                    location: str) -> None:
        check_transactions(transactions, location=location)

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str]:
        """Delete the files job ``job_id`` staged for ``operator_uid`` (an ended job whose
        checkpoint a new job restored: its uncommitted records are replayed)."""
        fs = filesystem_for(self.staging_dir)
        doomed = [n for n in _list(fs, self.staging_dir)
                  if _staged_of(n, operator_uid, job_id) is not None]
        for name in doomed:
            fs.remove_file(join(self.staging_dir, name))
        return doomed


def _staged_of(name: str, operator_uid: str, job_id: str):
    """``name`` parsed if it is a Parquet file ``job_id`` staged for ``operator_uid``. Old
    ``-`` encoded names are never matched (they could be another job's)."""
    p = parse_staged_file_name(name)
    if (p is None or p.ext != STAGED_EXT or p.operator_uid != operator_uid
            or p.job_id != job_id):
        return None
    return p


class StagedTableWriter(SinkWriter):
    """One sink subtask. Subclasses implement :meth:`table_schema`, :meth:`committed` and
    :meth:`append`, and name the exceptions of a lost commit race in :attr:`conflicts`."""

    accepts_arrow = True
    kind = "table"
    conflicts: tuple[type[BaseException], ...] = ()

    def __init__(self, sink: StagedTableSink, ctx: ConnectorContext) -> None:
        self.sink, self.ctx = sink, ctx
        self.fs = filesystem_for(sink.staging_dir)
        if isinstance(self.fs, LocalFileSystem):
            # the directory holding the staging one (a Delta table's root, an Iceberg
            # warehouse's _ckpt_staging) gets the table's mode, not the staging's 0700
            makedirs_mode(os.path.dirname(strip_scheme(sink.staging_dir)), sink.dir_mode)
        self.prefix = staged_prefix(ctx.operator_uid, ctx.job_id)
        self.app_id = app_id(ctx.job_id, ctx.operator_uid, ctx.subtask_index)
        self.sink_name = f"{self.kind} sink {ctx.operator_uid!r} ({sink.describe()})"
        own(self.app_id, parse_app_id(self.app_id), sink=self.sink_name)
        self.batches: list[pa.RecordBatch] = []
        #: upsert mode (connectors/upsert.py): the key columns, else empty
        self.key: list[str] = list(getattr(sink, "key", []) or [])

    # -- what a table format provides ------------------------------------------------------
    def table_schema(self) -> pa.Schema | None:
        """The table's Arrow schema, ``None`` if the table does not exist yet."""
        raise NotImplementedError

    def committed(self, app_id: str, version: int) -> bool:
        """Whether the table holds a commit of ``app_id`` at ``version`` or later."""
        raise NotImplementedError

    def append(self, data: pa.Table, txn: dict) -> None:
        """Append ``data`` in one commit recording ``txn``'s app id and version."""
        raise NotImplementedError

    def upsert(self, data: pa.Table, txn: dict) -> None:
        """Apply a compacted epoch (:func:`..upsert.compact`: ``_op`` ``+U`` or ``-D`` per
        key) in one commit recording ``txn``'s app id and version."""
        raise NotImplementedError

    def commit_metadata(self, txn: dict) -> dict[str, str]:
        return {"ckpt.job_id": self.ctx.job_id, "ckpt.operator_uid": self.ctx.operator_uid,
                "ckpt.app_id": txn["app_id"], "ckpt.checkpoint_id": str(txn["version"])}

    # -- the two-phase commit ---------------------------------------------------------------
    def write(self, records) -> None:
        if isinstance(records, pa.RecordBatch):
            self.batches.append(records)
        elif records:
            try:
                if self.key:  # a -D record may carry the key only: every record's fields
                    names = dict.fromkeys(name for r in records for name in r)
                    self.batches.append(pa.RecordBatch.from_pydict(
                        {n: [r.get(n) for r in records] for n in names}))
                    return
                self.batches.append(pa.RecordBatch.from_pylist(records))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise BadRecordError(f"{self.kind} sink {self.ctx.operator_uid!r}: records do "
                                     f"not convert to Arrow: {exc}") from exc

    def _epoch_table(self) -> pa.Table:
        try:
            return pa.Table.from_batches(self.batches).combine_chunks()
        except pa.ArrowInvalid:
            # batches whose schemas differ (dict records, a field missing in some batch)
            try:
                return pa.concat_tables([pa.Table.from_batches([b]) for b in self.batches],
                                        promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise BadRecordError(self._type_conflict(exc)) from exc

    def _type_conflict(self, exc: Exception) -> str:
        """Which column the epoch's records give values of different types (e.g. a key
        that is an int in some records and a str in others): one column, one type."""
        seen: dict[str, set[str]] = {}
        for b in self.batches:
            for field in b.schema:
                if not pa.types.is_null(field.type):
                    seen.setdefault(field.name, set()).add(str(field.type))
        mixed = {n: sorted(t) for n, t in seen.items() if len(t) > 1}
        what = "; ".join(f"column {n!r} is {' and '.join(t)}" for n, t in mixed.items())
        return (f"{self.kind} sink {self.ctx.operator_uid!r}: the records of one epoch give a "
                f"column values of different types ({what or exc}); every record must give "
                f"a column one type (cast them before the sink, e.g. str(key))")

    def pre_commit(self, checkpoint_id: int) -> list[Transaction]:
        if not self.batches:
            return []
        table = self._epoch_table()
        self.batches = []
        if self.key:
            table = compact(table, self.key, self.sink_name)
        self._check_schema(table)
        c = self.ctx
        name = staged_file_name(c.operator_uid, c.job_id, c.attempt, c.subtask_index,
                                uuid.uuid4().hex[:8], STAGED_EXT, checkpoint_id)
        _check_pair(own(name, parse_staged_file_name(name), sink=self.sink_name),
                    parse_app_id(self.app_id), checkpoint_id, self.sink_name, "transaction")
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.fs.write_bytes(join(self.sink.staging_dir, name), buf.getvalue())
        return [{"staging": name, "app_id": self.app_id, "version": checkpoint_id}]

    def _check_schema(self, table: pa.Table) -> None:
        """A batch that does not fit the existing table is an error naming the column (the
        staged file would otherwise fail at every commit after the checkpoint completed)."""
        schema = self.table_schema()
        if schema is None:
            return
        for field in table.schema:
            if self.key and field.name == OP_FIELD:
                continue
            if field.name not in schema.names:
                raise BadRecordError(
                    f"{self.kind} sink {self.ctx.operator_uid!r}: column {field.name!r} is not "
                    f"in the table {self.sink.describe()} (columns: {', '.join(schema.names)})")
            want = schema.field(field.name).type
            if not _compatible(field.type, want):
                raise BadRecordError(
                    f"{self.kind} sink {self.ctx.operator_uid!r}: column {field.name!r} is "
                    f"{field.type}, the table {self.sink.describe()} has {want}")

    def commit(self, transactions: Sequence[Transaction]) -> None:
        where = f"({self.kind} sink {self.ctx.operator_uid!r} transactions)"
        for txn in check_transactions(transactions, location=where):
            self._commit_one(txn)

    def _commit_one(self, txn: dict) -> None:
        path = join(self.sink.staging_dir, txn["staging"])
        for attempt in range(COMMIT_RETRIES):
            if self.committed(txn["app_id"], txn["version"]):
                break
            if not self.fs.exists(path):
                raise RuntimeError(
                    f"{self.kind} sink {self.ctx.operator_uid!r}: transaction {txn['staging']} "
                    f"is neither staged nor committed in {self.sink.describe()}; its data is lost")
            data = pq.read_table(io.BytesIO(self.fs.read_bytes(path)))
            try:
                # the library creates the table's files: private by default (issue 50)
                with output_umask(self.sink.file_mode, self.sink.dir_mode):
                    (self.upsert if self.key else self.append)(data, txn)
                break
            except self.conflicts:
                # another subtask committed (or created the table) first: check again
                if attempt == COMMIT_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        self.fs.remove_file(path)

    def _check_restored(self, txns: list[dict]) -> None:
        """Every restored transaction names this sink's uid and one job, in its staged
        file's name and its app id (old ``-`` encoded ones: attributed with the uid known)."""
        where = f"snapshot restored into {self.sink_name}"
        uid = self.ctx.operator_uid
        rule = RestoredTransactions(operator_uid=uid, job_id=self.ctx.job_id, location=where)
        for i, t in enumerate(txns):
            f = f"transactions[{i}]"
            staged = rule.check(parse_staged_file_name(t["staging"], operator_uid=uid),
                                t["staging"], f"{f}.staging")
            app = rule.check(parse_app_id(t["app_id"], operator_uid=uid), t["app_id"],
                             f"{f}.app_id")
            _check_pair(staged, app, t["version"], where, f)
            if staged.legacy and t["app_id"] != f"ckpt-{staged.job_id}-{uid}-{staged.subtask}":
                raise rule.refuse(f"{f}.app_id", f"{t['app_id']!r} is not the application id "
                                  f"of {t['staging']!r}")

    def recover(self, transactions: Sequence[Transaction]) -> None:
        where = f"({self.kind} sink {self.ctx.operator_uid!r} restored transactions)"
        txns = check_transactions(transactions, location=where)
        self._check_restored(txns)  # every subtask refuses a crafted snapshot
        if self.ctx.subtask_index != 0:
            return  # every subtask gets every restored transaction; subtask 0 commits them
        for txn in txns:
            self._commit_one(txn)
        keep = {t["staging"] for t in txns}
        for name in _list(self.fs, self.sink.staging_dir):
            staged = _staged_of(name, self.ctx.operator_uid, self.ctx.job_id)
            if staged is not None and name not in keep and staged.attempt != self.ctx.attempt:
                self.fs.remove_file(join(self.sink.staging_dir, name))

    def close(self) -> None:
        self.batches = []  # records after the last checkpoint belong to no transaction


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want or pa.types.is_null(got):
        return True
    if pa.types.is_integer(got) and pa.types.is_integer(want):
        return True
    if pa.types.is_floating(got) and pa.types.is_floating(want):
        return True
    string_types = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    return any(f(got) for f in string_types) and any(f(want) for f in string_types)
