"""KafkaSource's resolved offsets against a real broker: a timestamp start, ``start="latest"``
and ``stop_at="latest"`` on a topic written in multi-record batches (Tansu's ListOffsets
answers 0 for a timestamp and the number of batches for latest: each test fails if the
source trusts them), and a restore past a partition's end or below its start failing with
topic, partition and offsets."""

from __future__ import annotations

import json
import uuid

import pytest
from test_kafka_source import ctx, drain

from airflow_checkpoint_provider.engine.connectors.kafka import (
    KafkaOffsetOutOfRangeError,
    KafkaSource,
)

BASE_MS = 1_700_000_000_000


def batched_topic(broker, n: int, *, partitions: int = 1) -> str:
    """``n`` records ``{"i": i}`` in partition 0 with timestamps ``BASE_MS + i s``, produced
    in a few multi-record batches (the broker's ListOffsets(latest) then says a few)."""
    from confluent_kafka import Producer

    topic = broker.create_topic(f"off-{uuid.uuid4().hex[:8]}", partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100,
                         "log_level": 3})
    for i in range(n):
        producer.produce(topic, json.dumps({"i": i}).encode(), partition=0,
                         timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0
    return topic


@pytest.mark.timeout(30)
def test_a_timestamp_start_reads_from_the_first_record_at_or_after_it(kafka_broker):
    topic = batched_topic(kafka_broker, 60)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], start=BASE_MS + 41_500,
                      stop_at={(topic, 0): 60}, metadata=True)
    reader = src.open_split(f"{topic}:0", None, ctx())
    got = drain(reader)
    assert [r["i"] for r in got] == list(range(42, 60))
    assert got[0]["_timestamp"] == BASE_MS + 42_000
    reader.close()
    # a timestamp after every record: the partition's end, nothing to read
    later = KafkaSource(kafka_broker.bootstrap, topics=[topic], start=BASE_MS + 99_000,
                        stop_at="latest")
    reader = later.open_split(f"{topic}:0", None, ctx())
    assert drain(reader) == [] and reader.position() == {"offset": 60, "end": 60}
    reader.close()


@pytest.mark.timeout(30)
def test_stop_at_latest_reads_to_the_end_offset_when_first_opened(kafka_broker):
    topic = batched_topic(kafka_broker, 250, partitions=2)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], stop_at="latest")
    reader = src.open_split(f"{topic}:0", None, ctx())
    assert reader.position() == {"offset": 0, "end": 250}
    kafka_broker.produce(topic, [(0, {"i": 250})])  # after the split was opened: not read
    assert [r["i"] for r in drain(reader)] == list(range(250))
    reader.close()
    empty = src.open_split(f"{topic}:1", None, ctx())
    assert drain(empty) == [] and empty.position() == {"offset": 0, "end": 0}
    empty.close()


@pytest.mark.timeout(30)
def test_start_latest_skips_what_the_partition_held_when_first_opened(kafka_broker):
    topic = batched_topic(kafka_broker, 120)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], start="latest",
                      stop_at={(topic, 0): 123})
    reader = src.open_split(f"{topic}:0", None, ctx())
    kafka_broker.produce(topic, [(0, {"i": 120 + k}) for k in range(3)])
    assert [r["i"] for r in drain(reader)] == [120, 121, 122]
    reader.close()


@pytest.mark.timeout(30)
def test_a_restore_past_the_end_of_a_recreated_partition_is_refused(kafka_broker):
    """The checkpoint resumes offset 50 of a partition that now ends at 10 (the topic was
    deleted and recreated): Apache Kafka would answer the fetch with OFFSET_OUT_OF_RANGE,
    Tansu with nothing at all (the job would wait forever). The restore is refused."""
    topic = batched_topic(kafka_broker, 10, partitions=2)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic])
    ok = {f"{topic}:0": {"offset": 10, "end": None}, f"{topic}:1": {"offset": 0, "end": None}}
    src.check_restore("in", ok, checkpoint_id=3, location="chk-3", job_name="j")
    with pytest.raises(KafkaOffsetOutOfRangeError,
                       match=rf"checkpoint 3 at chk-3 resumes .*{topic}:0 at offset 50 \(the "
                             r"partition ends at offset 10\).*recreated, or truncated"):
        src.check_restore("in", {**ok, f"{topic}:0": {"offset": 50, "end": None}},
                          checkpoint_id=3, location="chk-3", job_name="j")


@pytest.mark.timeout(30)
def test_an_offset_out_of_range_reported_by_the_client_fails_naming_the_lost_offsets(
        kafka_broker):
    """Truncation (retention, DeleteRecords) moves a partition's start past the offset a job
    resumes from; Kafka then answers the fetch with OFFSET_OUT_OF_RANGE, which librdkafka
    reports (auto.offset.reset=error) as _AUTO_OFFSET_RESET. Tansu supports no DeleteRecords
    (it drops the connection) and never moves a partition's start, so the report the client
    would deliver is handed to the consumer's error path here: the job must fail naming the
    topic, partition, the offset it wanted and the offsets the partition holds."""
    from confluent_kafka import KafkaError

    topic = batched_topic(kafka_broker, 10)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic])
    reader = src.open_split(f"{topic}:0", {"offset": 4, "end": None}, ctx())

    class Report:  # the message librdkafka delivers for the partition's failed fetch
        def error(self):
            return KafkaError(KafkaError._AUTO_OFFSET_RESET, "fetch failed: offset out of range")

        def topic(self):
            return topic

        def partition(self):
            return 0

    class Reporting:  # the real consumer, whose next consume() delivers that report
        def __init__(self, real):
            self.real = real

        def consume(self, *args, **kwargs):
            return [Report()]

        def __getattr__(self, name):
            return getattr(self.real, name)

    shared = reader.consumer
    shared.consumer = Reporting(shared.consumer)
    try:
        with pytest.raises(KafkaOffsetOutOfRangeError,
                           match=rf"{topic}:0: offset 4 to read from is out of range \(the "
                                 r"partition holds offsets 0 to 10\)"):
            reader.read_batch(100)
    finally:
        shared.consumer = shared.consumer.real
        reader.close()
