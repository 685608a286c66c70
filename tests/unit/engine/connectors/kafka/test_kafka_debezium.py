"""Debezium JSON change events as changelog rows: c/r -> +I, u -> -U +U, d -> -D, tombstones
skipped, envelope and schemaless payloads, updates without ``before``, truncates refused."""

from __future__ import annotations

import json

import pytest

from airflow_checkpoint_provider.engine.connectors.kafka import (
    DebeziumJson,
    DebeziumTruncateError,
    KafkaSource,
)
from airflow_checkpoint_provider.engine.errors import BadRecordError

SOURCE = {"connector": "postgresql", "db": "shop", "schema": "public", "table": "items"}


def event(op: str, before: dict | None = None, after: dict | None = None, *,
          envelope: bool = False) -> bytes:
    payload = {"before": before, "after": after, "op": op, "source": SOURCE, "ts_ms": 1}
    if envelope:
        payload = {"schema": {"type": "struct", "name": "shop.public.items.Envelope"},
                   "payload": payload}
    return json.dumps(payload).encode()


@pytest.mark.parametrize("envelope", [False, True], ids=["schemaless", "schema-envelope"])
def test_each_debezium_op_becomes_its_changelog_rows(envelope):
    fmt = DebeziumJson()
    a, b = {"id": 1, "v": 10}, {"id": 1, "v": 11}
    assert fmt.rows(event("c", after=a, envelope=envelope), "t:0@0") == [{**a, "_op": "+I"}]
    assert fmt.rows(event("r", after=a, envelope=envelope), "t:0@1") == [{**a, "_op": "+I"}]
    assert fmt.rows(event("u", a, b, envelope=envelope), "t:0@2") == [
        {**a, "_op": "-U"}, {**b, "_op": "+U"}]
    assert fmt.rows(event("d", before=b, envelope=envelope), "t:0@3") == [{**b, "_op": "-D"}]


def test_tombstones_and_messages_give_no_rows():
    fmt = DebeziumJson()
    assert fmt.rows(None, "t:0@4") == []          # Kafka tombstone (null value)
    assert fmt.rows(b"null", "t:0@4") == []       # a JSON null
    assert fmt.rows(event("m"), "t:0@5") == []    # a logical-decoding message


def test_an_update_without_before_is_a_lone_update_after_unless_before_is_required():
    """REPLICA IDENTITY DEFAULT: Debezium sends no 'before' on updates. Flink's debezium-json
    then emits the +U alone; require_before=True refuses it (a retracting aggregate would
    add the new row without removing the old one)."""
    after = {"id": 1, "v": 11}
    assert DebeziumJson().rows(event("u", None, after), "t:0@6") == [{**after, "_op": "+U"}]
    with pytest.raises(BadRecordError, match=r"t:0@6.*public\.items has no 'before'.*FULL"):
        DebeziumJson(require_before=True).rows(event("u", None, after), "t:0@6")


def test_truncates_and_malformed_events_fail_naming_the_record():
    with pytest.raises(DebeziumTruncateError, match=r"t:1@9 is a Debezium truncate event "
                                                    r"\(table public\.items\)"):
        DebeziumJson().rows(event("t"), "t:1@9")
    with pytest.raises(BadRecordError, match=r"t:1@9 is not a Debezium change event"):
        DebeziumJson().rows(b'{"id": 1}', "t:1@9")
    with pytest.raises(BadRecordError, match=r"t:1@9 is not JSON"):
        DebeziumJson().rows(b"{", "t:1@9")
    with pytest.raises(BadRecordError, match="op 'x' is not one of"):
        DebeziumJson().rows(event("x"), "t:1@9")
    with pytest.raises(BadRecordError, match="'after' is NoneType"):
        DebeziumJson().rows(event("c"), "t:1@9")


def test_the_source_takes_the_format_by_name_or_as_an_object():
    assert isinstance(KafkaSource("h:1", topics=["t"], value_format="debezium-json").value_format,
                      DebeziumJson)
    strict = DebeziumJson(require_before=True)
    assert KafkaSource("h:1", topics=["t"], value_format=strict).value_format is strict


def test_the_truncate_error_lives_in_the_connectors_errors_module():
    from airflow_checkpoint_provider.engine.connectors.kafka import debezium, errors
    from airflow_checkpoint_provider.engine.errors import DeterministicError

    assert debezium.DebeziumTruncateError is errors.DebeziumTruncateError
    assert errors.DebeziumTruncateError.__module__ == errors.__name__
    assert issubclass(errors.DebeziumTruncateError, errors.KafkaConnectorError)
    assert issubclass(errors.DebeziumTruncateError, DeterministicError)
