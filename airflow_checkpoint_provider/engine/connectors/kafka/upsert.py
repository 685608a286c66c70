"""``UpsertKafkaSink``: a changelog (:mod:`...changelog`) written to a Kafka topic as the
latest row per primary key, as Flink's ``upsert-kafka`` connector does.

Each record becomes a Kafka record whose key is the primary key columns (a JSON object,
``{"id": 7}``, unless ``key_serializer`` says otherwise) and whose value is:

* ``+I``, ``+U`` (or a record without ``_op``): the row as JSON, without ``_op``;
* ``-D``: ``null`` -- a tombstone, which a compacted topic (``cleanup.policy=compact``)
  uses to drop the key, and which tells readers the key is gone;
* ``-U``: nothing. The ``+U`` that follows it (same key) replaces the row anyway; an update
  that changes the key arrives as ``-D`` of the old key and ``+I`` of the new one.

So a reader that keeps the last value per key (or the broker's log compaction) holds the
table. The topic should be created with ``cleanup.policy=compact``.

Delivery is :class:`~.sink.KafkaSink`'s: this is a ``KafkaSink`` that encodes records this
way (its staged-epoch transactions, commit markers, fencing and ``delivery`` options
unchanged), so with ``delivery="exactly_once"`` a ``read_committed`` reader sees each
completed checkpoint's changes once, in order per key.

Order. Kafka keeps order per partition; the records of a key go to one partition (the
producer's ``partitioner`` defaults to ``murmur2_random``, the Java client's, so that Java
producers and this sink put a key on the same partition). Records of one key must also come
from one sink subtask: with a sink parallelism above 1, feed it from a stream keyed by the
same key (``key_by`` the key, or the output of an ``aggregate`` keyed by it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...changelog import DELETE, OP_FIELD, UPDATE_BEFORE, row_kind
from ...errors import BadRecordError
from ..upsert import upsert_key
from .sink import DEFAULT_MARKER_TOPIC, BytesOf, KafkaSink, json_value


class UpsertKafkaSink(KafkaSink):
    """Write a changelog to a Kafka topic as the latest row per key, tombstones for deletes
    (module docstring).

    :param bootstrap_servers: ``"host:port,host:port"`` or a list.
    :param topic: the output topic (it must exist; create it with ``cleanup.policy=compact``).
    :param key: the primary key column(s).
    :param key_serializer: a function ``{key column: value} -> bytes``; default: compact JSON.
    :param value_serializer: a function ``row -> bytes`` (the row without ``_op``); default:
        compact JSON.
    :param timestamp_field, delivery, marker_topic, transactional_id_prefix,
        transaction_timeout_ms, producer_config: as :class:`~.sink.KafkaSink`'s.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], topic: str, *,
                 key: str | Sequence[str],
                 key_serializer: Callable[[dict], bytes] | None = None,
                 value_serializer: Callable[[dict], bytes] | None = None,
                 timestamp_field: str | None = None, delivery: str = "exactly_once",
                 marker_topic: str = DEFAULT_MARKER_TOPIC, transactional_id_prefix: str = "ckpt",
                 transaction_timeout_ms: int = 60_000,
                 producer_config: Mapping[str, object] | None = None) -> None:
        columns = upsert_key("UpsertKafkaSink", "upsert", key)
        self.key_serializer: Callable[[dict], bytes | None] = (
            BytesOf(key_serializer, "UpsertKafkaSink: key_serializer") if key_serializer
            else json_value)
        super().__init__(bootstrap_servers, topic, key=None, value_serializer=value_serializer,
                         timestamp_field=timestamp_field, delivery=delivery,
                         marker_topic=marker_topic,
                         transactional_id_prefix=transactional_id_prefix,
                         transaction_timeout_ms=transaction_timeout_ms,
                         producer_config=producer_config)
        #: what the engine's upsert sinks declare (``sink()`` puts an upsert materializer in
        #: front of one fed by a parallel regular join)
        self.mode = "upsert"
        self.key: list[str] = columns  # type: ignore[assignment]

    #: the Java client's partitioner: a key lands on the partition a Java producer picks
    producer_defaults = {"partitioner": "murmur2_random"}

    def describe(self) -> str:
        return f"upsert-kafka({self.topic}, key={','.join(self.key)}, {self.delivery})"

    def encode_batch(self, records: list[dict]) -> list[list]:
        """``[key, value or None (a tombstone), timestamp]`` per record; ``-U`` dropped."""
        where = f"upsert-kafka sink of topic {self.topic!r}"
        out = []
        for record in records:
            op = row_kind(record, where)
            if op == UPDATE_BEFORE:
                continue
            key = {}
            for col in self.key:
                value = record.get(col)
                if value is None:
                    raise BadRecordError(f"{where}: a record has no (or a null) key column "
                                         f"{col!r}: {str(record)[:200]}")
                key[col] = value
            row = {c: v for c, v in record.items() if c != OP_FIELD}
            ts = row.get(self.timestamp_field) if self.timestamp_field else None
            out.append([self.key_serializer(key),
                        None if op == DELETE else self.value_serializer(row),
                        int(ts) if ts is not None else None])
        return out
