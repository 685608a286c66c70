"""JSON lines of an Arrow ``RecordBatch`` without building a dict per row: the bytes the
file sink's dict path writes (``msgspec`` ``encode_lines`` of ``batch.to_pylist()``), encoded
column by column.

Each column is turned into Python values once (``Array.to_pylist``: the same values
``RecordBatch.to_pylist`` puts in its dicts) and encoded by msgspec as newline-delimited
JSON, one value per line (msgspec escapes a newline inside a string, so a line is a value).
The newline after each value becomes the separator the row needs there (``,`` between
fields, ``}`` after the last one), and Arrow's ``binary_join_element_wise`` interleaves the
columns with the field names into one ``{...}\\n`` line per row (C++, no Python loop per row).
So every value is formatted by the same encoder as on the dict path; a batch msgspec cannot
encode (the dict path then falls back to ``json.dumps``), or whose column names repeat (a
dict keeps one of them), is left to the dict path (:func:`json_lines` returns ``None``).
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_JSON = msgspec.json.Encoder()
_LINE = pa.large_binary()
_NEWLINE = 0x0A


def _scalar(b: bytes) -> pa.Scalar:
    return pa.scalar(b, _LINE)


def _values(column: pa.Array, terminator: int) -> pa.Array | None:
    """``column``'s values as msgspec's JSON, one element per row, each followed by
    ``terminator`` (a byte); ``None`` if msgspec cannot encode one of them."""
    if pa.types.is_timestamp(column.type):
        formatted = _timestamps(column, terminator)
        if formatted is not None:
            return formatted
    try:
        blob = _JSON.encode_lines(column.to_pylist())
    except (TypeError, msgspec.EncodeError, OverflowError, ValueError):
        return None
    data = np.frombuffer(blob, np.uint8).copy()
    ends = np.flatnonzero(data == _NEWLINE)
    n = len(column)
    if len(ends) != n:  # msgspec escapes newlines in strings: never happens; be safe
        return None
    data[ends] = terminator
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    offsets[1:] = ends + 1
    return pa.Array.from_buffers(_LINE, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


#: ticks per second of the timestamp units formatted by :func:`_timestamps`
_TICKS = {"s": 1, "ms": 1_000, "us": 1_000_000}
#: the seconds (since the epoch) of Python's datetime.min and of datetime.max's second
_FIRST_S, _LAST_S = -62_135_596_800, 253_402_300_799


def _timestamps(column: pa.Array, terminator: int) -> pa.Array | None:
    """A timestamp column as msgspec writes the ``datetime`` values ``to_pylist`` makes of
    it, without making them (``to_pylist`` of a timestamp column costs ~50x an integer
    column's): ``"YYYY-MM-DDTHH:MM:SS"``, then ``.ffffff`` when the microseconds are not 0,
    then ``Z`` for the UTC zone, ``null`` for a null. ``None`` (the caller encodes it with
    msgspec) for a unit below microseconds, a zone other than UTC, or a value outside
    ``datetime``'s years 1-9999 (``to_pylist`` fails there)."""
    t = column.type
    ticks = _TICKS.get(t.unit)
    if ticks is None or t.tz not in (None, "UTC"):
        return None
    raw = column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    fraction = np.mod(raw, ticks)  # floor: 1969-12-31T23:59:59.5 has .5, not -.5
    seconds = (raw - fraction) // ticks
    if len(seconds) and (seconds.min() < _FIRST_S or seconds.max() > _LAST_S):
        return None
    # Arrow's cast writes "YYYY-MM-DD HH:MM:SS" (30x faster than its strftime)
    text = pc.replace_substring(pa.array(seconds, pa.timestamp("s")).cast(pa.string()), " ", "T",
                                max_replacements=1)
    micros = fraction * (1_000_000 // ticks)
    digits = pc.utf8_lpad(pa.array(micros, pa.int64()).cast(pa.string()), 6, "0")
    fraction_text = pc.if_else(pa.array(micros != 0), pc.binary_join_element_wise(".", digits, ""), "")
    end = ('Z"' if t.tz else '"') + chr(terminator)
    quoted = pc.binary_join_element_wise('"', text, fraction_text, end, "")
    if column.null_count:
        quoted = pc.if_else(column.is_valid(), quoted, "null" + chr(terminator))
    return quoted.cast(_LINE)


def json_lines(batch: pa.RecordBatch) -> pa.Array | None:
    """One ``large_binary`` element per row of ``batch``: the row as one compact JSON object
    and a newline, byte for byte what ``msgspec.json.Encoder().encode_lines(batch.to_pylist())``
    writes for it; ``None`` when that cannot be shown (see the module docstring)."""
    names = batch.schema.names
    n = batch.num_rows
    if len(set(names)) != len(names):
        return None
    if not names:
        return pa.array([b"{}\n"] * n, _LINE)
    last = len(names) - 1
    args: list = []
    for i, name in enumerate(names):
        values = _values(batch.column(i), ord("}") if i == last else ord(","))
        if values is None:
            return None
        key = _JSON.encode(name) + b":"
        args += [_scalar((b"{" if i == 0 else b"") + key), values]
    args += [_scalar(b"\n"), _scalar(b"")]  # the line's end; the (empty) separator
    return pc.binary_join_element_wise(*args)


def lines_buffer(lines: pa.Array) -> pa.Buffer:
    """The bytes of ``lines`` (a ``large_binary`` array or a slice of one) as one buffer,
    without copying: its elements are contiguous in its data buffer."""
    _, offsets, data = lines.buffers()
    bounds = np.frombuffer(offsets, np.int64)
    start, end = int(bounds[lines.offset]), int(bounds[lines.offset + len(lines)])
    return data.slice(start, end - start)
