"""Kafka connector: :class:`KafkaSource` (topic partitions as splits, offsets in
checkpoints; ``value_format="debezium-json"`` reads Debezium change events as a changelog),
:class:`KafkaSink` (exactly-once publish of checkpoint epochs) and :class:`UpsertKafkaSink`
(a changelog as the latest row per key, tombstones for deletes). Needs the
``kafka`` extra (``confluent-kafka``). See docs/how-to/kafka.md."""

from __future__ import annotations

from .debezium import DebeziumJson, DebeziumTruncateError
from .errors import (
    KafkaConfigurationError,
    KafkaConnectorError,
    KafkaOffsetOutOfRangeError,
    KafkaPartitionMissingError,
    KafkaPublishError,
    KafkaSchemaError,
    KafkaUnavailableError,
)
from .sink import KafkaSink
from .source import KafkaSource
from .upsert import UpsertKafkaSink

__all__ = [
    "DebeziumJson",
    "DebeziumTruncateError",
    "KafkaConfigurationError",
    "KafkaConnectorError",
    "KafkaOffsetOutOfRangeError",
    "KafkaPartitionMissingError",
    "KafkaPublishError",
    "KafkaSchemaError",
    "KafkaSink",
    "KafkaSource",
    "KafkaUnavailableError",
    "UpsertKafkaSink",
]
