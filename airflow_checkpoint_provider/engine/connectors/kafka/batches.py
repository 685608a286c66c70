"""Kafka messages to Arrow record batches: ``KafkaSource(arrow=True)``, the input of the
vectorized operators (``aggregate``, ``map_batches``, the vectorized joins and windows).

JSON values (``value_format="json"``). The values of a fetched batch of messages are joined
into one newline-delimited buffer and parsed by pyarrow's JSON reader (C++, straight into
columns; no Python object per value or field), on the calling thread. Two rules keep the
columns what the dict path (:meth:`.source.KafkaSource.decode` then
``RecordBatch.from_pylist``) would give:

* a string is a string: the reader infers ``timestamp`` for ISO-8601-looking strings; such
  fields are read again as strings (and stay strings: see the carried schema below);
* every value must become one row: a batch the reader refuses or reads into another number
  of rows (a value that is not a JSON object, holds two, is a tombstone, or has NaN)
  is decoded by the dict path instead, which wraps a non-object as ``{"value": ...}`` as the
  dict path does, and fails naming the record's topic, partition and offset when a value
  is not JSON.

Schema. Given (``schema=pyarrow.schema(...)``): the columns are exactly its fields, in its
order and types; value fields it does not name are dropped, a missing one is null; a value
that does not convert fails the job with :class:`~.errors.KafkaSchemaError` naming the
topic, partition, offset and field. A ``timestamp`` column reads ISO-8601 strings as the
reader does (an offset or ``Z`` converts to UTC), a ``date`` column ``YYYY-MM-DD`` strings
(read as strings, then cast), in a batch the dict path decodes too (:func:`_column`).
Inferred (no schema): from each batch, with the types already seen carried to the next
batches of the partition (a column keeps its type and place, so consecutive batches have
the same schema and the vectorized operators coalesce them); a field of another type in a
later batch gets the type the batch infers (an ``int64`` field holding ``1.5`` becomes
``double``), as in the dict path. A field whose values disagree inside a batch (a number
and a string) fails the job naming both records.

Metadata (``metadata=True``): columns ``_topic`` (string), ``_partition``, ``_offset``,
``_timestamp`` (int64, epoch ms) and ``_key`` (binary), after the value's columns
(replacing value fields of the same name, as in the dict path).

``value_format="bytes"``: one ``value`` binary column. A deserializer function or
``"debezium-json"``: the dict path's rows, converted with ``from_pylist`` (with the schema
when given).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.json as pa_json

from .errors import KafkaSchemaError

#: the metadata columns (``metadata=True``), after the value's
METADATA_SCHEMA = pa.schema([("_topic", pa.string()), ("_partition", pa.int64()),
                             ("_offset", pa.int64()), ("_timestamp", pa.int64()),
                             ("_key", pa.binary())])
_METADATA_NAMES = frozenset(METADATA_SCHEMA.names)
#: the reader parses one block per call: a batch in one block (no threads, no seams)
_MIN_BLOCK = 1 << 20


def _where(msg) -> str:
    return f"{msg.topic()}:{msg.partition()} offset {msg.offset()}"


def _strings_for(t: pa.DataType, replaced) -> pa.DataType:
    """``t`` with every type for which ``replaced(type)`` holds a string, in structs and
    lists too."""
    if replaced(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_strings_for(f.type, replaced)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_strings_for(t.value_type, replaced)))
    return t


def _no_timestamps(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp or date (the reader's guess for ISO-8601 strings) a
    string."""
    return _strings_for(t, lambda x: pa.types.is_timestamp(x) or pa.types.is_date(x))


def _dates_as_strings(t: pa.DataType) -> pa.DataType:
    """``t`` with every date a string (pyarrow's JSON reader reads a date from a number of
    days only; an ISO-8601 date string is read as a string, then cast)."""
    return _strings_for(t, pa.types.is_date)


def _is_temporal(t: pa.DataType) -> bool:
    """``t`` has a timestamp or date (in it)."""
    return not _no_timestamps(t).equals(t)


def _column(values: list, t: pa.DataType, text: bool | None = None) -> pa.Array:
    """``values`` (of the dict path, one per row) as an array of ``t``, ISO-8601 strings of a
    timestamp or date read as pyarrow's JSON reader reads them (a UTC offset converts to
    UTC; a date is ``YYYY-MM-DD``), so a batch the reader refuses gets the columns the reader
    gives a batch it reads; numbers stay epoch units (days for a date), as ``pa.array``
    reads them, unless ``text`` (the column holds strings: a number among them fails).
    ``text`` defaults to whether ``values`` hold strings (or objects, arrays)."""
    if text is None:
        text = _has_text(values)
    if not _is_temporal(t) or not text:
        return pa.array(values, t)
    # the reader itself, on this column alone (the other columns may hold what it refuses)
    buf = b"\n".join(_encode_json({"v": v}) for v in values)
    read = pa_json.ReadOptions(use_threads=False, block_size=max(_MIN_BLOCK, len(buf) + 1))
    options = pa_json.ParseOptions(explicit_schema=pa.schema([("v", _dates_as_strings(t))]),
                                   unexpected_field_behavior="ignore")
    column = pa_json.read_json(pa.BufferReader(buf), read_options=read,
                               parse_options=options).column("v").combine_chunks()
    return column if column.type.equals(t) else column.cast(t)


def _has_text(values: list) -> bool:
    return any(isinstance(v, str | dict | list) for v in values)


def _encode_json(value: object) -> bytes:
    try:
        return msgspec.json.encode(value)
    except (msgspec.EncodeError, TypeError, ValueError) as exc:
        raise pa.ArrowInvalid(f"not JSON: {exc}") from None


def _has_struct_or_null(t: pa.DataType) -> bool:
    if pa.types.is_struct(t) or pa.types.is_null(t):
        return True
    return pa.types.is_list(t) and _has_struct_or_null(t.value_type)


def _carried(schema: pa.Schema) -> pa.Schema | None:
    """The types to read the next batch with: the batch's, but not null (a column that
    held nulls only says nothing about its type) nor objects (their fields may differ from
    one batch to the next; the reader infers them each time)."""
    fields = [f for f in schema if not _has_struct_or_null(f.type)]
    return pa.schema(fields) if fields else None


class ArrowBatchDecoder:
    """Decodes the messages of one partition's fetched batch into one ``RecordBatch``.

    :param value_format: ``"json"``, ``"bytes"`` or anything else (rows from ``rows_of``).
    :param schema: the value's columns, or ``None`` to infer them.
    :param metadata: add the metadata columns.
    :param value_record: the dict path's record of one message (without metadata): the
        fallback of the JSON reader.
    :param rows_of: the rows of one message (metadata included when asked), for the formats
        without a columnar decoder (a deserializer function, Debezium).
    """

    def __init__(self, value_format: object, schema: pa.Schema | None, metadata: bool,
                 value_record: Callable[[Any], dict],
                 rows_of: Callable[[Any], list[dict]]) -> None:
        self.value_format = value_format
        self.schema = schema
        self.metadata = metadata
        self.value_record = value_record
        self.rows_of = rows_of
        self._options = pa_json.ParseOptions(
            explicit_schema=pa.schema([f.with_type(_dates_as_strings(f.type)) for f in schema]),
            unexpected_field_behavior="ignore") if schema is not None else None
        #: the schema's columns with timestamps or dates (their dict-path rows: _column)
        self._temporal = schema is not None and any(_is_temporal(f.type) for f in schema)
        #: the types of the previous batch (inferred mode): see :func:`_carried`
        self._seen: pa.Schema | None = None
        #: the column order of the previous batch (inferred mode)
        self._names: list[str] = []
        self._full_schema = (pa.schema(list(schema) + [f for f in METADATA_SCHEMA
                                                       if f.name not in schema.names])
                             if schema is not None and metadata else schema)

    def decode(self, msgs: Sequence) -> pa.RecordBatch:
        if self.value_format == "json":
            batch = self._json(msgs)
        elif self.value_format == "bytes":
            batch = pa.RecordBatch.from_arrays(
                [pa.array([m.value() for m in msgs], pa.binary())], names=["value"])
        else:  # rows with their metadata already
            rows = [row for m in msgs for row in self.rows_of(m)]
            batch = self._from_rows(rows, msgs, self._full_schema, per_message=False)
            if self.metadata and self.schema is None:  # their types, not the inferred ones
                batch = _cast_metadata(batch)
            return batch
        return self._with_metadata(batch, msgs) if self.metadata else batch

    # -- JSON -------------------------------------------------------------------------------
    def _json(self, msgs: Sequence) -> pa.RecordBatch:
        values = [m.value() for m in msgs]
        if None not in values:
            batch = self._read(values)
            if batch is not None:
                return batch
        # the dict path: it wraps non-objects, reads NaN, and names a value that is no JSON
        rows = [self.value_record(m) for m in msgs]
        batch = self._from_rows(rows, msgs, self.schema, per_message=True)
        if self.schema is None:
            self._seen, self._names = _carried(batch.schema), batch.schema.names
        return batch

    def _read(self, values: list) -> pa.RecordBatch | None:
        """The values by pyarrow's JSON reader, or ``None`` when it cannot read them as
        one object per value (then the dict path decides)."""
        buf = b"\n".join(values)
        newlines = buf.count(b"\n") != len(values) - 1  # a pretty-printed value
        read = pa_json.ReadOptions(use_threads=False, block_size=max(_MIN_BLOCK, len(buf) + 1))
        options = self._options
        if options is None:
            options = pa_json.ParseOptions(explicit_schema=self._seen,
                                           unexpected_field_behavior="infer")
        options.newlines_in_values = newlines
        try:
            table = pa_json.read_json(pa.BufferReader(buf), read_options=read, parse_options=options)
            if self.schema is None:
                strings = pa.schema([f.with_type(_no_timestamps(f.type)) for f in table.schema])
                if not strings.equals(table.schema):  # read ISO-8601 strings as strings
                    options = pa_json.ParseOptions(explicit_schema=strings,
                                                   unexpected_field_behavior="infer",
                                                   newlines_in_values=newlines)
                    table = pa_json.read_json(pa.BufferReader(buf), read_options=read,
                                              parse_options=options)
            if self.schema is not None and not table.schema.equals(self.schema):
                table = table.cast(self.schema)  # ISO-8601 date strings to dates
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        if table.num_rows != len(values):
            return None
        if self.schema is None:
            table = self._in_order(table)
            self._seen = _carried(table.schema)
        batches = table.combine_chunks().to_batches()
        if not batches:  # no columns (every value {})
            return pa.RecordBatch.from_pylist([{}] * len(values))
        return batches[0]

    def _in_order(self, table: pa.Table) -> pa.Table:
        """``table``'s columns in the previous batch's order, new ones after them (the
        reader puts the carried types first)."""
        names = table.column_names
        if names != self._names:
            have = set(names)
            order = [n for n in self._names if n in have]
            order += [n for n in names if n not in set(order)]
            if order != names:
                table = table.select(order)
            self._names = order
        return table

    # -- rows -------------------------------------------------------------------------------
    def _from_rows(self, rows: list[dict], msgs: Sequence, schema: pa.Schema | None, *,
                   per_message: bool) -> pa.RecordBatch:
        try:
            if schema is not None and self._temporal:
                return pa.RecordBatch.from_arrays(
                    [_column([r.get(f.name) for r in rows], f.type) for f in schema],
                    schema=schema)
            return pa.RecordBatch.from_pylist(rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError,
                OverflowError) as exc:
            raise self._schema_error(rows, msgs, schema, per_message, exc) from None

    def _schema_error(self, rows: list[dict], msgs: Sequence, schema: pa.Schema | None,
                      per_message: bool, exc: Exception) -> KafkaSchemaError:
        """The record (topic, partition, offset) and field that do not convert."""
        def where(i: int) -> str:
            # rows from the dict path: one per message; a changelog's: the first message
            return _where(msgs[i]) if per_message else _where(msgs[0]) + " onwards"
        if schema is not None:
            text = {f.name: _has_text([r.get(f.name) for r in rows]) for f in schema}
            for i, row in enumerate(rows):
                for field in schema:
                    try:
                        _column([row.get(field.name)], field.type, text[field.name])
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError,
                            OverflowError) as e:
                        return KafkaSchemaError(
                            f"Kafka record at {where(i)}: field {field.name!r} is "
                            f"{row.get(field.name)!r:.80}, which does not convert to "
                            f"{field.type} (the source's schema): {e}. Fix the schema or "
                            "the record (the job fails: a restart would meet it again)")
        else:
            first: dict[str, tuple[int, str]] = {}
            for i, row in enumerate(rows):
                for name, value in row.items():
                    kind = _kind(value)
                    if kind is None:
                        continue
                    seen = first.setdefault(name, (i, kind))
                    if seen[1] != kind:
                        return KafkaSchemaError(
                            f"Kafka record at {where(i)}: field {name!r} is a {kind} "
                            f"({value!r:.80}) but a {seen[1]} in the record at "
                            f"{where(seen[0])}; one Arrow column cannot hold both. Give the "
                            "source a schema (KafkaSource(schema=...)) that reads both, or "
                            "read dicts (arrow=False)")
        return KafkaSchemaError(
            f"Kafka records at {_where(msgs[0])} to offset {msgs[-1].offset()} do not convert "
            f"to an Arrow batch: {exc}")

    # -- metadata ---------------------------------------------------------------------------
    def _with_metadata(self, batch: pa.RecordBatch, msgs: Sequence) -> pa.RecordBatch:
        n = len(msgs)
        msg = msgs[0]
        columns = [pa.array([msg.topic()] * n, pa.string()),
                   pa.array([msg.partition()] * n, pa.int64()),
                   pa.array([m.offset() for m in msgs], pa.int64()),
                   pa.array([m.timestamp()[1] for m in msgs], pa.int64()),
                   pa.array([m.key() for m in msgs], pa.binary())]
        keep = [i for i, name in enumerate(batch.schema.names) if name not in _METADATA_NAMES]
        arrays = [batch.column(i) for i in keep] + columns
        names = [batch.schema.names[i] for i in keep] + METADATA_SCHEMA.names
        return pa.RecordBatch.from_arrays(arrays, names=names)


def _cast_metadata(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The metadata columns of ``batch`` in :data:`METADATA_SCHEMA`'s types (``_key`` of
    keyless messages is inferred as null)."""
    fields = [METADATA_SCHEMA.field(f.name) if f.name in _METADATA_NAMES else f
              for f in batch.schema]
    target = pa.schema(fields)
    return batch if target.equals(batch.schema) else batch.cast(target)


def _kind(value: object) -> str | None:
    """What Arrow column a JSON value needs (``None`` for null: any column)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


__all__ = ["METADATA_SCHEMA", "ArrowBatchDecoder"]
