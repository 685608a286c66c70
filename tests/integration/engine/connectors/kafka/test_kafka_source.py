"""KafkaSource against a real broker: partitions as splits, start and stop offsets,
positions, value formats and metadata fields, group offsets after checkpoints, and the
errors that name topic, partition and offsets."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kafka_jobs import make_input
from ports import closed_port

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.kafka import (
    KafkaConfigurationError,
    KafkaPartitionMissingError,
    KafkaSource,
    KafkaUnavailableError,
)


def ctx(subtask: int = 0, parallelism: int = 1, *, fenced: bool = False) -> SourceContext:
    return SourceContext(f"job-{uuid.uuid4().hex[:6]}", "source-test", "in", subtask,
                         parallelism, 0, fenced=fenced)


def drain(reader, timeout: float = 20.0) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = reader.read_batch(100)
        if batch is None:
            return out
        out.extend(batch)
    raise AssertionError(f"the split did not end within {timeout} s ({len(out)} records read)")


@pytest.mark.timeout(30)
def test_partitions_are_the_splits_in_a_stable_order(kafka_broker):
    topic, _ = make_input(kafka_broker, 10)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic])
    assert src.splits() == [f"{topic}:0", f"{topic}:1", f"{topic}:2"]
    pattern = KafkaSource(kafka_broker.bootstrap, topic_pattern=f"{topic[:-2]}.*")
    assert pattern.splits() == src.splits()
    assert src.lineage_dataset() == (f"kafka://{kafka_broker.bootstrap}", topic)


@pytest.mark.timeout(30)
def test_explicit_start_and_stop_offsets_with_metadata_fields(kafka_broker):
    topic, stop_at = make_input(kafka_broker, 30)  # 10 records per partition
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], start={(topic, 1): 3},
                      stop_at={(topic, 1): 7}, metadata=True)
    reader = src.open_split(f"{topic}:1", None, ctx())
    got = drain(reader)
    assert [r["_offset"] for r in got] == [3, 4, 5, 6]
    assert [r["id"] for r in got] == [10, 13, 16, 19]  # record i is in partition i % 3
    assert {(r["_topic"], r["_partition"], r["_key"]) for r in got} == {(topic, 1, None)}
    assert all(isinstance(r["_timestamp"], int) and r["_timestamp"] > 0 for r in got)
    assert reader.position() == {"offset": 7, "end": 7}
    reader.close()


@pytest.mark.timeout(30)
def test_a_restored_position_resumes_at_its_offset_and_keeps_its_end(kafka_broker):
    topic, stop_at = make_input(kafka_broker, 30)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], stop_at=stop_at)
    # the checkpoint says: offset 4, end 8 (the end recorded when the split was first opened
    # wins over today's stop_at)
    reader = src.open_split(f"{topic}:2", {"offset": 4, "end": 8}, ctx())
    assert [r["id"] for r in drain(reader)] == [14, 17, 20, 23]
    reader.close()


@pytest.mark.timeout(30)
def test_values_as_bytes_or_through_a_deserializer(kafka_broker):
    topic, stop_at = make_input(kafka_broker, 3, partitions=1)
    raw = KafkaSource(kafka_broker.bootstrap, topics=[topic], stop_at=stop_at, value_format="bytes")
    reader = raw.open_split(f"{topic}:0", None, ctx())
    assert [r["value"][:7] for r in drain(reader)] == [b'{"id": '] * 3
    reader.close()
    custom = KafkaSource(kafka_broker.bootstrap, topics=[topic], stop_at=stop_at,
                         value_format=lambda b: {"size": len(b)})
    reader = custom.open_split(f"{topic}:0", None, ctx())
    assert all(r["size"] > 10 for r in drain(reader))
    reader.close()


@pytest.mark.timeout(30)
def test_group_offsets_are_committed_after_a_checkpoint_and_used_by_start_group(kafka_broker):
    topic, stop_at = make_input(kafka_broker, 30)
    group = f"g-{topic}"
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], group_id=group,
                      stop_at={(topic, 0): 10})
    reader = src.open_split(f"{topic}:0", None, ctx())
    assert len(reader.read_batch(1) or drain(reader, 5)) >= 1
    reader.notify_checkpoint_complete(1, {"offset": 6, "end": 10})
    reader.consumer.consumer.poll(0.5)  # serve the asynchronous commit
    reader.close()
    later = KafkaSource(kafka_broker.bootstrap, topics=[topic], group_id=group, start="group",
                        stop_at={(topic, 0): 10})
    reader = later.open_split(f"{topic}:0", None, ctx())
    assert [r["id"] for r in drain(reader)] == [18, 21, 24, 27]  # offsets 6..9
    reader.close()


@pytest.mark.timeout(30)
def test_a_fenced_job_commits_no_group_offsets(kafka_broker):
    from confluent_kafka import Consumer, TopicPartition

    topic, _ = make_input(kafka_broker, 3, partitions=1)
    group = f"g-{topic}"
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], group_id=group, stop_at={(topic, 0): 3})
    reader = src.open_split(f"{topic}:0", None, ctx(fenced=True))
    drain(reader)
    reader.notify_checkpoint_complete(1, reader.position())
    reader.close()
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group})
    try:
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset < 0
    finally:
        c.close()


@pytest.mark.timeout(30)
def test_a_missing_topic_fails_naming_it(kafka_broker):
    with pytest.raises(KafkaPartitionMissingError, match="no-such-topic"):
        KafkaSource(kafka_broker.bootstrap, topics=["no-such-topic"]).splits()


@pytest.mark.timeout(30)
def test_a_checkpointed_partition_that_no_longer_exists_refuses_the_restore(kafka_broker):
    topic, _ = make_input(kafka_broker, 3)
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic])
    src.check_restore("in", {f"{topic}:2": {"offset": 1, "end": None}}, checkpoint_id=4,
                      location="chk-4", job_name="j")
    with pytest.raises(KafkaPartitionMissingError, match=rf"{topic}:5 at offset 17"):
        src.check_restore("in", {f"{topic}:5": {"offset": 17, "end": None}}, checkpoint_id=4,
                          location="chk-4", job_name="j")


@pytest.mark.timeout(30)
def test_an_unreachable_broker_fails_naming_the_address():
    with closed_port() as port:
        src = KafkaSource(f"127.0.0.1:{port}", topics=["t"], broker_timeout_s=2)
        with pytest.raises(KafkaUnavailableError, match=f"127.0.0.1:{port}"):
            src.splits()


def test_options_are_checked_when_the_pipeline_is_built():
    with pytest.raises(KafkaConfigurationError, match="exactly one of topics"):
        KafkaSource("h:1")
    with pytest.raises(KafkaConfigurationError, match="not the string"):
        KafkaSource("h:1", topics="t")
    with pytest.raises(KafkaConfigurationError, match="stop_at"):
        KafkaSource("h:1", topics=["t"], stop_at="end")


@pytest.mark.timeout(30)
def test_a_bounded_split_ends_at_its_end_offset_past_a_transaction_marker(kafka_broker):
    """Records produced in a transaction: the commit marker takes the last offset, which a
    read_committed consumer never returns; the split still ends at the exclusive end."""
    import json

    from confluent_kafka import Producer

    topic = kafka_broker.create_topic(f"txn-{uuid.uuid4().hex[:8]}")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap,
                         "transactional.id": f"t-{topic}", "log_level": 3})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, json.dumps({"id": i}).encode())
    producer.commit_transaction(10)  # records at offsets 0..4, the commit marker at 5
    src = KafkaSource(kafka_broker.bootstrap, topics=[topic], stop_at={(topic, 0): 6})
    reader = src.open_split(f"{topic}:0", None, ctx())
    assert [r["id"] for r in drain(reader, 10)] == [0, 1, 2, 3, 4]
    assert reader.position() == {"offset": 6, "end": 6}
    reader.close()


@pytest.mark.parametrize("value", [
    b'{"key":"k1","value":42}', b'{"a":123456789012345678901234567890,"b":-0.0}',
    b'{"a":1,"a":2}', b'{"a":NaN,"b":-Infinity}', b'{"a":1e400}', b'{"a":"\\ud800"}',
    '{"a":"\u00e9"}'.encode("utf-16"), b'[1,2]', b' "text" ',
])
def test_json_values_decode_as_json_loads_decodes_them(value):
    """msgspec decodes what it can, json.loads the rest: the same Python values."""
    from airflow_checkpoint_provider.engine.connectors.kafka.codec import json_loads as _json_loads

    got, want = _json_loads(value), json.loads(value)
    assert repr(got) == repr(want) and type(got) is type(want)


@pytest.mark.parametrize("value", [b'{"a"', b'{"a":"\xff"}', b""])
def test_a_value_that_is_not_json_raises_value_error_as_json_loads_does(value):
    from airflow_checkpoint_provider.engine.connectors.kafka.codec import json_loads as _json_loads

    with pytest.raises(ValueError):
        _json_loads(value)
