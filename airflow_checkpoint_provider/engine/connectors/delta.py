"""Exactly-once appends to a Delta Lake table (delta-rs), with Delta's application
transactions.

Each sink subtask collects the records of a checkpoint epoch; at the barrier it writes them
to a staged Parquet file (``<table>/_ckpt_staging/``) whose name goes into the checkpoint
(pre-commit). When the checkpoint completes, the staged file is appended to the table in one
Delta commit that also records the application transaction ``(app_id, version)`` with
``app_id = ckpt-<job id>-<operator uid>-<subtask>`` and ``version = checkpoint id`` (Delta's
``txn`` action, what Flink's and Spark's Delta sinks use for idempotence). A commit whose
version the table already holds for its app id is skipped, so committing again after a
restore never appends twice. After a failure the restored checkpoint's transactions are
committed (if the table does not hold them yet) and this job's other staged files are
deleted.

The commit's ``custom_metadata`` names the job, the operator uid and the checkpoint.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from ..checkpoint.storage import filesystem_for, join
from ..errors import BadRecordError, ConfigurationError
from ..extras import require
from ..snapshot.paths import corrupt, mapping, non_negative_int, safe_name, string
from .base import Sink, SinkWriter, SourceContext

log = logging.getLogger(__name__)

STAGING = "_ckpt_staging"
_APP_ID = re.compile(r"^ckpt-[A-Za-z0-9._-]{1,200}-\d{1,5}$")
_STAGED = re.compile(r"^[A-Za-z0-9._-]+-a\d+-s\d+-c\d+-[0-9a-f]{8}\.parquet$")
COMMIT_RETRIES = 5


class DeltaSink(Sink):
    """Append records (dicts or Arrow batches) to the Delta table at ``table_uri``, exactly
    once. The table is created by the first commit if it does not exist.

    :param table_uri: a local path (``s3://`` URIs work with ``storage_options``).
    :param partition_by: partition columns when the sink creates the table.
    :param storage_options: passed to delta-rs (object store credentials, endpoint).
    """

    def __init__(self, table_uri: str, *, partition_by: list[str] | None = None,
                 storage_options: dict[str, str] | None = None) -> None:
        if not isinstance(table_uri, str) or not table_uri:
            raise ConfigurationError(f"DeltaSink: table_uri {table_uri!r} is not a path or URI")
        self.table_uri = table_uri if "://" in table_uri else os.path.abspath(table_uri)
        self.partition_by = list(partition_by or [])
        self.storage_options = dict(storage_options or {})

    @property
    def staging_dir(self) -> str:
        return join(self.table_uri, STAGING)

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        require("delta")
        return _DeltaWriter(self, ctx)

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

    def describe(self) -> str:
        return f"delta({self.table_uri})"


def check_transactions(transactions: list[object], *, location: str) -> list[dict]:
    """Restored transactions come from a snapshot (untrusted): ``staging`` must be a bare
    staged Parquet file name, ``app_id`` one of this sink's ids, ``version`` a checkpoint id."""
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


class _DeltaWriter(SinkWriter):
    accepts_arrow = True

    def __init__(self, sink: DeltaSink, ctx: SourceContext) -> None:
        self.sink, self.ctx = sink, ctx
        self.fs = filesystem_for(sink.staging_dir)
        self.prefix = f"{ctx.operator_uid}-{ctx.job_id}-"
        self.app_id = f"ckpt-{ctx.job_id}-{ctx.operator_uid}-{ctx.subtask_index}"
        self.batches: list[pa.RecordBatch] = []

    def write(self, records) -> None:
        if isinstance(records, pa.RecordBatch):
            self.batches.append(records)
        elif records:
            try:
                self.batches.append(pa.RecordBatch.from_pylist(records))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise BadRecordError(f"Delta sink {self.ctx.operator_uid!r}: records do not "
                                     f"convert to Arrow: {exc}") from exc

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
        current = self._table()
        if current is None:
            return
        schema = pa.schema(current.schema().to_arrow())
        for field in table.schema:
            if field.name not in schema.names:
                raise BadRecordError(
                    f"Delta sink {self.ctx.operator_uid!r}: column {field.name!r} is not in "
                    f"the table {self.sink.table_uri} (columns: {', '.join(schema.names)})")
            want = schema.field(field.name).type
            if not _compatible(field.type, want):
                raise BadRecordError(
                    f"Delta sink {self.ctx.operator_uid!r}: column {field.name!r} is "
                    f"{field.type}, the table {self.sink.table_uri} has {want}")

    def _table(self):
        deltalake = require("delta")
        try:
            return deltalake.DeltaTable(self.sink.table_uri,
                                        storage_options=self.sink.storage_options or None)
        except deltalake.exceptions.TableNotFoundError:
            return None

    def commit(self, transactions: list[object]) -> None:
        where = f"(Delta sink {self.ctx.operator_uid!r} transactions for {self.sink.table_uri})"
        for txn in check_transactions(transactions, location=where):
            self._commit_one(txn)

    def _commit_one(self, txn: dict) -> None:
        deltalake = require("delta")
        path = join(self.sink.staging_dir, txn["staging"])
        for attempt in range(COMMIT_RETRIES):
            table = self._table()
            done = table is not None and (table.transaction_version(txn["app_id"]) or -1) >= txn["version"]
            if done:
                break
            if not self.fs.exists(path):
                raise RuntimeError(
                    f"Delta sink {self.ctx.operator_uid!r}: transaction {txn['staging']} is "
                    f"neither staged nor committed in {self.sink.table_uri}; its data is lost")
            data = pq.read_table(io.BytesIO(self.fs.read_bytes(path)))
            props = deltalake.CommitProperties(
                app_transactions=[deltalake.Transaction(txn["app_id"], txn["version"])],
                custom_metadata={"ckpt.job_id": self.ctx.job_id,
                                 "ckpt.operator_uid": self.ctx.operator_uid,
                                 "ckpt.checkpoint_id": str(txn["version"])})
            try:
                deltalake.write_deltalake(
                    table if table is not None else self.sink.table_uri, data, mode="append",
                    partition_by=self.sink.partition_by or None, commit_properties=props,
                    storage_options=self.sink.storage_options or None)
                break
            except deltalake.exceptions.CommitFailedError:
                # another subtask committed (or created the table) first: check again
                if attempt == COMMIT_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        self.fs.remove_file(path)

    def recover(self, transactions: list[object]) -> None:
        where = f"(Delta sink {self.ctx.operator_uid!r} restored transactions)"
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
