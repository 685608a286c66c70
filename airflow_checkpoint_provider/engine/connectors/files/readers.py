"""The split readers of :class:`~.source.FileSource` (and of the Parquet files of
:mod:`..lakehouse.table_source`): one per format, each keeping the position a restore seeks to.

FileSource's readers open their file with :func:`no_follow` (``O_NOFOLLOW``):
:meth:`~.source.FileSource.open_split` resolves and checks the path first, and a file
swapped for a link after that check is refused by the kernel.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import ConfigurationError, RestoreError
from ..base import SplitReader
from .errors import MalformedFileError as MalformedFileError  # defined here before issue 53

#: ``opener`` of :func:`open`
Opener = Callable[[str, int], int] | None


def no_follow(path: str, flags: int) -> int:
    """An ``opener`` that does not follow a symbolic link in the last part of ``path``."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


class _JsonLinesReader(SplitReader):
    """Position: byte offset of the next line."""

    def __init__(self, path: str, where: str, offset: int, opener: Opener = None) -> None:
        self.path = path
        self.where = where
        self._file: IO[bytes] | None = open(path, "rb", opener=opener)
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
            except RecursionError:
                # the same on every restart: a malformed file, not a transient failure
                raise MalformedFileError(
                    f"{self.where}: line {self._line} (byte {start}) of {self.path} nests JSON "
                    f"arrays/objects deeper than the parser allows (about "
                    f"{sys.getrecursionlimit()} levels); flatten or remove the record"
                ) from None
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
        self, path: str, where: str, rows: int, types: dict[str, Callable[[str], object]],
        opener: Opener = None,
    ) -> None:
        self.path = path
        self.where = where
        self.types = types
        # utf-8-sig drops a byte-order mark that would otherwise prefix the first header.
        self._file: IO[str] | None = open(path, newline="", encoding="utf-8-sig",
                                          opener=opener)
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


class ParquetReader(SplitReader):
    """Position: index of the next row."""

    def __init__(self, path: str, where: str, row: int, batch_size: int,
                 opener: Opener = None, columns: list[str] | None = None) -> None:
        self.path = path
        self.where = where
        self._file: IO[bytes] | None = open(path, "rb", opener=opener)
        try:
            try:
                parquet = pq.ParquetFile(self._file)
            except (pa.ArrowException, OSError) as e:
                raise MalformedFileError(f"{where}: {path} is not a Parquet file: {e}") from e
            meta = parquet.metadata
            if columns is not None:
                names = parquet.schema_arrow.names
                missing = [c for c in columns if c not in names]
                if missing:
                    raise MalformedFileError(
                        f"{where}: {path} has no column(s) {', '.join(missing)} of the "
                        f"source's columns= projection (its columns: {', '.join(names)})")
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
                parquet.iter_batches(batch_size=batch_size, row_groups=groups, columns=columns)
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
