"""Debezium JSON change events as changelog records (:mod:`...changelog`).

A Debezium connector writes one JSON change event per row change to a topic per table,
either with its schema envelope (``{"schema": ..., "payload": {...}}``, the JSON
converter's ``schemas.enable=true``) or without (the payload alone). The payload holds
``before`` (the row before the change), ``after`` (the row after it), ``op`` and
``source``. :class:`DebeziumJson` turns one event into changelog rows, as Flink's
``debezium-json`` format does:

* ``c`` (create) and ``r`` (read: a row of the connector's initial snapshot) -> ``+I`` of
  ``after``;
* ``u`` (update) -> ``-U`` of ``before`` then ``+U`` of ``after``;
* ``d`` (delete) -> ``-D`` of ``before``;
* a tombstone (a record with a null value, which Debezium writes after a delete so that a
  compacted topic can drop the key) -> no row.

A missing ``before`` on an update. With PostgreSQL's default ``REPLICA IDENTITY`` (and
MySQL's ``binlog_row_image=minimal``) the server does not log the old row, so Debezium
sends updates with ``"before": null`` and deletes with a ``before`` holding the key columns
only. An update then becomes a ``+U`` alone (as Flink's ``debezium-json`` does). That is
enough for an upsert sink keyed on the primary key (the last row per key wins), but a
retracting aggregate (``key_by(...).aggregate(...)``) adds the new row without taking the
old one away, and a key-only ``-D`` retracts the row's count but not its values: its
results drift. Set ``REPLICA IDENTITY FULL`` on such tables, or pass
``DebeziumJson(require_before=True)``, which fails the job at the first update without
``before`` instead.

Truncates (``op: "t"``) cannot be expressed as row changes: the job fails naming the
event (as :class:`...postgres_cdc.PostgresCdcSource` does on a TRUNCATE). Debezium's
logical-decoding messages (``op: "m"``) carry no row and are skipped.
"""

from __future__ import annotations

import json

from ...changelog import DELETE, INSERT, OP_FIELD, UPDATE_AFTER, UPDATE_BEFORE
from ...errors import BadRecordError
from .errors import DebeziumTruncateError as DebeziumTruncateError  # its home: .errors

#: Debezium's ``op`` values that carry a row change
_ROW_OPS = ("c", "r", "u", "d")


class DebeziumJson:
    """Deserializer of Debezium JSON change events into changelog rows (module docstring).

    :param require_before: refuse an update event without ``before`` (a table without
        ``REPLICA IDENTITY FULL``) instead of emitting its ``+U`` alone; use it when a
        retracting aggregate consumes the rows.
    """

    #: what ``KafkaSource(value_format=...)`` names this format
    name = "debezium-json"

    def __init__(self, *, require_before: bool = False) -> None:
        self.require_before = require_before

    def __repr__(self) -> str:
        return f"DebeziumJson(require_before={self.require_before})"

    def rows(self, value: bytes | None, where: str) -> list[dict]:
        """The changelog rows of one event (``[]`` for a tombstone); ``where`` names the
        record (topic, partition, offset) in errors."""
        if value is None:
            return []
        try:
            event = json.loads(value)
        except ValueError as exc:
            raise BadRecordError(f"Kafka record at {where} is not JSON ({exc}); it is not a "
                                 "Debezium JSON change event") from None
        if event is None:  # a JSON null value: a tombstone too
            return []
        if isinstance(event, dict) and "payload" in event and "schema" in event:
            event = event["payload"]  # the schema envelope
        if not isinstance(event, dict) or "op" not in event:
            raise BadRecordError(
                f"Kafka record at {where} is not a Debezium change event (no 'op' field; keys: "
                f"{', '.join(sorted(event)) if isinstance(event, dict) else type(event).__name__})")
        op = event["op"]
        if op not in _ROW_OPS:
            if op == "m":
                return []
            if op == "t":
                raise DebeziumTruncateError(
                    f"Kafka record at {where} is a Debezium truncate event (table "
                    f"{_table(event)}): a truncate cannot be expressed as changelog rows. "
                    "Rebuild the downstream tables, then start a new job after this offset")
            raise BadRecordError(f"Kafka record at {where}: Debezium op {op!r} is not one of "
                                 "c, r, u, d, t, m")
        before, after = event.get("before"), event.get("after")
        if op in ("c", "r"):
            return [_row(after, INSERT, where, "after")]
        if op == "d":
            return [_row(before, DELETE, where, "before")]
        if before is None:
            if self.require_before:
                raise BadRecordError(
                    f"Kafka record at {where}: a Debezium update of table {_table(event)} has no "
                    "'before' row (the table's REPLICA IDENTITY is not FULL), and "
                    "require_before=True; ALTER TABLE ... REPLICA IDENTITY FULL")
            return [_row(after, UPDATE_AFTER, where, "after")]
        return [_row(before, UPDATE_BEFORE, where, "before"),
                _row(after, UPDATE_AFTER, where, "after")]


def _row(image: object, op: str, where: str, which: str) -> dict:
    if not isinstance(image, dict):
        raise BadRecordError(f"Kafka record at {where}: the Debezium event's {which!r} is "
                             f"{type(image).__name__}, not a row object")
    if OP_FIELD in image:
        raise BadRecordError(f"Kafka record at {where}: the row has a column {OP_FIELD!r}, "
                             "the changelog's own field")
    return {**image, OP_FIELD: op}


def _table(event: dict) -> str:
    source = event.get("source")
    if isinstance(source, dict) and source.get("table"):
        schema = source.get("schema") or source.get("db")
        return f"{schema}.{source['table']}" if schema else str(source["table"])
    return "?"
