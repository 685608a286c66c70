"""Kafka connector: :class:`KafkaSource` (topic partitions as splits, offsets in
checkpoints) and :class:`KafkaSink` (exactly-once publish of checkpoint epochs). Needs the
``kafka`` extra (``confluent-kafka``). See docs/how-to/kafka.md."""

from __future__ import annotations

from .errors import (
    KafkaConfigurationError,
    KafkaConnectorError,
    KafkaOffsetOutOfRangeError,
    KafkaPartitionMissingError,
    KafkaPublishError,
    KafkaUnavailableError,
)
from .sink import KafkaSink
from .source import KafkaSource

__all__ = [
    "KafkaConfigurationError",
    "KafkaConnectorError",
    "KafkaOffsetOutOfRangeError",
    "KafkaPartitionMissingError",
    "KafkaPublishError",
    "KafkaSink",
    "KafkaSource",
    "KafkaUnavailableError",
]
