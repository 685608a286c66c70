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
