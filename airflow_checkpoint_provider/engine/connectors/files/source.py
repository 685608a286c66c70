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

Symbolic links: not followed by default (a link is skipped with a warning, and a split
that is a link, or lies under one, is refused when opened -- whoever can write into the
directory must not make the job read files elsewhere). ``follow_symlinks=True`` reads
links to files inside the directory (or inside ``symlink_roots``), never elsewhere. A file
reachable under several names (a link and its target, two links, hard links) is one split,
read once.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath

from ...errors import ConfigurationError, EngineError, RestoreError
from ..base import Source, SourceContext, SplitReader, dataset_for_location
from .errors import MalformedFileError
from .readers import (
    ParquetReader,
    _CsvReader,
    _JsonLinesReader,
    no_follow,
)

__all__ = ["DEFAULT_PARQUET_BATCH_SIZE", "EXTENSIONS", "FORMATS", "FileSource",
           "MalformedFileError", "path_inside"]

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

#: Rows Parquet decodes at a time, and so the most a Parquet split hands its source per read:
#: the pipeline's default Arrow batch size (``plan.job.DEFAULT_ARROW_BATCH_SIZE``) and
#: pyarrow's own default. It was 4096: every batch paid the per-batch Python cost of every
#: operator 16 times as often, which cost Nexmark jobs up to ~20% of their CPU against
#: 65,536 (bench/defaults.py). The source still reads no more than its outputs' credit.
DEFAULT_PARQUET_BATCH_SIZE = 65_536


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _raise_walk_error(err: OSError) -> None:
    # A directory we cannot list would silently drop its files from the splits.
    raise err


class FileSource(Source):
    """Read the files of a directory as records (``dict`` per line, row or Parquet row).

    Files and directories whose name starts with ``.`` or ``_`` are ignored at any depth
    (so a :class:`~airflow_checkpoint_provider.engine.connectors.files.sink.FileSink` output
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
    :param parquet_batch_size: rows Parquet decodes at a time (default 65,536, the
        pipeline's Arrow batch size): the most rows one read of a Parquet split returns.
    :param columns: Parquet only: read only these columns (projection pushdown: the other
        columns are neither read from disk nor decoded), in this order. ``None``: every
        column. Positions stay row indexes, so a job may be restored with another
        projection. A column missing from a file fails the read with
        :class:`MalformedFileError` naming it.
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
    :param follow_symlinks: ``False`` (default): symbolic links are not read (each is
        skipped with a warning, and a split that is a link or lies under one is refused when
        opened); links to directories are never descended. ``True``: a link to a file is read
        if its target lies inside the directory or inside one of ``symlink_roots``; a link
        elsewhere is skipped with a warning. Either way a file reachable under several names
        (a link and its target, two links, hard links) is one split, read once: the regular
        file, else the oldest link (then the first name).
    :param symlink_roots: with ``follow_symlinks=True``: more directories link targets may
        lie in.
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
        follow_symlinks: bool = False,
        symlink_roots: Sequence[str] = (),
        columns: Sequence[str] | None = None,
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
        if columns is not None:
            if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
                raise ConfigurationError(
                    f"FileSource option columns must be a list of column names (got {columns!r})")
            if not columns or len(set(columns)) != len(columns):
                raise ConfigurationError(
                    f"FileSource option columns must name at least one column, each once "
                    f"(got {list(columns)!r})")
            if format not in (None, "parquet"):
                raise ConfigurationError(
                    f"FileSource option columns applies to Parquet files only, but "
                    f"format={format!r}; remove columns or use format='parquet'")
        self.columns: list[str] | None = list(columns) if columns is not None else None
        self.directory = os.path.abspath(directory)
        self.format = format
        self.pattern = pattern
        self.csv_types: dict[str, Callable[[str], object]] = dict(csv_types or {})
        self.parquet_batch_size = parquet_batch_size
        if isinstance(symlink_roots, str):
            symlink_roots = (symlink_roots,)
        if symlink_roots and not follow_symlinks:
            raise ConfigurationError(
                "FileSource option symlink_roots needs follow_symlinks=True (without it no "
                "link is followed)")
        self.follow_symlinks = bool(follow_symlinks)
        self.symlink_roots = tuple(os.path.realpath(r) for r in symlink_roots)
        self._warned: set[str] = set()
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
        found: dict[tuple[int, int], tuple[tuple, str]] = {}  # file -> (rank, split id)
        for root, dirs, files in os.walk(self.directory, onerror=_raise_walk_error):
            for d in dirs:
                if not _is_hidden(d) and os.path.islink(os.path.join(root, d)):
                    self._warn_once(os.path.join(root, d), "is a symbolic link to a "
                                    "directory, which FileSource does not descend")
            dirs[:] = [d for d in dirs if not _is_hidden(d)]
            for name in files:
                if _is_hidden(name):
                    continue
                rel = PurePosixPath(
                    *os.path.relpath(os.path.join(root, name), self.directory).split(os.sep)
                )
                if not self._selects(rel):
                    continue
                entry = self._file_identity(os.path.join(root, name))
                if entry is None:
                    continue
                identity, rank = entry
                if identity not in found or (rank, str(rel)) < found[identity]:
                    found[identity] = (rank, str(rel))
        paths = sorted(rel for _, rel in found.values())
        self._check_csv_headers(paths)
        log.log(logging.DEBUG if self.monitor_interval else logging.INFO,
                "File source %s lists %d files", self.describe(), len(paths))
        return paths

    def _warn_once(self, path: str, why: str) -> None:
        if path not in self._warned:  # a continuous source lists every monitor_interval
            self._warned.add(path)
            log.warning("File source %s skips %s: it %s", self.describe(), path, why)

    def _file_identity(self, path: str) -> tuple[tuple[int, int], tuple] | None:
        """The file ``path`` names (device, inode: one split per file however many names
        it has) and its rank among those names (a regular file first, then the oldest
        link); ``None`` for a link this source does not read."""
        try:
            link = os.lstat(path)
            if not os.path.islink(path):
                return (link.st_dev, link.st_ino), (0, 0)
            if not self.follow_symlinks:
                self._warn_once(path, f"is a symbolic link (to {os.path.realpath(path)}); "
                                "pass follow_symlinks=True to read links to files inside "
                                "the directory")
                return None
            target = os.path.realpath(path)
            if not self._allowed_target(target):
                self._warn_once(path, f"is a symbolic link to {target}, outside the "
                                "directory (and symlink_roots)")
                return None
            st = os.stat(path)
        except FileNotFoundError:
            return None  # removed while listing, or a dangling link
        if not os.path.isfile(path):
            return None
        return (st.st_dev, st.st_ino), (1, link.st_mtime_ns)

    def _allowed_target(self, target: str) -> bool:
        roots = (os.path.realpath(self.directory), *self.symlink_roots)
        return any(os.path.commonpath([root, target]) == root for root in roots)

    def resolve(self, split_id: str) -> str | None:
        """The file to open for ``split_id`` (a relative path inside the directory; ids may
        come from a snapshot): without ``follow_symlinks`` no part of it below the
        directory may be a link; with it, the link's target must be an allowed one.
        ``None`` when it is neither."""
        path = path_inside(self.directory, split_id)
        if path is None:
            return None
        real = os.path.realpath(path)
        if self.follow_symlinks:
            return real if self._allowed_target(real) else None
        plain = os.path.join(os.path.realpath(self.directory), *PurePosixPath(split_id).parts)
        return plain if real == plain else None

    def modified_time(self, split_id: str) -> float:
        """The file's modification time (seconds since the epoch; for a followed link the
        later of the link's and its target's); ``FileNotFoundError`` for a split id that is
        not a file inside the directory (ids may come from a snapshot)."""
        path = path_inside(self.directory, split_id)
        if path is None or self.resolve(split_id) is None:
            raise FileNotFoundError(split_id)
        return max(os.lstat(path).st_mtime, os.path.getmtime(path))

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
        if os.path.lexists(path):
            resolved = self.resolve(split_id)
            if resolved is None:
                raise _open_error(position, (
                    f"{where}: {path} is (or lies under) a symbolic link to "
                    f"{os.path.realpath(path)}, which this source does not read "
                    + ("(outside the directory and symlink_roots)" if self.follow_symlinks
                       else "(pass follow_symlinks=True to read links to files inside the "
                            "directory)")))
            path = resolved
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
        # the resolved path is opened without following a link in its last part: a file
        # swapped for a link after the check above is refused by the kernel (ELOOP)
        if fmt == "jsonl":
            return _JsonLinesReader(path, where, start, no_follow)
        if fmt != "parquet" and self.columns is not None:
            raise ConfigurationError(
                f"{where}: option columns applies to Parquet files only, and this split is "
                f"{fmt}; select Parquet files only (format='parquet')")
        if fmt == "csv":
            return _CsvReader(path, where, start, self.csv_types, no_follow)
        return ParquetReader(path, where, start, self.parquet_batch_size, no_follow,
                              columns=self.columns)

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
