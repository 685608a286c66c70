"""Errors of the Kafka connector. Each names the topic, the partition and the offsets
involved, and says what to do."""

from __future__ import annotations

from ...errors import (
    BadRecordError,
    ConfigurationError,
    DeterministicError,
    EngineError,
    RestoreError,
)


class KafkaConnectorError(EngineError):
    """Base class of the Kafka connector's errors."""


class KafkaUnavailableError(KafkaConnectorError):
    """No broker of ``bootstrap_servers`` answered within the connector's timeout."""


class KafkaPartitionMissingError(KafkaConnectorError, RestoreError):
    """A partition recorded in a checkpoint (or named by ``stop_at``/``start_offsets``) no
    longer exists: its topic was deleted or recreated with fewer partitions."""


class KafkaOffsetOutOfRangeError(KafkaConnectorError, RestoreError):
    """The offset to read from is no longer in the partition (retention or a truncation
    removed it): the records between it and the partition's start are lost."""


class KafkaPublishError(KafkaConnectorError):
    """The sink could not publish (or verify) a checkpoint epoch's transaction."""


class KafkaConfigurationError(KafkaConnectorError, ConfigurationError):
    """A KafkaSource/KafkaSink option is invalid."""


class KafkaSchemaError(KafkaConnectorError, BadRecordError):
    """A record's value does not fit the Arrow columns of ``KafkaSource(arrow=True)`` (the
    source's ``schema``, or a field's type in the other records of its batch). Names the
    topic, partition, offset and field; the job fails without restarting (a restart would
    read the same record)."""


class DebeziumTruncateError(KafkaConnectorError, DeterministicError):
    """A Debezium truncate event (``DebeziumJson``): every row of the table is gone, which
    no changelog row says; the job fails without restarting (the restart would meet it
    again)."""
