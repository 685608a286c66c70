"""What the exactly-once table sinks (Delta Lake, Iceberg) share: staged Parquet epochs and
idempotent commits.

Each sink subtask collects the records of a checkpoint epoch; at the barrier it writes them
to one staged Parquet file in the sink's staging directory, whose name goes into the
checkpoint (pre-commit). When the checkpoint completes, the file is appended to the table in
one table commit that carries the *application id* ``ckpt-<job id>-<operator uid>-<subtask>``
and the checkpoint id (Delta: an application transaction; Iceberg: snapshot summary
properties). A commit the table already holds (same application id, checkpoint id at least
as high) is skipped, so committing again after a restore never appends twice. After a
failure the restored checkpoint's transactions are committed if the table does not hold them
yet, and this job's other staged files are deleted.

A subclass says where the table is and how to read its schema, test for a commit and append
(:class:`StagedTableWriter`).
"""

from __future__ import annotations

import io
import logging
import re
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from ..checkpoint.storage import filesystem_for, join
from ..errors import BadRecordError
from ..extras import require
from ..snapshot.paths import corrupt, mapping, non_negative_int, safe_name, string
from .base import Sink, SinkWriter, SourceContext

log = logging.getLogger(__name__)

STAGING = "_ckpt_staging"
_APP_ID = re.compile(r"^ckpt-[A-Za-z0-9._-]{1,200}-\d{1,5}$")
_STAGED = re.compile(r"^[A-Za-z0-9._-]+-a\d+-s\d+-c\d+-[0-9a-f]{8}\.parquet$")
COMMIT_RETRIES = 5


def check_transactions(transactions: list[object], *, location: str) -> list[dict]:
    """Restored transactions come from a snapshot (untrusted): ``staging`` must be a bare
    staged Parquet file name, ``app_id`` one of these sinks' ids, ``version`` a checkpoint id."""
    out = []
    for i, raw in enumerate(transactions):
        f = f"transactions[{i}]"
        d = mapping(raw, field=f, location=location)
        staging = safe_name(d.get("staging"), field=f"{f}.staging", location=location)
        if not _STAGED.match(staging):
            raise corrupt(location, f"{f}.staging", f"must name a staged Parquet file, not {staging!r}")
        app_id = string(d.get("app_id"), field=f"{f}.app_id", location=location)
        if not _APP_ID.match(app_id):
            raise corrupt(location, f"{f}.app_id", f"is not a sink application id: {app_id!r}")
        version = non_negative_int(d.get("version"), field=f"{f}.version", location=location)
        out.append({"staging": staging, "app_id": app_id, "version": version})
    return out


def _list(fs, directory: str) -> list[str]:
    """Bare names of the files directly in ``directory`` (none if it does not exist)."""
    return [p for p in fs.list_files(directory) if "/" not in p]


class StagedTableSink(Sink):
    """Base of the table sinks: subclasses set :attr:`staging_dir`, :attr:`writer_class`
    and :attr:`extra` (the package extra their library comes with)."""

    writer_class: type[StagedTableWriter]
    extra: str
    staging_dir: str

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        require(self.extra)
        return self.writer_class(self, ctx)

    def check_restored_transactions(self, transactions: list[object], *, location: str) -> None:
        check_transactions(transactions, location=location)

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str]:
        """Delete the files job ``job_id`` staged for ``operator_uid`` (an ended job whose
        checkpoint a new job restored: its uncommitted records are replayed)."""
        fs = filesystem_for(self.staging_dir)
        prefix = f"{operator_uid}-{job_id}-"
        doomed = [n for n in _list(fs, self.staging_dir)
                  if n.startswith(prefix) and _STAGED.match(n)]
        for name in doomed:
            fs.remove_file(join(self.staging_dir, name))
        return doomed


class StagedTableWriter(SinkWriter):
    """One sink subtask. Subclasses implement :meth:`table_schema`, :meth:`committed` and
    :meth:`append`, and name the exceptions of a lost commit race in :attr:`conflicts`."""

    accepts_arrow = True
    kind = "table"
    conflicts: tuple[type[BaseException], ...] = ()

    def __init__(self, sink: StagedTableSink, ctx: SourceContext) -> None:
        self.sink, self.ctx = sink, ctx
        self.fs = filesystem_for(sink.staging_dir)
        self.prefix = f"{ctx.operator_uid}-{ctx.job_id}-"
        self.app_id = f"ckpt-{ctx.job_id}-{ctx.operator_uid}-{ctx.subtask_index}"
        self.batches: list[pa.RecordBatch] = []

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

    def commit_metadata(self, txn: dict) -> dict[str, str]:
        return {"ckpt.job_id": self.ctx.job_id, "ckpt.operator_uid": self.ctx.operator_uid,
                "ckpt.app_id": txn["app_id"], "ckpt.checkpoint_id": str(txn["version"])}

    # -- the two-phase commit ---------------------------------------------------------------
    def write(self, records) -> None:
        if isinstance(records, pa.RecordBatch):
            self.batches.append(records)
        elif records:
            try:
                self.batches.append(pa.RecordBatch.from_pylist(records))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise BadRecordError(f"{self.kind} sink {self.ctx.operator_uid!r}: records do "
                                     f"not convert to Arrow: {exc}") from exc

    def _epoch_table(self) -> pa.Table:
        try:
            return pa.Table.from_batches(self.batches).combine_chunks()
        except pa.ArrowInvalid:
            # batches whose schemas differ (dict records, a field missing in some batch)
            return pa.concat_tables([pa.Table.from_batches([b]) for b in self.batches],
                                    promote_options="permissive")

    def pre_commit(self, checkpoint_id: int) -> list[object]:
        if not self.batches:
            return []
        table = self._epoch_table()
        self.batches = []
        self._check_schema(table)
        name = (f"{self.prefix}a{self.ctx.attempt}-s{self.ctx.subtask_index}-c{checkpoint_id}-"
                f"{uuid.uuid4().hex[:8]}.parquet")
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
            if field.name not in schema.names:
                raise BadRecordError(
                    f"{self.kind} sink {self.ctx.operator_uid!r}: column {field.name!r} is not "
                    f"in the table {self.sink.describe()} (columns: {', '.join(schema.names)})")
            want = schema.field(field.name).type
            if not _compatible(field.type, want):
                raise BadRecordError(
                    f"{self.kind} sink {self.ctx.operator_uid!r}: column {field.name!r} is "
                    f"{field.type}, the table {self.sink.describe()} has {want}")

    def commit(self, transactions: list[object]) -> None:
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
                self.append(data, txn)
                break
            except self.conflicts:
                # another subtask committed (or created the table) first: check again
                if attempt == COMMIT_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        self.fs.remove_file(path)

    def recover(self, transactions: list[object]) -> None:
        where = f"({self.kind} sink {self.ctx.operator_uid!r} restored transactions)"
        txns = check_transactions(transactions, location=where)
        if self.ctx.subtask_index != 0:
            return  # every subtask gets every restored transaction; subtask 0 commits them
        for txn in txns:
            self._commit_one(txn)
        current = f"a{self.ctx.attempt}-"
        keep = {t["staging"] for t in txns}
        for name in _list(self.fs, self.sink.staging_dir):
            if (name.startswith(self.prefix) and name not in keep and _STAGED.match(name)
                    and not name[len(self.prefix):].startswith(current)):
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
