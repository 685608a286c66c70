"""Offsets the source resolves by reading, not by ListOffsets: partition end offsets and the
first offset at or after a timestamp.

Why. ``KafkaSource`` needs a partition's end offset for ``start="latest"``,
``stop_at="latest"`` and to refuse a restored offset past the end of a partition, and the
first offset at or after a timestamp for ``start=<epoch ms>``. Kafka answers both with
ListOffsets, but Kafka-protocol brokers differ there: Tansu 0.6 (the test broker) answers
ListOffsets(latest) with the number of record batches of the partition instead of its end
offset, and ListOffsets(timestamp) with 0. The high watermark in *fetch* responses is right
on every broker tried. So:

* :func:`end_offsets` assigns a throw-away consumer to the partitions at what
  ListOffsets(latest) answers (the end on Kafka, an offset at or before it on Tansu) and
  reads until each partition reports end-of-partition; the offset of that event is the end
  the fetch responses report (the high watermark, or with ``read_committed`` the last
  stable offset, which is what Kafka's ListOffsets(latest) answers a read_committed client
  too). On Kafka that is one empty fetch per partition. (ListOffsets is asked explicitly:
  assigned at the logical ``OFFSET_END``, librdkafka's first fetch came 0.5 s later.)
* :func:`first_offset_at` starts at the offset ListOffsets(timestamp) answers and skips the
  records older than the timestamp (none on Kafka, whose answer is already the first record
  at or after it; on Tansu it scans from the start of the partition).

Both cost a consumer connection, so the source calls them when a split is first opened or
a restore is checked, never per record.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from .client import METADATA_TIMEOUT_S, client_config, require_client
from .errors import KafkaPartitionMissingError, KafkaUnavailableError

_MISSING = ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC")


def _probe(conf: dict, isolation: str):
    ck = require_client()
    return ck.Consumer(client_config(conf, **{
        "group.id": "ckpt-offsets-probe", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "enable.partition.eof": True,
        "auto.offset.reset": "error", "isolation.level": isolation,
        "fetch.wait.max.ms": 50}))


def _fail(err, tp: tuple[str, int], conf: dict, what: str) -> None:
    ck = require_client()
    if any(err.code() == getattr(ck.KafkaError, name) for name in _MISSING):
        raise KafkaPartitionMissingError(
            f"Kafka partition {tp[0]}:{tp[1]} does not exist (deleted?): {err.str()}")
    if err.code() in (ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN):
        return  # librdkafka reconnects; the deadline bounds how long
    raise KafkaUnavailableError(f"reading {what} of Kafka partition {tp[0]}:{tp[1]} from "
                                f"{conf['bootstrap.servers']} failed: {err.str()}")


def end_offsets(conf: dict, partitions: Iterable[tuple[str, int]], *,
                isolation: str = "read_uncommitted",
                timeout: float = METADATA_TIMEOUT_S) -> dict[tuple[str, int], int]:
    """``{(topic, partition): end offset}`` as fetch responses report it (module docstring):
    the high watermark, or the last stable offset with ``isolation="read_committed"``."""
    ck = require_client()
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    found: dict[tuple[str, int], int] = {}
    consumer = _probe(conf, isolation)
    try:
        starts = []
        for t, p in wanted:
            try:
                low, high = consumer.get_watermark_offsets(ck.TopicPartition(t, p),
                                                           timeout=timeout)
            except ck.KafkaException as exc:
                _fail(exc.args[0], (t, p), conf, "the end offset")
                raise KafkaUnavailableError(f"Kafka at {conf['bootstrap.servers']}: "
                                            f"{exc.args[0].str()}") from None
            starts.append(ck.TopicPartition(t, p, max(low, high)))
        consumer.assign(starts)
        deadline = time.monotonic() + timeout
        while len(found) < len(wanted):
            if time.monotonic() > deadline:
                left = [f"{t}:{p}" for t, p in wanted if (t, p) not in found]
                raise KafkaUnavailableError(
                    f"Kafka at {conf['bootstrap.servers']} did not report the end offset of "
                    f"partition(s) {', '.join(left)} within {timeout:.0f} s")
            for msg in consumer.consume(1000, timeout=0.05):
                err = msg.error()
                tp = (msg.topic(), msg.partition())
                if err is None:
                    continue  # a record before the end (Tansu's ListOffsets is short of it)
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    if tp in found:  # reported again, already unassigned: librdkafka
                        continue     # raises "Can't subtract from empty assignment"
                    found[tp] = msg.offset()
                    consumer.incremental_unassign([ck.TopicPartition(*tp)])
                else:
                    _fail(err, tp, conf, "the end offset")
    finally:
        consumer.close()
    return found


def first_offset_at(conf: dict, topic: str, partition: int, timestamp_ms: int, *,
                    isolation: str = "read_committed",
                    timeout: float = METADATA_TIMEOUT_S) -> int:
    """The offset of the first record of ``topic:partition`` whose timestamp is at or after
    ``timestamp_ms`` (Kafka's ``offsetsForTimes``), or the partition's end offset if there
    is none. Records are read from ListOffsets(timestamp)'s answer on (module docstring)."""
    ck = require_client()
    consumer = _probe(conf, isolation)
    try:
        try:
            hint = consumer.offsets_for_times([ck.TopicPartition(topic, partition, timestamp_ms)],
                                              timeout=timeout)[0]
        except ck.KafkaException as exc:
            _fail(exc.args[0], (topic, partition), conf, "the offset of a timestamp")
            raise KafkaUnavailableError(f"Kafka at {conf['bootstrap.servers']}: "
                                        f"{exc.args[0].str()}") from None
        start = hint.offset if hint.offset >= 0 else ck.OFFSET_END
        consumer.assign([ck.TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while True:
            msgs = consumer.consume(1000, timeout=0.05)
            for msg in msgs:
                err = msg.error()
                if err is None:
                    if msg.timestamp()[1] >= timestamp_ms:
                        return msg.offset()
                elif err.code() == ck.KafkaError._PARTITION_EOF:
                    return msg.offset()  # no record at or after the timestamp: the end
                else:
                    _fail(err, (topic, partition), conf, "the offset of a timestamp")
            if not msgs and time.monotonic() > deadline:
                raise KafkaUnavailableError(
                    f"Kafka at {conf['bootstrap.servers']}: reading {topic}:{partition} for "
                    f"the first record at or after {timestamp_ms} got no answer within "
                    f"{timeout:.0f} s")
            if msgs:
                deadline = time.monotonic() + timeout  # progress: the scan goes on
    finally:
        consumer.close()
