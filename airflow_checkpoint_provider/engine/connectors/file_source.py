"""A replayable, bounded source over a directory of JSON-lines, CSV or Parquet files.

Every file is one split; its id is the file's path relative to the directory, with ``/``
separators. The position of a split is a single non-negative integer, chosen so that a
restore seeks straight to the next record:

* JSON lines: the byte offset of the next line;
* CSV: the number of data rows already returned (a restore skips that many rows);
* Parquet: the index of the next row (a restore skips whole row groups by their metadata,
  then slices into the first row group it needs).

The file list is taken by :meth:`FileSource.splits`, sorted by name, so every run of a job
over an unchanged directory gets the same splits in the same order. The files must be
complete before the job starts and must not change while it runs or between a checkpoint
and its restore.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigurationError, DeterministicError, EngineError, RestoreError
from .base import Source, SourceContext, SplitReader, dataset_for_location

log = logging.getLogger(__name__)

#: The values the ``format`` option accepts (besides ``None``: by file extension).
FORMATS = ("jsonl", "csv", "parquet")

#: File name extensions (lower case) and the format each one means.
EXTENSIONS: dict[str, str] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}

DEFAULT_PARQUET_BATCH_SIZE = 4096


class MalformedFileError(DeterministicError):
    """A file of a :class:`FileSource` holds something that is not a record of its format."""


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _raise_walk_error(err: OSError) -> None:
    # A directory we cannot list would silently drop its files from the splits.
    raise err


class FileSource(Source):
    """Read the files of a directory as records (``dict`` per line, row or Parquet row).

    Files and directories whose name starts with ``.`` or ``_`` are ignored at any depth
    (so a :class:`~airflow_checkpoint_provider.engine.connectors.files.FileSink` output
    directory reads as its committed ``part-*`` files only, without ``_staging/``).
    Subdirectories are read too; split ids are relative paths such as ``2024-01-01/a.jsonl``.

    The directory is listed when the job opens its sources, not when this object is built.
    Files added to the directory later are not read by a job that is already running; a
    job restored from a checkpoint lists the directory again and reads new files from their
    start. Restoring a split whose file has disappeared raises
    :class:`~airflow_checkpoint_provider.engine.errors.RestoreError` naming the file.

    Record values: JSON lines give what :func:`json.loads` gives (every line must be a JSON
    object; blank lines are skipped); CSV gives strings (the first row is the header; a
    missing trailing field is ``None``), converted by ``csv_types`` where given; Parquet
    is read as Arrow batches (vectorized operators such as ``aggregate`` and
    ``map_batches`` take them as they are; per-record functions get what
    :meth:`pyarrow.RecordBatch.to_pylist` gives).

    :param directory: the directory to read; it must exist.
    :param format: ``"jsonl"``, ``"csv"`` or ``"parquet"`` for every file, or ``None`` to
        choose each file's format by its extension (``.jsonl``/``.ndjson``, ``.csv``,
        ``.parquet``/``.pq``).
    :param pattern: a glob that selects files, matched against the relative path from the
        right like :meth:`pathlib.PurePath.match` (``"*.csv"`` matches at any depth).
        Default: every file with an extension of ``format`` (any known extension when
        ``format`` is ``None``).
    :param csv_types: for CSV, column name -> callable converting the field's string
        (e.g. ``{"id": int, "price": float}``). The callable receives every value of the
        column, including empty strings.
    :param parquet_batch_size: rows Parquet decodes at a time.
    :param monitor_interval: seconds between listings of the directory while the job runs
        (Flink's ``FileSource.monitorContinuously``): the source is then unbounded and reads
        every new file once, across restarts (discovered files and positions are in its
        checkpointed state). A file must be complete when it appears under its final name:
        write it as ``_name`` or ``.name`` (ignored) and rename it. ``None``: read the files
        listed at the start, then end.
    :param retain_seconds: with ``monitor_interval``: a finished file modified longer ago
        than this leaves the state, and files modified at or before the newest such time are
        taken as read (bounded state; a file moved in with an older modification time is
        skipped).
    """

    def __init__(
        self,
        directory: str,
        *,
        format: str | None = None,
        pattern: str | None = None,
        csv_types: Mapping[str, Callable[[str], object]] | None = None,
        parquet_batch_size: int = DEFAULT_PARQUET_BATCH_SIZE,
        monitor_interval: float | None = None,
        retain_seconds: float = 3600.0,
    ) -> None:
        if monitor_interval is not None and not monitor_interval > 0:
            raise ConfigurationError(
                f"FileSource option monitor_interval must be > 0 seconds or None (got "
                f"{monitor_interval!r})")
        if not retain_seconds > 0:
            raise ConfigurationError(
                f"FileSource option retain_seconds must be > 0 (got {retain_seconds!r})")
        self.monitor_interval = monitor_interval
        self.retain_seconds = retain_seconds
        if format is not None and format not in FORMATS:
            raise ConfigurationError(
                f"FileSource option format={format!r} is not supported; use one of "
                f"{', '.join(repr(f) for f in FORMATS)} or None (choose by file extension)"
            )
        if csv_types is not None:
            if format not in (None, "csv"):
                raise ConfigurationError(
                    f"FileSource option csv_types applies to CSV files only, but "
                    f"format={format!r}; remove csv_types or use format='csv'"
                )
            for column, convert in csv_types.items():
                if not isinstance(column, str) or not callable(convert):
                    raise ConfigurationError(
                        f"FileSource option csv_types must map column names to callables "
                        f"(got {column!r}: {convert!r})"
                    )
        if parquet_batch_size < 1:
            raise ConfigurationError(
                f"FileSource option parquet_batch_size must be >= 1 (got {parquet_batch_size})"
            )
        self.directory = os.path.abspath(directory)
        self.format = format
        self.pattern = pattern
        self.csv_types: dict[str, Callable[[str], object]] = dict(csv_types or {})
        self.parquet_batch_size = parquet_batch_size
        self._check_directory()

    def _check_directory(self) -> None:
        if not os.path.isdir(self.directory):
            raise ConfigurationError(
                f"FileSource directory {self.directory} does not exist or is not a directory; "
                f"create it or fix the path"
            )

    # -- splits ---------------------------------------------------------------------------

    def splits(self) -> list[str]:
        """The relative paths of the selected files, sorted by name."""
        self._check_directory()
        found: list[str] = []
        for root, dirs, files in os.walk(self.directory, onerror=_raise_walk_error):
            dirs[:] = [d for d in dirs if not _is_hidden(d)]
            for name in files:
                if _is_hidden(name):
                    continue
                rel = PurePosixPath(
                    *os.path.relpath(os.path.join(root, name), self.directory).split(os.sep)
                )
                if self._selects(rel):
                    found.append(str(rel))
        found.sort()
        self._check_csv_headers(found)
        log.log(logging.DEBUG if self.monitor_interval else logging.INFO,
                "File source %s lists %d files", self.describe(), len(found))
        return found

    def modified_time(self, split_id: str) -> float:
        """The file's modification time (seconds since the epoch); ``FileNotFoundError``
        for a split id that is not a file inside the directory (ids may come from a
        snapshot)."""
        path = path_inside(self.directory, split_id)
        if path is None:
            raise FileNotFoundError(split_id)
        return os.path.getmtime(path)

    def _check_csv_headers(self, files: list[str]) -> None:
        """Every CSV file of the source has the same header (a file with other columns
        would be read with missing or misnamed fields without a word)."""
        first: tuple[str, list[str]] | None = None
        for rel in files:
            if self.format_of(rel) != "csv":
                continue
            with open(os.path.join(self.directory, rel), newline="", encoding="utf-8-sig") as f:
                header = next(csv.reader(f), [])
            if first is None:
                first = (rel, header)
            elif header != first[1]:
                raise MalformedFileError(
                    f"FileSource {self.describe()}: CSV file {rel} has the header {header}, but "
                    f"{first[0]} has {first[1]}; every CSV file of a source needs the same "
                    f"columns")

    def _selects(self, rel: PurePosixPath) -> bool:
        known = EXTENSIONS.get(rel.suffix.lower())
        if self.pattern is None:
            if self.format == "jsonl" and rel.suffix.lower() == ".json":
                return True  # JSON Lines files are often named .json
            selected = known is not None and (self.format is None or known == self.format)
            if not selected:
                log.warning("File source %s skips %s: its extension does not match format %s "
                            "(pass pattern= to select it)", self.describe(), rel,
                            self.format or "by extension")
            return selected
        if not rel.match(self.pattern):
            return False
        if self.format is None and known is None:
            raise ConfigurationError(
                f"FileSource file {rel} in {self.directory} matches pattern {self.pattern!r} "
                f"but its extension is not one of {', '.join(EXTENSIONS)}; pass format= or "
                f"narrow the pattern"
            )
        return True

    def format_of(self, split_id: str) -> str:
        """The format a split is read in."""
        if self.format is not None:
            return self.format
        fmt = EXTENSIONS.get(PurePosixPath(split_id).suffix.lower())
        if fmt is None:
            raise ConfigurationError(
                f"FileSource cannot tell the format of {split_id} from its extension; pass format="
            )
        return fmt

    # -- readers --------------------------------------------------------------------------

    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        """Open a reader for the file ``split_id`` at ``position`` (``None``: its start).

        :raises RestoreError: ``position`` is given but the file is gone, shorter than the
            position, or the position is not one this source wrote.
        """
        where = f"file source {ctx.operator_uid!r} ({self.describe()}), split {split_id!r}"
        path = path_inside(self.directory, split_id)
        if path is None:
            raise _open_error(position, f"{where}: not a path inside the directory")
        if position is not None and (
            not isinstance(position, int) or isinstance(position, bool) or position < 0
        ):
            raise RestoreError(
                f"{where}: restored position {position!r} is not a non-negative integer; "
                f"the checkpoint was not written by a FileSource"
            )
        if not os.path.isfile(path):
            if position is not None:
                raise RestoreError(
                    f"{where}: the checkpoint holds position {position} in file {path}, which "
                    f"no longer exists; put the file back or start the job without restoring"
                )
            raise FileNotFoundError(f"{where}: file {path} no longer exists")
        fmt = self.format_of(split_id)
        start = int(position or 0)
        log.debug("Opening split %s of %s at %s (%s)", split_id, ctx.operator_uid, start, fmt)
        if fmt == "jsonl":
            return _JsonLinesReader(path, where, start)
        if fmt == "csv":
            return _CsvReader(path, where, start, self.csv_types)
        return _ParquetReader(path, where, start, self.parquet_batch_size)

    def lineage_dataset(self) -> tuple[str, str]:
        return dataset_for_location(self.directory)

    def describe(self) -> str:
        return f"files({self.directory}, {self.format or 'auto'})"


def path_inside(directory: str, split_id: str) -> str | None:
    """``directory/split_id`` when ``split_id`` is a relative path that stays inside
    ``directory`` (split ids may come from a snapshot), else ``None``."""
    rel = PurePosixPath(split_id)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    return os.path.join(directory, *rel.parts)


def _open_error(position: object | None, message: str) -> EngineError:
    return RestoreError(message) if position is not None else ConfigurationError(message)


class _JsonLinesReader(SplitReader):
    """Position: byte offset of the next line."""

    def __init__(self, path: str, where: str, offset: int) -> None:
        self.path = path
        self.where = where
        self._file: IO[bytes] | None = open(path, "rb")
        try:
            size = os.fstat(self._file.fileno()).st_size
            if offset > size:
                raise RestoreError(
                    f"{where}: restored byte offset {offset} is past the end of {path} "
                    f"({size} bytes); the file was truncated or replaced since the checkpoint"
                )
            if 0 < offset < size:
                self._file.seek(offset - 1)
                if self._file.read(1) != b"\n":
                    raise RestoreError(
                        f"{where}: restored byte offset {offset} is not the start of a line "
                        f"in {path}; the file changed since the checkpoint"
                    )
            self._file.seek(0)
            # line numbers for error messages: count the lines before a restored offset once
            self._line = self._file.read(offset).count(b"\n") if offset else 0
            self._file.seek(offset)
        except BaseException:
            self.close()
            raise
        self._offset = offset

    def read_batch(self, max_records: int) -> list[dict] | None:
        f = self._file
        if f is None:
            return None
        out: list[dict] = []
        while len(out) < max_records:
            line = f.readline()
            if not line:
                if not out:
                    self.close()
                    return None
                break
            start = self._offset
            self._offset += len(line)
            self._line += 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise MalformedFileError(
                    f"{self.where}: invalid JSON in {self.path} line {self._line} (byte {start}): "
                    f"{getattr(e, 'msg', e)}"
                ) from e
            if not isinstance(record, dict):
                raise MalformedFileError(
                    f"{self.where}: line {self._line} (byte {start}) of {self.path} is a JSON "
                    f"{type(record).__name__}, not an object"
                )
            out.append(record)
        return out

    def position(self) -> int:
        return self._offset

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class _CsvReader(SplitReader):
    """Position: number of data rows returned."""

    def __init__(
        self, path: str, where: str, rows: int, types: dict[str, Callable[[str], object]]
    ) -> None:
        self.path = path
        self.where = where
        self.types = types
        # utf-8-sig drops a byte-order mark that would otherwise prefix the first header.
        self._file: IO[str] | None = open(path, newline="", encoding="utf-8-sig")
        try:
            self._reader = csv.DictReader(self._file)
            header = self._reader.fieldnames or []
            missing = [c for c in types if c not in header]
            if missing and header:
                raise ConfigurationError(
                    f"{where}: csv_types names columns {missing} that are not in the header "
                    f"of {path} ({header})"
                )
            skipped = sum(1 for _ in itertools.islice(self._reader, rows))
            if skipped < rows:
                raise RestoreError(
                    f"{where}: restored position is row {rows} but {path} has only {skipped} "
                    f"data rows; the file was truncated or replaced since the checkpoint"
                )
        except BaseException:
            self.close()
            raise
        self._rows = rows

    def read_batch(self, max_records: int) -> list[dict] | None:
        if self._file is None:
            return None
        out: list[dict] = []
        for row in itertools.islice(self._reader, max(max_records, 0)):
            if None in row:
                raise MalformedFileError(
                    f"{self.where}: line {self._reader.line_num} of {self.path} has more "
                    f"fields than the header"
                )
            for column, convert in self.types.items():
                value = row.get(column)
                if value is None:
                    continue
                try:
                    row[column] = convert(value)
                except Exception as e:
                    raise MalformedFileError(
                        f"{self.where}: line {self._reader.line_num} of {self.path}: cannot "
                        f"convert column {column!r} value {value!r}: {e}"
                    ) from e
            out.append(row)
        self._rows += len(out)
        if not out and max_records > 0:
            self.close()
            return None
        return out

    def position(self) -> int:
        return self._rows

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class _ParquetReader(SplitReader):
    """Position: index of the next row."""

    def __init__(self, path: str, where: str, row: int, batch_size: int) -> None:
        self.path = path
        self.where = where
        self._file: IO[bytes] | None = open(path, "rb")
        try:
            try:
                parquet = pq.ParquetFile(self._file)
            except (pa.ArrowException, OSError) as e:
                raise MalformedFileError(f"{where}: {path} is not a Parquet file: {e}") from e
            meta = parquet.metadata
            if row > meta.num_rows:
                raise RestoreError(
                    f"{where}: restored position is row {row} but {path} has only "
                    f"{meta.num_rows} rows; the file was truncated or replaced since the "
                    f"checkpoint"
                )
            # Skip the row groups that end at or before the position without decoding them.
            first_group, skip = 0, row
            while first_group < meta.num_row_groups:
                group_rows = meta.row_group(first_group).num_rows
                if skip < group_rows:
                    break
                skip -= group_rows
                first_group += 1
            groups = list(range(first_group, meta.num_row_groups))
            self._batches: Iterator[pa.RecordBatch] = (
                parquet.iter_batches(batch_size=batch_size, row_groups=groups)
                if groups
                else iter(())
            )
        except BaseException:
            self.close()
            raise
        self._skip = skip  # rows of the first decoded row group that precede the position
        self._batch: pa.RecordBatch | None = None
        self._offset = 0  # next row within self._batch
        self._row = row

    def _next_batch(self) -> bool:
        while True:
            batch = next(self._batches, None)
            if batch is None:
                return False
            if self._skip >= batch.num_rows:
                self._skip -= batch.num_rows
                continue
            self._batch, self._offset, self._skip = batch, self._skip, 0
            return True

    def read_batch(self, max_records: int) -> pa.RecordBatch | None:
        """Up to ``max_records`` rows as an Arrow batch (a zero-copy slice of the decoded
        batch): Parquet stays columnar into vectorized operators."""
        if self._file is None:
            return None
        if self._batch is None or self._offset >= self._batch.num_rows:
            if not self._next_batch():
                self.close()
                return None
        assert self._batch is not None
        n = min(max(max_records, 0), self._batch.num_rows - self._offset)
        out = self._batch.slice(self._offset, n)
        self._offset += n
        self._row += n
        return out

    def position(self) -> int:
        return self._row

    def close(self) -> None:
        self._batch = None
        self._batches = iter(())
        if self._file is not None:
            self._file.close()
            self._file = None
