"""Exactly-once appends to an Apache Iceberg table (pyiceberg): the epoch protocol of
:mod:`.staged`, where each commit is one table snapshot whose summary carries
``ckpt.app_id`` and ``ckpt.checkpoint_id`` (as Flink's Iceberg sink records its checkpoint id
in the snapshot summary), and a commit is skipped when the table already holds that
application id at that checkpoint id or later.

The same commit sets the table property ``ckpt.committed.<app id>`` to the highest
checkpoint id committed under that application id (one per job, sink uid and subtask; as
Flink keeps ``flink.max-committed-checkpoint-id``). The replay check reads it, so it stays
right after ``expire_snapshots`` removed the snapshots carrying the summary, and it does not
scan the table's history. Only an application id without the property (it committed with a
version before it, or never) falls back to scanning the snapshots' summaries.

The catalog is any pyiceberg catalog, given by its properties (e.g. the SQL catalog on
SQLite or PostgreSQL: ``{"type": "sql", "uri": "sqlite:///...", "warehouse": "file:///..."}``).
"""

from __future__ import annotations

import os
import time
import warnings

import pyarrow as pa

from ...errors import ConfigurationError
from ..base import ConnectorContext, iceberg_dataset
from ..capabilities import SupportsUpsert
from ..files.modes import OUTPUT_DIR_MODE, OUTPUT_FILE_MODE, check_output_modes
from ..upsert import split, upsert_key
from .staged import STAGING, StagedTableSink, StagedTableWriter

#: table property prefix: ``ckpt.committed.<app id>`` -> highest checkpoint id committed
COMMITTED_PROPERTY = "ckpt.committed."


class _IcebergWriter(StagedTableWriter):
    kind = "Iceberg"
    sink: IcebergSink

    def __init__(self, sink: IcebergSink, ctx: ConnectorContext) -> None:
        super().__init__(sink, ctx)
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        # the subtasks open the catalog at once: the SQL catalog creates its own tables on
        # first use, and one subtask can lose that race
        self.catalog = _settled(lambda: load_catalog(sink.identifier.split(".")[0], **sink.catalog))
        # ValidationException: an upsert's delete found files another subtask added since
        # the table was loaded (the filter is checked against column statistics, so disjoint
        # keys can collide): reload and apply again, as for a lost commit race
        self.conflicts = (CommitFailedException, ValidationException)

    def _table(self):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.sink.identifier)
        except NoSuchTableError:
            return None

    def table_schema(self) -> pa.Schema | None:
        table = self._table()
        return None if table is None else table.schema().as_arrow()

    def committed(self, app_id: str, version: int) -> bool:
        table = self._table()
        if table is None:
            return False
        recorded = _recorded_version(table, app_id)
        if recorded is not None:
            return recorded >= version
        # no property: the app id committed (if at all) before the property existed
        for snap in table.snapshots():
            summary = snap.summary
            if summary is not None and summary.get("ckpt.app_id") == app_id:
                try:
                    if int(summary.get("ckpt.checkpoint_id", "-1")) >= version:
                        return True
                except ValueError:
                    continue
        return False

    def _create(self, schema: pa.Schema):
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        if not self.sink.create:
            raise ConfigurationError(f"Iceberg sink {self.ctx.operator_uid!r}: table "
                                     f"{self.sink.identifier} does not exist (create=False)")
        namespace = self.sink.identifier.rsplit(".", 1)[0]
        # another subtask may create them at the same moment: then the catalog reports it
        # as "already exists" or as a failed insert, and what it created is used
        try:
            self.catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        except Exception:  # noqa: BLE001 - a lost race surfaces as the catalog DB's error
            if not self.catalog.namespace_exists(namespace):
                raise
        try:
            return self.catalog.create_table(self.sink.identifier, schema=schema)
        except TableAlreadyExistsError:
            return self.catalog.load_table(self.sink.identifier)
        except Exception:  # noqa: BLE001
            if (table := self._table()) is None:
                raise
            return table

    def append(self, data: pa.Table, txn: dict) -> None:
        table = self._table() or self._create(data.schema)
        target = table.schema().as_arrow()
        # the staged file's columns in the table's order and types (checked at the barrier)
        columns = [data.column(f.name).cast(f.type) if f.name in data.schema.names
                   else pa.nulls(data.num_rows, f.type) for f in target]
        with table.transaction() as tx:
            tx.append(pa.Table.from_arrays(columns, schema=target),
                      snapshot_properties=self.commit_metadata(txn))
            _record_version(tx, table, txn)

    def upsert(self, data: pa.Table, txn: dict) -> None:
        """Copy-on-write in one table transaction: delete the rows of every key the epoch
        touched, append the epoch's ``+U`` rows; both snapshots carry the app id and
        checkpoint id, and the catalog commits them at once (or not at all). A delete by
        key filter rewrites the data files holding those keys (no equality delete files:
        the table stays readable by every reader, including this engine's table source)."""
        rows, _ = split(data)
        table = self._table() or self._create(rows.schema)
        target = table.schema().as_arrow()
        props = self.commit_metadata(txn)
        columns = [rows.column(f.name).cast(f.type) if f.name in rows.schema.names
                   else pa.nulls(rows.num_rows, f.type) for f in target]
        with table.transaction() as tx, warnings.catch_warnings():
            # "Delete operation did not match any records": new keys, nothing to rewrite
            warnings.simplefilter("ignore", UserWarning)
            tx.delete(_keys_filter(data, self.key), snapshot_properties=props)
            # appended even when empty: the snapshot records the commit, so committing the
            # transaction again (recovery) finds it instead of a missing staged file
            tx.append(pa.Table.from_arrays(columns, schema=target), snapshot_properties=props)
            _record_version(tx, table, txn)


def _recorded_version(table, app_id: str) -> int | None:
    """The highest checkpoint id the table property records for ``app_id`` (None: none)."""
    try:
        return int(table.properties[COMMITTED_PROPERTY + app_id])
    except (KeyError, ValueError):
        return None


def _record_version(tx, table, txn: dict) -> None:
    """In the commit's transaction: the table property of the commit's app id."""
    recorded = _recorded_version(table, txn["app_id"])
    version = max(int(txn["version"]), -1 if recorded is None else recorded)
    tx.set_properties({COMMITTED_PROPERTY + txn["app_id"]: str(version)})


def _keys_filter(data: pa.Table, key: list[str]):
    """The pyiceberg row filter matching the keys of ``data`` (``In`` for one key column,
    an ``Or`` of ``And``s of ``EqualTo`` for several)."""
    from pyiceberg.expressions import And, EqualTo, In, Or

    if len(key) == 1:
        return In(key[0], set(data.column(key[0]).to_pylist()))  # type: ignore[call-arg,arg-type]
    terms = [And(*(EqualTo(k, row[k]) for k in key)) if len(key) > 1  # type: ignore[call-arg,arg-type]
             else EqualTo(key[0], row[key[0]])  # type: ignore[call-arg,arg-type]
             for row in data.select(key).to_pylist()]
    return terms[0] if len(terms) == 1 else Or(*terms)


class IcebergSink(StagedTableSink, SupportsUpsert):
    """Append records (dicts or Arrow batches) to the Iceberg table ``identifier``
    (``namespace.table``), exactly once. The namespace and table are created from the first
    epoch's schema when they do not exist (``create=False`` refuses instead).

    :param catalog: pyiceberg catalog properties (``type``, ``uri``, ``warehouse``, ...).
    :param staging_dir: where epochs are staged between the barrier and the commit (local
        path or ``s3://``); default ``<warehouse>/_ckpt_staging/<identifier>`` for a local
        (``file://``) warehouse.
    :param mode: ``"append"``, or ``"upsert"`` with ``key``: each checkpoint's changelog is
        compacted per key and applied copy-on-write in one table transaction (delete the
        affected keys' rows, append their new rows; :mod:`..upsert`), exactly once.
    :param key: the key columns of ``"upsert"``.
    :param file_mode: permission bits of the table's files on a local file system (the
        library writes them under the umask ``0o777 & ~(file_mode | dir_mode)``); default
        ``0o600``, the owner only: the records may be replicated database rows. Widen it for
        readers, e.g. ``0o640`` with ``dir_mode=0o750``. It must keep ``0o600``.
    :param dir_mode: permission bits of the directories the library creates; default
        ``0o700``. It must keep ``0o700``. The staging directory (``_ckpt_staging``: epochs
        not committed yet) is always ``0700`` with ``0600`` files, like checkpoints.
    """

    slot_imports = ("pyiceberg.catalog.sql", "pyiceberg.io.pyarrow", "pyarrow.dataset")

    writer_class = _IcebergWriter
    extra = "iceberg"

    def __init__(self, identifier: str, *, catalog: dict[str, str], staging_dir: str | None = None,
                 create: bool = True, mode: str = "append", key: list[str] | None = None,
                 file_mode: int = OUTPUT_FILE_MODE, dir_mode: int = OUTPUT_DIR_MODE) -> None:
        self.file_mode, self.dir_mode = check_output_modes(file_mode, dir_mode,
                                                           where=f"IcebergSink({identifier!r})")
        self.mode = mode
        self.key = upsert_key(f"IcebergSink({identifier!r})", mode, key)
        if not isinstance(identifier, str) or identifier.count(".") < 1:
            raise ConfigurationError(f"IcebergSink: identifier {identifier!r} is not "
                                     "'namespace.table'")
        self.identifier = identifier
        self.catalog = dict(catalog)
        self.create = create
        if staging_dir is None:
            warehouse = self.catalog.get("warehouse", "")
            if not warehouse.startswith("file://") and "://" in warehouse or not warehouse:
                raise ConfigurationError(
                    f"IcebergSink {identifier!r}: give staging_dir= (the warehouse "
                    f"{warehouse!r} is not a local file:// path)")
            staging_dir = os.path.join(warehouse.removeprefix("file://"), STAGING, identifier)
        self.staging_dir = staging_dir

    def lineage_dataset(self) -> tuple[str, str]:
        return iceberg_dataset(self.catalog, self.identifier)

    def describe(self) -> str:
        return f"iceberg({self.identifier}{', upsert' if self.key else ''})"



def _settled(open_catalog, attempts: int = 5):
    """``open_catalog()``, again after a short pause if a concurrent first use made it fail."""
    for attempt in range(attempts):
        try:
            return open_catalog()
        except Exception:  # noqa: BLE001 - the catalog DB's error of a lost race
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")
