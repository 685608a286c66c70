"""Hive-style partition directories of a partitioned :class:`~.sink.FileSink`:
``<column>=<escaped value>/...``, built and parsed here only.

Values are escaped as Hive does (``FileUtils.escapePathName``): the control characters,
``"#%'*/:=?\\{[]^`` and DEL become ``%XX`` (upper-case hex). ``%`` itself is escaped, so the
escaping is reversible and two values never share a directory; a segment always starts with
``<column>=``, so no value can make it ``.``, ``..`` or an absolute path. ``None`` and the
empty string are Hive's, Spark's and Flink's default partition ``__HIVE_DEFAULT_PARTITION__``
(read back as ``None``); the literal string ``__HIVE_DEFAULT_PARTITION__`` is refused (it
would read back as ``None``), as are values that are not scalars and values whose directory
name would be longer than a file name may be (255 bytes).
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from collections.abc import Sequence
from operator import itemgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import BadRecordError, ConfigurationError

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: a partition column name: an identifier (it becomes part of a directory name)
COLUMN = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
#: the characters Hive escapes (FileUtils.charToEscape, the non-Windows set)
_ESCAPED = frozenset([*map(chr, range(0x00, 0x20)), '"', "#", "%", "'", "*", "/", ":", "=",
                      "?", "\\", "\x7f", "{", "[", "]", "^"])
_ESCAPE = {c: f"%{ord(c):02X}" for c in _ESCAPED}
_NEEDS_ESCAPE = re.compile("[" + re.escape("".join(sorted(_ESCAPED))) + "]")
#: an escaped value: no escaped character left bare, every % followed by two hex digits
_ESCAPED_VALUE = re.compile(r"(?:[^" + re.escape("".join(sorted(_ESCAPED))) + r"]|%[0-9A-F]{2})+")
MAX_SEGMENT_BYTES = 255
#: types whose values can be equal across types (1 == 1.0 == True == Decimal(1)): a batch
#: mixing them in one column is grouped by typed keys (they are different partitions)
_NUMERIC = frozenset([bool, int, float, decimal.Decimal])
_PATHS_CACHED = 65_536


def check_columns(columns: Sequence[str] | None) -> tuple[str, ...]:
    """``columns`` as a tuple once every name is an identifier (``re.fullmatch``) and none
    repeats; else :class:`ConfigurationError` naming the column."""
    if columns is None:
        return ()
    if isinstance(columns, str):
        raise ConfigurationError(f"partition_by must be a list of column names, not the string "
                                 f"{columns!r} (write [{columns!r}])")
    out = tuple(columns)
    for c in out:
        if not isinstance(c, str) or not re.fullmatch(COLUMN, c):
            raise ConfigurationError(
                f"partition column {c!r} is not an identifier ({COLUMN}): a partition column "
                "name becomes part of a directory name; rename the column")
    dup = sorted({c for c in out if out.count(c) > 1})
    if dup:
        raise ConfigurationError(f"partition column(s) {dup} appear more than once in partition_by")
    return out


def _text(column: str, value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _refuse(column, value, "is not finite")
        return repr(value)
    if isinstance(value, decimal.Decimal | datetime.date | datetime.time):
        return str(value)
    raise _refuse(column, value, f"is a {type(value).__name__}: partition values must be "
                                 "strings, numbers, booleans, dates or times")


def _refuse(column: str, value: object, why: str) -> BadRecordError:
    return BadRecordError(f"partition column {column!r}: value {value!r} {why}; compute a "
                          "valid partition value before the sink (or filter the record out)")


def escape_value(column: str, value: object) -> str:
    """The directory-name form of ``value`` (see the module docstring)."""
    text = _text(column, value)
    if text == "":
        return DEFAULT_PARTITION
    if text == DEFAULT_PARTITION:
        raise _refuse(column, value, "is the name of the default (null) partition; it would "
                                     "read back as None")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(column, value, "is not valid Unicode (a lone surrogate)") from None
    return _NEEDS_ESCAPE.sub(lambda m: _ESCAPE[m[0]], text)


def unescape_value(escaped: str) -> str | None:
    if escaped == DEFAULT_PARTITION:
        return None
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m[1], 16)), escaped)


def partition_path(columns: Sequence[str], values: Sequence[object]) -> str:
    """``col=escaped/col=escaped`` of one record's partition values."""
    parts = []
    for c, v in zip(columns, values, strict=True):
        seg = f"{c}={escape_value(c, v)}"
        if len(seg.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise _refuse(c, v, f"makes the directory name {seg[:40]!r}... longer than "
                                f"{MAX_SEGMENT_BYTES} bytes")
        parts.append(seg)
    return "/".join(parts)


def parse_partition_path(path: object, columns: Sequence[str]) -> list[tuple[str, str | None]] | None:
    """The ``(column, value)`` pairs of a partition path whose columns are exactly
    ``columns`` in order, each value in escaped form (``re.fullmatch``); else ``None``. A
    restored transaction's partition is untrusted: this is what keeps its commit inside the
    sink's directory."""
    if not isinstance(path, str):
        return None
    if not columns:
        return [] if path == "" else None
    segs = path.split("/")
    if len(segs) != len(columns):
        return None
    out = []
    for seg, col in zip(segs, columns, strict=True):
        name, eq, value = seg.partition("=")
        if (not eq or name != col or len(seg.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES
                or not _canonical(value)):
            return None
        out.append((col, unescape_value(value)))
    return out


def _canonical(escaped: str) -> bool:
    """``escaped`` is what :func:`escape_value` makes of some value (one spelling per value)."""
    if escaped == DEFAULT_PARTITION:
        return True
    if not _ESCAPED_VALUE.fullmatch(escaped):
        return False
    text = unescape_value(escaped)
    return text is not None and text != "" and \
        _NEEDS_ESCAPE.sub(lambda m: _ESCAPE[m[0]], text) == escaped


def read_partition_dir(name: str) -> tuple[str, str | None] | None:
    """``(column, value)`` of a directory name ``column=escaped``, else ``None``."""
    col, eq, value = name.partition("=")
    if not eq or not re.fullmatch(COLUMN, col) or not _ESCAPED_VALUE.fullmatch(value):
        return None
    return col, unescape_value(value)


def group_by_partition(records: list[dict], columns: Sequence[str], cache: dict[tuple, str],
                       *, where: str) -> dict[str, list[dict]]:
    """``records`` grouped by their partition path, in order within each group (the default
    partition: the rows with ``None``, then those with ``""``, or the other way round).
    ``cache`` maps typed partition values to paths (kept by the caller across batches). The
    values are read column by column (``map`` of an ``itemgetter``: no Python loop per
    record when a batch is one partition); a batch whose column mixes numeric types is
    grouped by ``(type, value)`` keys, since ``1``, ``1.0`` and ``True`` are equal as dict
    keys but different partitions."""
    if not records:
        return {}
    get = itemgetter(*columns)
    try:
        per_column = [list(map(itemgetter(c), records)) for c in columns]
    except KeyError:
        missing = next(c for r in records for c in columns if c not in r)
        example = next(r for r in records if missing not in r)
        raise BadRecordError(f"{where}: a record has no partition column {missing!r} "
                             f"(partition_by={list(columns)}); its fields: "
                             f"{sorted(example)[:20]}") from None
    single = len(columns) == 1
    keys: list = per_column[0] if single else list(zip(*per_column, strict=True))
    if any(len(set(map(type, vals)) & _NUMERIC) > 1 for vals in per_column):
        keys = [tuple((type(v), v) for v in ((k,) if single else k)) for k in keys]
    groups: dict[object, list[dict]] = {}
    try:
        if keys.count(keys[0]) == len(keys):  # the common case: one partition per batch
            groups[keys[0]] = records
        else:
            for r, k in zip(records, keys, strict=True):
                rows = groups.get(k)
                if rows is None:
                    rows = groups[k] = []
                rows.append(r)
    except TypeError:  # an unhashable value: partition_path names it
        for k in keys:
            partition_path(columns, (k,) if single else k)
        raise
    out: dict[str, list[dict]] = {}
    for rows in groups.values():
        values = get(rows[0])
        path = _cached_path(columns, (values,) if single else values, cache)
        if path in out:  # None and "" share the default partition
            out[path] = [*out[path], *rows]
        else:
            out[path] = rows
    return out


def without(rows: list[dict], columns: Sequence[str]) -> list[dict]:
    """Copies of ``rows`` without ``columns`` (the rows themselves may be shared with other
    operators of the chain: never changed in place)."""
    out = []
    for r in rows:
        d = r.copy()
        for c in columns:
            del d[c]
        out.append(d)
    return out


def _groupable(t: pa.DataType) -> bool:
    """Arrow types whose values group exactly as their Python values do on the dict path
    (equal iff their ``as_py()`` values are equal, one Python type per column); floats
    (``-0.0 == 0.0`` but ``repr`` differs, NaN), decimals and the rest go the dict path."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
            or pa.types.is_boolean(t) or pa.types.is_date(t))


def group_batch_by_partition(batch: pa.RecordBatch, columns: Sequence[str],
                             cache: dict[tuple, str], *,
                             where: str) -> list[tuple[str, np.ndarray | None]] | None:
    """The rows of ``batch`` grouped by partition path as :func:`group_by_partition` groups
    the batch's dicts: ``(path, row indices)`` per partition in order of first appearance,
    the rows of a partition in order (the default partition: the rows with ``None``, then
    those with ``""``, or the other way round, as on the dict path); ``None`` for the row
    indices when the whole batch is one partition (the common case, told by one
    ``dictionary_encode`` per column). ``None`` when a partition column's type is not one
    :func:`_groupable` proves equivalent (the caller takes the dict path). The paths come
    from the first row of each group's Python values, through the same ``cache``."""
    encoded = []
    for c in columns:
        i = batch.schema.get_field_index(c)
        if i < 0:
            raise BadRecordError(f"{where}: a record has no partition column {c!r} "
                                 f"(partition_by={list(columns)}); its fields: "
                                 f"{sorted(batch.schema.names)[:20]}")
        col = batch.column(i)
        if not _groupable(col.type):
            return None
        encoded.append(pc.dictionary_encode(col, null_encoding="encode"))
    if all(len(e.dictionary) == 1 for e in encoded):
        return [(_path_of(encoded, 0, columns, cache), None)]
    # a dense group id per row over every partition column
    gid = np.asarray(encoded[0].indices, np.int64)
    for e in encoded[1:]:
        gid = np.unique(gid * len(e.dictionary) + np.asarray(e.indices, np.int64),
                        return_inverse=True)[1].reshape(-1)
    _, first, inverse = np.unique(gid, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")  # groups in order of first appearance
    paths: dict[str, int] = {}  # path -> its rank (None and "" share one)
    group_rank = np.empty(len(first), np.int64)
    for g in order:
        path = _path_of(encoded, int(first[g]), columns, cache)
        group_rank[g] = paths.setdefault(path, len(paths))
    # one path's groups in order of first appearance: sort by (path rank, group order)
    key = group_rank * len(first) + np.argsort(order, kind="stable")
    rows = np.argsort(key[inverse], kind="stable")
    counts = np.bincount(group_rank[inverse], minlength=len(paths))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [(path, rows[bounds[r]:bounds[r + 1]]) for path, r in paths.items()]


def _path_of(encoded: list, row: int, columns: Sequence[str], cache: dict[tuple, str]) -> str:
    values = tuple(e.dictionary[e.indices[row].as_py()].as_py() for e in encoded)
    return _cached_path(columns, values, cache)


def _cached_path(columns: Sequence[str], values: tuple, cache: dict[tuple, str]) -> str:
    """The partition path of ``values``, through ``cache`` (keyed by typed values: ``1``,
    ``1.0`` and ``True`` are different partitions)."""
    typed = tuple((type(v), v) for v in values)
    path = cache.get(typed)
    if path is None:
        path = partition_path(columns, values)
        if len(cache) >= _PATHS_CACHED:
            cache.clear()
        cache[typed] = path
    return path
