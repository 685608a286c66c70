"""Read Delta Lake and Iceberg tables: the data files of a table snapshot are the splits.

* Bounded: the data files of the table's current snapshot (or of ``version=`` for Delta),
  listed once when the job starts; each file is read as Arrow batches, its position (rows
  read) in the source's checkpointed state.
* Unbounded (``monitor_interval=``): the table is listed again every interval and the data
  files of new commits are read as new splits (an incremental append scan, with the
  discovery and bounded seen-set of the continuous :class:`~..files.source.FileSource`).

Split ids are data file paths relative to the table's directory (checked to stay inside it
when they come back from a snapshot). Local tables only. Tables whose files do not hold
every row as it reads (Delta partition columns or deletion vectors, Iceberg delete files)
are refused with an error that says so.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

from ...errors import ConfigurationError, RestoreError
from ...extras import require
from ..base import Source, SourceContext, SplitReader, dataset_for_location, iceberg_dataset
from ..files.readers import ParquetReader
from ..files.source import DEFAULT_PARQUET_BATCH_SIZE, path_inside


def _local(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(unquote(parsed.path) if parsed.scheme else uri)
    raise ConfigurationError(f"table at {uri!r}: only local tables can be read (file:// or a path)")


class _TableFilesSource(Source):
    """A table's data files as splits (see the module docstring)."""

    root: str

    def __init__(self, *, monitor_interval: float | None, retain_seconds: float,
                 batch_size: int) -> None:
        if monitor_interval is not None and not monitor_interval > 0:
            raise ConfigurationError(f"{type(self).__name__} option monitor_interval must be "
                                     f"> 0 seconds or None (got {monitor_interval!r})")
        self.monitor_interval = monitor_interval
        self.retain_seconds = retain_seconds
        self.batch_size = batch_size

    def data_files(self) -> list[str]:
        """Absolute paths of the data files of the snapshot to read."""
        raise NotImplementedError

    def splits(self) -> list[str]:
        out = []
        for path in self.data_files():
            rel = os.path.relpath(path, self.root)
            if rel.startswith(".."):
                raise ConfigurationError(f"{self.describe()}: data file {path} lies outside "
                                         f"the table directory {self.root}")
            out.append(PurePosixPath(*rel.split(os.sep)).as_posix())
        return sorted(out)

    def _path(self, split_id: str) -> str:
        path = path_inside(self.root, split_id)
        if path is None:
            raise RestoreError(f"{self.describe()}: split {split_id!r} is not a path inside "
                               f"the table directory")
        return path

    def modified_time(self, split_id: str) -> float:
        path = path_inside(self.root, split_id)
        if path is None:
            raise FileNotFoundError(split_id)
        return os.path.getmtime(path)

    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        where = f"table source {ctx.operator_uid!r} ({self.describe()}), split {split_id!r}"
        path = self._path(split_id)
        if position is not None and (not isinstance(position, int) or isinstance(position, bool)
                                     or position < 0):
            raise RestoreError(f"{where}: restored position {position!r} is not a row count")
        if not os.path.isfile(path):
            raise RestoreError(f"{where}: data file {path} no longer exists (vacuumed or "
                               "expired?)")
        return ParquetReader(path, where, int(position or 0), self.batch_size)


class DeltaTableSource(_TableFilesSource):
    """The rows of a Delta table (delta-rs), as Arrow batches.

    :param table_uri: a local path or ``file://`` URI.
    :param version: the table version to read (bounded); default the current one.
    :param monitor_interval: follow the table: read the files of new commits (appends).
    """

    def __init__(self, table_uri: str, *, version: int | None = None,
                 monitor_interval: float | None = None, retain_seconds: float = 3600.0,
                 batch_size: int = DEFAULT_PARQUET_BATCH_SIZE) -> None:
        super().__init__(monitor_interval=monitor_interval, retain_seconds=retain_seconds,
                         batch_size=batch_size)
        if version is not None and monitor_interval is not None:
            raise ConfigurationError("DeltaTableSource: version= reads one version; it cannot "
                                     "be combined with monitor_interval=")
        self.table_uri, self.version = table_uri, version
        self.root = _local(table_uri)

    def data_files(self) -> list[str]:
        deltalake = require("delta")
        dt = deltalake.DeltaTable(self.root, version=self.version)
        if dt.metadata().partition_columns:
            raise ConfigurationError(
                f"{self.describe()}: partitioned Delta tables are not supported (partition "
                "values are not in the data files)")
        features = set(dt.protocol().reader_features or ())
        if "deletionVectors" in features:
            raise ConfigurationError(f"{self.describe()}: tables with deletion vectors are "
                                     "not supported (deleted rows are still in the files)")
        return [_local(u) for u in dt.file_uris()]

    def lineage_dataset(self) -> tuple[str, str]:
        return dataset_for_location(self.table_uri)

    def describe(self) -> str:
        return f"delta({self.root})"


class IcebergTableSource(_TableFilesSource):
    """The rows of an Iceberg table (pyiceberg) with no delete files, as Arrow batches.

    :param identifier: ``namespace.table``.
    :param catalog: pyiceberg catalog properties.
    :param monitor_interval: follow the table: read the files of new snapshots (appends).
    """

    slot_imports = ("pyiceberg.catalog.sql", "pyiceberg.io.pyarrow", "pyarrow.dataset")

    def __init__(self, identifier: str, *, catalog: dict[str, str],
                 monitor_interval: float | None = None, retain_seconds: float = 3600.0,
                 batch_size: int = DEFAULT_PARQUET_BATCH_SIZE) -> None:
        super().__init__(monitor_interval=monitor_interval, retain_seconds=retain_seconds,
                         batch_size=batch_size)
        self.identifier, self.catalog = identifier, dict(catalog)
        self.root = _local(self._table().location())

    def _table(self):
        require("iceberg")
        from pyiceberg.catalog import load_catalog

        return load_catalog(self.identifier.split(".")[0], **self.catalog).load_table(self.identifier)

    def data_files(self) -> list[str]:
        out = []
        for task in self._table().scan().plan_files():
            if task.delete_files:
                raise ConfigurationError(f"{self.describe()}: tables with delete files are "
                                         "not supported (deleted rows are still in the files)")
            out.append(_local(task.file.file_path))
        return out

    def lineage_dataset(self) -> tuple[str, str]:
        return iceberg_dataset(self.catalog, self.identifier)

    def describe(self) -> str:
        return f"iceberg({self.identifier})"
