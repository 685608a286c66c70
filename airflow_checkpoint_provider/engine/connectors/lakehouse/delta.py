"""Exactly-once appends to a Delta Lake table (delta-rs) with Delta's application
transactions: the epoch protocol of :mod:`.staged`, where a commit records the ``txn``
action ``(app_id, version = checkpoint id)`` (what Flink's and Spark's Delta sinks use for
idempotence) and ``DeltaTable.transaction_version(app_id)`` tells whether the table already
holds it. Staged files live in ``<table>/_ckpt_staging/``.
"""

from __future__ import annotations

import os

import pyarrow as pa

from ...changelog import OP_FIELD
from ...errors import ConfigurationError
from ...extras import require
from ...fs.storage import join
from ..base import ConnectorContext, dataset_for_location
from ..capabilities import SupportsUpsert
from ..files.modes import OUTPUT_DIR_MODE, OUTPUT_FILE_MODE, check_output_modes
from ..upsert import split, upsert_key
from .staged import STAGING, StagedTableSink, StagedTableWriter


class _DeltaWriter(StagedTableWriter):
    kind = "Delta"
    sink: DeltaSink

    def __init__(self, sink: DeltaSink, ctx: ConnectorContext) -> None:
        super().__init__(sink, ctx)
        self.deltalake = require("delta")
        self.conflicts = (self.deltalake.exceptions.CommitFailedError,)

    def _table(self):
        try:
            return self.deltalake.DeltaTable(self.sink.table_uri,
                                             storage_options=self.sink.storage_options or None)
        except self.deltalake.exceptions.TableNotFoundError:
            return None

    def table_schema(self) -> pa.Schema | None:
        table = self._table()
        return None if table is None else pa.schema(table.schema().to_arrow())

    def committed(self, app_id: str, version: int) -> bool:
        table = self._table()
        return table is not None and (table.transaction_version(app_id) or -1) >= version

    def append(self, data: pa.Table, txn: dict) -> None:
        dl = self.deltalake
        table = self._table()
        props = dl.CommitProperties(app_transactions=[dl.Transaction(txn["app_id"], txn["version"])],
                                    custom_metadata=self.commit_metadata(txn))
        dl.write_deltalake(table if table is not None else self.sink.table_uri, data,
                           mode="append", partition_by=self.sink.partition_by or None,
                           commit_properties=props,
                           storage_options=self.sink.storage_options or None)


    def upsert(self, data: pa.Table, txn: dict) -> None:
        """One ``MERGE`` on the key columns: ``-D`` rows delete, ``+U`` rows update or
        insert. A merge that changes nothing commits nothing (delta-rs): then an empty
        append records the app transaction, so committing it again (recovery) finds it
        instead of a missing staged file."""
        dl = self.deltalake
        table = self._table()
        props = dl.CommitProperties(app_transactions=[dl.Transaction(txn["app_id"], txn["version"])],
                                    custom_metadata=self.commit_metadata(txn))
        if table is None:  # a new table holds exactly the epoch's upserted rows
            rows, _ = split(data)
            dl.write_deltalake(self.sink.table_uri, rows, mode="append",
                               partition_by=self.sink.partition_by or None,
                               commit_properties=props,
                               storage_options=self.sink.storage_options or None)
            return
        # every column of the table is written (update_all sets only the source's columns:
        # a +U without one would keep the old value instead of null)
        for field in pa.schema(table.schema().to_arrow()):
            if field.name not in data.column_names:
                data = data.append_column(field, pa.nulls(data.num_rows, field.type))
        on = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in self.key)
        op = f"s.{_quoted(OP_FIELD)}"
        (table.merge(data, on, source_alias="s", target_alias="t", commit_properties=props,
                     error_on_type_mismatch=False)
         .when_matched_delete(predicate=f"{op} = '-D'")
         .when_matched_update_all(predicate=f"{op} = '+U'", except_cols=[OP_FIELD])
         .when_not_matched_insert_all(predicate=f"{op} = '+U'", except_cols=[OP_FIELD])
         .execute())
        if not self.committed(txn["app_id"], txn["version"]):
            schema = self.table_schema()
            assert schema is not None  # the merge above ran on it
            dl.write_deltalake(self._table(), schema.empty_table(), mode="append",
                               commit_properties=props,
                               storage_options=self.sink.storage_options or None)


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


class DeltaSink(StagedTableSink, SupportsUpsert):
    """Append records (dicts or Arrow batches) to the Delta table at ``table_uri``, exactly
    once. The table is created by the first commit if it does not exist.

    :param table_uri: a local path (``s3://`` URIs work with ``storage_options``).
    :param partition_by: partition columns when the sink creates the table.
    :param storage_options: passed to delta-rs (object store credentials, endpoint).
    :param mode: ``"append"``, or ``"upsert"`` with ``key``: each checkpoint's changelog is
        compacted per key and applied as one ``MERGE`` (:mod:`..upsert`), exactly once.
    :param key: the key columns of ``"upsert"``.
    :param file_mode: permission bits of the table's files on a local file system (the
        library writes them under the umask ``0o777 & ~(file_mode | dir_mode)``); default
        ``0o600``, the owner only: the records may be replicated database rows. Widen it for
        readers, e.g. ``0o640`` with ``dir_mode=0o750``. It must keep ``0o600``.
    :param dir_mode: permission bits of the directories the library creates; default
        ``0o700``. It must keep ``0o700``. The staging directory (``_ckpt_staging``: epochs
        not committed yet) is always ``0700`` with ``0600`` files, like checkpoints.
    """

    writer_class = _DeltaWriter
    extra = "delta"

    def __init__(self, table_uri: str, *, partition_by: list[str] | None = None,
                 storage_options: dict[str, str] | None = None, mode: str = "append",
                 key: list[str] | None = None, file_mode: int = OUTPUT_FILE_MODE,
                 dir_mode: int = OUTPUT_DIR_MODE) -> None:
        if not isinstance(table_uri, str) or not table_uri:
            raise ConfigurationError(f"DeltaSink: table_uri {table_uri!r} is not a path or URI")
        self.file_mode, self.dir_mode = check_output_modes(file_mode, dir_mode,
                                                           where=f"DeltaSink({table_uri!r})")
        self.mode = mode
        self.key = upsert_key(f"DeltaSink({table_uri!r})", mode, key)
        self.table_uri = table_uri if "://" in table_uri else os.path.abspath(table_uri)
        self.partition_by = list(partition_by or [])
        self.storage_options = dict(storage_options or {})
        self.staging_dir = join(self.table_uri, STAGING)

    def lineage_dataset(self) -> tuple[str, str]:
        return dataset_for_location(self.table_uri)

    def describe(self) -> str:
        return f"delta({self.table_uri}{', upsert' if self.key else ''})"
