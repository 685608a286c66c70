"""``KafkaSource(arrow=True)``'s decoder (kafka/batches.py) on messages made here, no broker:
a batch of JSON values parsed by pyarrow's JSON reader gives the columns the dict path
(``decode`` then ``from_pylist``) gives, a given schema decides columns and types, metadata
fields are typed columns, and a value that does not fit fails naming its topic, partition,
offset and field."""

from __future__ import annotations

import datetime as dt
import json
import math

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.connectors.kafka import (
    KafkaConfigurationError,
    KafkaSchemaError,
    KafkaSource,
)
from airflow_checkpoint_provider.engine.connectors.kafka.batches import (
    METADATA_SCHEMA,
    ArrowBatchDecoder,
)
from airflow_checkpoint_provider.engine.errors import BadRecordError


class Msg:
    """What the decoder reads of a ``confluent_kafka.Message``."""

    def __init__(self, value, offset: int, *, topic: str = "orders", partition: int = 2,
                 key: bytes | None = None, timestamp: int = 1_700_000_000_000) -> None:
        if isinstance(value, dict | list | int | float | str) and not isinstance(value, bool):
            value = json.dumps(value).encode()
        self._value, self._offset, self._topic = value, offset, topic
        self._partition, self._key, self._ts = partition, key, timestamp

    def value(self):
        return self._value

    def offset(self):
        return self._offset

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def key(self):
        return self._key

    def timestamp(self):
        return (1, self._ts)


def source(**kwargs) -> KafkaSource:
    return KafkaSource("127.0.0.1:1", topics=["orders"], arrow=True, **kwargs)


def decoder(src: KafkaSource, *, columnar_only: bool = False) -> ArrowBatchDecoder:
    """The decoder a partition reader of ``src`` uses; ``columnar_only``: its dict-path
    fallback fails the test (the batch must go through pyarrow's JSON reader)."""
    def refuse(msg):
        raise AssertionError(f"the dict path decoded offset {msg.offset()}")
    return ArrowBatchDecoder(src.value_format, src.schema, src.metadata,
                             refuse if columnar_only else src.value_record, src.records)


def msgs(values, start: int = 0, **kwargs) -> list[Msg]:
    return [Msg(v, start + i, **kwargs) for i, v in enumerate(values)]


def dict_path(src: KafkaSource, batch: list[Msg], names: list[str]) -> list[dict]:
    """The dict path's records, with the batch's columns (a field a record lacks: None)."""
    return [{n: r.get(n) for n in names} for r in map(src.decode, batch)]


VALUES = [
    {"id": 1, "key": "k1", "value": 10, "price": 1.5, "ok": True, "note": None,
     "tags": ["a", "b"], "where": {"city": "Zürich", "zip": 8001}},
    {"id": 2, "key": "k2", "value": -3, "price": 2.0, "ok": False, "note": "ünïcode ✓",
     "tags": [], "where": {"city": "Köln", "zip": 50667}},
    {"id": 3, "key": "k1", "value": 0, "price": 1e-3, "tags": ["c"],
     "where": {"city": "Paris", "zip": 75001}},  # no ok, no note
]


def test_json_values_are_read_into_columns_as_the_dict_path_reads_them():
    src = source()
    batch = msgs(VALUES)
    out = decoder(src, columnar_only=True).decode(batch)
    assert isinstance(out, pa.RecordBatch) and out.num_rows == 3
    assert out.to_pylist() == dict_path(src, batch, out.schema.names)
    assert out.schema.field("id").type == pa.int64()
    assert out.schema.field("price").type == pa.float64()
    assert out.schema.field("where").type == pa.struct([("city", pa.string()),
                                                        ("zip", pa.int64())])


def test_strings_that_look_like_timestamps_stay_strings():
    src = source()
    batch = msgs([{"at": "2026-01-02 03:04:05", "in": {"day": "2026-01-02"}},
                  {"at": "2026-01-02T03:04:05Z", "in": {"day": "2026-01-03"}}])
    dec = decoder(src, columnar_only=True)
    out = dec.decode(batch)
    assert out.schema.field("at").type == pa.string()
    assert out.to_pylist() == dict_path(src, batch, ["at", "in"])
    # the next batch of the partition reads the field as a string at once
    assert dec.decode(msgs([{"at": "2026-02-02 03:04:05", "in": {"day": "x"}}], 2)
                      ).column("at").to_pylist() == ["2026-02-02 03:04:05"]


def test_pretty_printed_values_are_read():
    src = source()
    batch = [Msg(json.dumps(v, indent=2).encode(), i) for i, v in enumerate(VALUES)]
    out = decoder(src, columnar_only=True).decode(batch)
    assert out.to_pylist() == dict_path(src, batch, out.schema.names)


def test_a_columns_type_carries_over_to_the_next_batches_of_the_partition():
    src = source()
    dec = decoder(src)
    first = dec.decode(msgs([{"key": "a", "value": 1, "extra": "x"}]))
    second = dec.decode(msgs([{"key": "b", "value": 2}], 1))  # no extra: a null column
    assert second.schema.equals(first.schema)  # the vectorized operators coalesce them
    assert second.to_pylist() == [{"key": "b", "value": 2, "extra": None}]
    # a fraction in an int64 column: the batch's own type (as the dict path infers)
    third = dec.decode(msgs([{"key": "c", "value": 2.5}], 2))
    assert third.schema.field("value").type == pa.float64()
    assert third.column("value").to_pylist() == [2.5]


def test_a_given_schema_decides_the_columns_their_order_and_types():
    schema = pa.schema([("value", pa.float64()), ("key", pa.string()), ("qty", pa.int32())])
    src = source(schema=schema)
    batch = msgs([{"key": "a", "value": 1, "ignored": [1]}, {"key": "b", "value": 2.5, "qty": 7}])
    out = decoder(src, columnar_only=True).decode(batch)
    assert out.schema.equals(schema)
    assert out.to_pylist() == [{"value": 1.0, "key": "a", "qty": None},
                               {"value": 2.5, "key": "b", "qty": 7}]


def test_metadata_fields_are_typed_columns_after_the_values():
    src = source(metadata=True)
    batch = [Msg({"key": "a", "_offset": "not mine"}, 40, key=b"a"),
             Msg({"key": "b"}, 41, key=None, timestamp=1_700_000_000_123)]
    out = decoder(src, columnar_only=True).decode(batch)
    assert out.schema.names == ["key", *METADATA_SCHEMA.names]
    for field in METADATA_SCHEMA:
        assert out.schema.field(field.name).type == field.type, field
    assert out.to_pylist() == [src.decode(m) for m in batch]


def test_metadata_with_a_schema_keeps_the_schemas_columns_first():
    src = source(metadata=True, schema=pa.schema([("key", pa.string())]))
    out = decoder(src).decode(msgs([{"key": "a", "x": 1}], 5, key=b"k"))
    assert out.schema.names == ["key", *METADATA_SCHEMA.names]
    assert out.to_pylist() == [{"key": "a", "_topic": "orders", "_partition": 2, "_offset": 5,
                                "_timestamp": 1_700_000_000_000, "_key": b"k"}]


def test_values_the_reader_refuses_are_decoded_as_the_dict_path_does():
    src = source()
    batch = msgs([5, {"value": 6}], 0) + [Msg(None, 2), Msg(b'{"value": NaN}', 3)]
    out = decoder(src).decode(batch)
    rows = out.to_pylist()
    assert rows[:3] == [{"value": 5}, {"value": 6}, {"value": None}]
    assert math.isnan(rows[3]["value"])


@pytest.mark.parametrize("bad", [b'{"value": 1}{"value": 2}', b"", b"{not json", b"[1, 2"])
def test_a_value_that_is_not_one_json_value_fails_naming_its_offset(bad):
    batch = msgs([{"value": 1}], 10, partition=1) + [Msg(bad, 11, partition=1)]
    with pytest.raises(BadRecordError, match=r"orders:1 offset 11 is not JSON"):
        decoder(source()).decode(batch)


def test_a_value_that_does_not_fit_the_schema_fails_naming_topic_partition_offset_and_field():
    src = source(schema=pa.schema([("key", pa.string()), ("value", pa.int64())]))
    batch = msgs([{"key": "a", "value": 1}, {"key": "b", "value": 2},
                  {"key": "c", "value": "three"}], 100, partition=0)
    with pytest.raises(KafkaSchemaError, match=r"orders:0 offset 102: field 'value' is 'three'"
                                               r".*does not convert to int64"):
        decoder(src).decode(batch)


def test_a_field_of_two_kinds_in_one_batch_fails_naming_both_records():
    batch = msgs([{"key": "a", "value": 1}, {"key": "b", "value": None},
                  {"key": "c", "value": "x"}], 7, partition=3)
    with pytest.raises(KafkaSchemaError) as err:
        decoder(source()).decode(batch)
    assert "orders:3 offset 9: field 'value' is a string" in str(err.value)
    assert "a number in the record at orders:3 offset 7" in str(err.value)
    assert isinstance(err.value, BadRecordError)  # deterministic: the job fails at once


def test_bytes_values_are_one_binary_column():
    src = KafkaSource("127.0.0.1:1", topics=["t"], arrow=True, value_format="bytes")
    out = decoder(src).decode([Msg(b"\x00\xff", 0), Msg(None, 1)])
    assert out.schema == pa.schema([("value", pa.binary())])
    assert out.column("value").to_pylist() == [b"\x00\xff", None]


def test_a_deserializer_and_debezium_rows_go_through_from_pylist():
    src = KafkaSource("127.0.0.1:1", topics=["t"], arrow=True, metadata=True,
                      value_format=lambda b: {"n": len(b)})
    out = decoder(src).decode([Msg(b"abc", 0), Msg(b"de", 1)])
    assert out.column("n").to_pylist() == [3, 2]
    assert out.schema.field("_key").type == pa.binary()  # keyless: still binary
    deb = KafkaSource("127.0.0.1:1", topics=["t"], arrow=True, value_format="debezium-json")
    event = {"op": "u", "before": {"id": 1, "v": "a"}, "after": {"id": 1, "v": "b"}}
    out = decoder(deb).decode([Msg(event, 0)])
    assert out.to_pylist() == [{"id": 1, "v": "a", "_op": "-U"}, {"id": 1, "v": "b", "_op": "+U"}]


@pytest.mark.parametrize("kwargs", [{"schema": pa.schema([("a", pa.int64())])},
                                    {"schema": {"a": "int64"}, "arrow": True}])
def test_a_schema_needs_arrow_and_a_pyarrow_schema(kwargs):
    with pytest.raises(KafkaConfigurationError, match="schema="):
        KafkaSource("127.0.0.1:1", topics=["t"], **kwargs)


TEMPORAL = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ms")),
                      ("at_utc", pa.timestamp("us", tz="UTC")), ("day", pa.date32())])
TEMPORAL_VALUES = [
    {"id": 1, "at": "2026-01-02 03:04:05", "at_utc": "2026-01-02T03:04:05Z", "day": "2026-01-02"},
    {"id": 2, "at": "2026-01-02T03:04:05.250+02:00", "at_utc": "2026-01-02 03:04:05",
     "day": None},
    {"id": 3, "at": "2026-01-03", "at_utc": "2026-01-02T03:04:05.123456-01:00",
     "day": "2026-02-28"},
]


def test_timestamp_and_date_columns_of_a_schema_read_iso_8601_strings():
    out = decoder(source(schema=TEMPORAL)).decode(msgs(TEMPORAL_VALUES))
    assert out.schema.equals(TEMPORAL)
    rows = out.to_pylist()
    assert [r["day"] for r in rows] == [dt.date(2026, 1, 2), None, dt.date(2026, 2, 28)]
    assert rows[1]["at"] == dt.datetime(2026, 1, 2, 1, 4, 5, 250_000)  # offsets: to UTC
    assert rows[2]["at_utc"] == dt.datetime(2026, 1, 2, 4, 4, 5, 123_456, tzinfo=dt.UTC)


@pytest.mark.parametrize("odd", [None, b"7", b'{"id": 9, "x": NaN}'],
                         ids=["tombstone", "not-an-object", "nan"])
def test_a_fallback_batch_reads_timestamp_and_date_columns_as_the_json_reader_does(odd):
    src = source(schema=TEMPORAL)
    valid = decoder(src, columnar_only=True).decode(msgs(TEMPORAL_VALUES)).to_pylist()
    batch = msgs(TEMPORAL_VALUES[:2]) + [Msg(odd, 2)] + msgs(TEMPORAL_VALUES[2:], 3)
    out = decoder(src).decode(batch)  # the dict path (the reader refuses the odd value)
    assert out.schema.equals(TEMPORAL)
    rows = out.to_pylist()
    assert rows[:2] + rows[3:] == valid
    odd_row = {"id": 9 if odd and odd.startswith(b"{") else None, "at": None,
               "at_utc": None, "day": None}
    assert rows[2] == odd_row


@pytest.mark.parametrize(("field", "bad"), [("at", "not a time"), ("day", "2026-13-01"),
                                            ("at_utc", 1.5)])
def test_a_fallback_batch_names_the_record_with_a_bad_timestamp_or_date(field, bad):
    src = source(schema=TEMPORAL)
    batch = msgs(TEMPORAL_VALUES, 20, partition=4) + [Msg(None, 23, partition=4)]
    batch[1] = Msg({**TEMPORAL_VALUES[1], field: bad}, 21, partition=4)
    with pytest.raises(KafkaSchemaError, match=rf"orders:4 offset 21: field '{field}'"):
        decoder(src).decode(batch)
