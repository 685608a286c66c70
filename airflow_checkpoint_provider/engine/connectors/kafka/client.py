"""What the Kafka source and sink share: client configuration, topic metadata, topic
creation. ``confluent_kafka`` is imported inside the functions (it is the ``kafka`` extra)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

from ...extras import require
from .errors import KafkaConfigurationError, KafkaUnavailableError

#: seconds a metadata or admin request may take before the broker counts as unreachable
METADATA_TIMEOUT_S = 15.0


def require_client():
    """``confluent_kafka`` (with its admin module), or :class:`~...extras.MissingExtraError`
    naming the ``kafka`` extra."""
    ck = require("kafka")
    import confluent_kafka.admin  # noqa: F401 - ck.admin below
    return ck


def base_config(bootstrap_servers: str | Sequence[str], extra: Mapping[str, object] | None) -> dict:
    servers = bootstrap_servers if isinstance(bootstrap_servers, str) else ",".join(bootstrap_servers)
    if not servers:
        raise KafkaConfigurationError("bootstrap_servers is empty: name at least one broker host:port")
    conf: dict = {"bootstrap.servers": servers}
    conf.update(extra or {})
    return conf


#: librdkafka's own log lines (a broker connection refused, ...) go through Python logging
LIBRDKAFKA_LOG = logging.getLogger(__name__.rsplit(".", 1)[0] + ".librdkafka")


def client_config(conf: dict, **more: object) -> dict:
    """``conf`` plus ``more`` for a new client, its log routed to :data:`LIBRDKAFKA_LOG`
    (librdkafka writes to stderr otherwise)."""
    return {"logger": LIBRDKAFKA_LOG, **conf, **more}


def list_partitions(conf: dict, *, topics: Sequence[str] | None = None,
                    pattern: str | None = None, timeout: float = METADATA_TIMEOUT_S,
                    ) -> dict[str, int]:
    """``{topic: number of partitions}`` of ``topics`` (each must exist) or of the topics
    matching ``pattern`` (``re.fullmatch``; internal ``__`` topics left out)."""
    ck = require_client()
    admin = ck.admin.AdminClient(client_config(conf))
    try:
        md = admin.list_topics(timeout=timeout)
    except ck.KafkaException as exc:
        raise KafkaUnavailableError(
            f"Kafka at {conf['bootstrap.servers']} did not answer a metadata request within "
            f"{timeout:.0f} s ({exc}); check bootstrap_servers and that the brokers run") from None
    found = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
    if pattern is not None:
        rx = re.compile(pattern)
        return {t: n for t, n in found.items() if rx.fullmatch(t) and not t.startswith("__")}
    missing = [t for t in topics or () if t not in found]
    if missing:
        from .errors import KafkaPartitionMissingError
        raise KafkaPartitionMissingError(
            f"topic(s) {', '.join(missing)} do not exist on Kafka at {conf['bootstrap.servers']}; "
            "create them first (the source does not create topics)")
    return {t: found[t] for t in topics or ()}


def ensure_topic(conf: dict, topic: str, *, partitions: int = 1, compact: bool = False,
                 timeout: float = METADATA_TIMEOUT_S) -> None:
    """Create ``topic`` unless it exists (``compact``: ``cleanup.policy=compact``, falling
    back to the broker's default policy when the broker refuses the setting)."""
    ck = require_client()
    admin = ck.admin.AdminClient(client_config(conf))
    try:
        if topic in admin.list_topics(timeout=timeout).topics:
            return
    except ck.KafkaException as exc:
        raise KafkaUnavailableError(
            f"Kafka at {conf['bootstrap.servers']} did not answer within {timeout:.0f} s "
            f"({exc})") from None
    attempts = [{"cleanup.policy": "compact"}, {}] if compact else [{}]
    for config in attempts:
        fut = admin.create_topics([ck.admin.NewTopic(topic, partitions, 1, config=config)])[topic]
        try:
            fut.result(timeout)
            return
        except ck.KafkaException as exc:
            err = exc.args[0]
            if err.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if config and err.code() in (ck.KafkaError.INVALID_CONFIG,
                                         ck.KafkaError.POLICY_VIOLATION):
                continue
            raise KafkaUnavailableError(
                f"could not create topic {topic!r} on Kafka at {conf['bootstrap.servers']}: "
                f"{err.str()}") from None
