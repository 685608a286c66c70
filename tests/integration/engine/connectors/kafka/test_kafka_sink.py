"""KafkaSink's writers against a real broker: each restored epoch published exactly once
(marker found: skipped; no marker: published), zombies fenced, fenced jobs silent."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.kafka import (
    KafkaConfigurationError,
    KafkaPublishError,
    KafkaSink,
)
from airflow_checkpoint_provider.engine.errors import CorruptCheckpointError


def ctx(subtask: int = 0, parallelism: int = 1, *, job: str = "job-1", attempt: int = 0,
        fenced: bool = False) -> SourceContext:
    return SourceContext(job, "sink-test", "out", subtask, parallelism, attempt, fenced=fenced)


@pytest.fixture
def sink(kafka_broker):
    topic = kafka_broker.create_topic(f"sink-{uuid.uuid4().hex[:8]}")
    # a marker topic per test: each test's job name and uid are the same
    return KafkaSink(kafka_broker.bootstrap, topic, key="k",
                     marker_topic=f"markers-{topic}")


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"k": f"k{i % 3}", "i": i} for i in range(start, start + n)]


@pytest.mark.timeout(60)
def test_a_restored_epoch_whose_marker_is_committed_is_not_published_again(sink, kafka_broker):
    first = sink.create_writer(ctx())
    first.recover([])
    first.write(rows(5))
    txns = first.pre_commit(1)
    first.commit(txns)  # published, then the process "dies" before anything else
    again = sink.create_writer(ctx(attempt=1))
    again.recover(txns)  # the checkpoint that holds epoch 1 is restored
    again.close()
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=5)) == list(range(5))


@pytest.mark.timeout(60)
def test_a_restored_epoch_without_marker_is_published_on_recover(sink, kafka_broker):
    first = sink.create_writer(ctx())
    first.recover([])
    first.write(rows(4))
    txns = first.pre_commit(1)  # checkpoint 1 completes, the crash comes before the commit
    again = sink.create_writer(ctx(attempt=1))
    again.recover(txns)
    again.write(rows(2, start=4))
    again.commit(again.pre_commit(2))
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=6)) == list(range(6))


@pytest.mark.timeout(60)
def test_epochs_of_a_subtask_gone_at_a_lower_parallelism_are_published_by_its_heir(
        sink, kafka_broker):
    """Parallelism 3 -> 2: subtask 2's restored epoch goes to subtask 0 (2 % 2) alone, which
    publishes it with subtask 2's transactional.id; subtask 1 leaves it alone."""
    old = sink.create_writer(ctx(2, 3))
    old.recover([])
    old.write(rows(3))
    txns = old.pre_commit(7)
    for sub in (1, 0):
        w = sink.create_writer(ctx(sub, 2, attempt=1))
        w.recover(txns)
        w.close()
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=3)) == [0, 1, 2]


@pytest.mark.timeout(60)
def test_a_zombie_writer_is_fenced_by_the_next_attempt(sink, kafka_broker):
    zombie = sink.create_writer(ctx())
    zombie.recover([])
    zombie.write(rows(2))
    late = zombie.pre_commit(3)
    successor = sink.create_writer(ctx(attempt=1))
    successor.recover([])  # its init_transactions fences the zombie's producer
    with pytest.raises(KafkaPublishError, match="epoch 3 of subtask 0"):
        zombie.commit(late)
    successor.write(rows(1, start=10))
    successor.commit(successor.pre_commit(4))
    assert [r["i"] for r in kafka_broker.read(sink.topic, expect=1)] == [10]


@pytest.mark.timeout(60)
def test_a_fenced_job_publishes_nothing_and_fences_no_one(sink, kafka_broker):
    live = sink.create_writer(ctx())
    live.recover([])
    green = sink.create_writer(ctx(job="green", fenced=True))
    green.recover([])
    green.write(rows(3))
    green.commit(green.pre_commit(1))  # a fenced SinkOperator never calls it; still silent
    live.write(rows(2, start=100))
    live.commit(live.pre_commit(1))  # the live job's producer was not fenced by green
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=2)) == [100, 101]
    assert sink.can_hold_commits()


def test_a_malformed_restored_transaction_is_refused(sink):
    with pytest.raises(CorruptCheckpointError, match="malformed"):
        sink.check_restored_transactions([{"v": 1, "job": "j", "subtask": 0, "epoch": 1,
                                           "count": 2, "records": "bm90IG1zZ3BhY2s="}],
                                         location="chk-1")


@pytest.mark.timeout(60)
def test_a_job_run_with_fenced_sinks_publishes_nothing(workdir, kafka_broker):
    """``fence_sinks=True`` (a blue-green validation run): the job reads, aggregates and
    checkpoints, its Kafka sink stages every epoch and publishes none."""
    from kafka_jobs import make_input, running_sum_job

    in_topic, stop_at = make_input(kafka_broker, 600)
    out = kafka_broker.create_topic(f"out-{in_topic}")
    result = running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out,
                             name="kafka-fenced").run(fence_sinks=True)
    assert result.status == "FINISHED" and result.checkpoints_completed >= 1
    assert kafka_broker.read(out, settle_s=1.0, timeout=3) == []


def _partitions_of(broker, topic: str, partitions: int, n: int) -> dict[int, list[int]]:
    """``{partition: [id, ...]}`` of the first ``n`` records of ``topic``, read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "partitions",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[int]] = {}
    try:
        for _ in range(300):
            for m in consumer.consume(100, timeout=0.1):
                if m.error() is None:
                    found.setdefault(m.partition(), []).append(json.loads(m.value())["i"])
            if sum(len(v) for v in found.values()) >= n:
                break
    finally:
        consumer.close()
    return {p: sorted(ids) for p, ids in found.items()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_the_fixed_partitioner_sends_each_subtasks_records_to_its_partition(kafka_broker,
                                                                            delivery):
    """``partitioner="fixed"``: subtask i's records go to partition i % partitions whatever
    their keys, also when another subtask publishes them after a rescale (3 -> 2: subtask
    0 publishes subtask 2's restored epoch, to partition 2)."""
    topic = kafka_broker.create_topic(f"fixed-{uuid.uuid4().hex[:8]}", 3)
    sink = KafkaSink(kafka_broker.bootstrap, topic, key="k", marker_topic=f"markers-{topic}",
                     partitioner="fixed", delivery=delivery)
    staged = []
    for sub in range(3):
        w = sink.create_writer(ctx(sub, 3))
        w.recover([])
        w.write(rows(4, start=10 * sub))
        txns = w.pre_commit(1)
        if sub < 2:
            w.commit(txns)
        staged += txns
        w.close()
    if delivery == "exactly_once":  # subtask 2's epoch: restored at parallelism 2
        heir = sink.create_writer(ctx(0, 2, attempt=1))
        heir.recover(staged)
        heir.close()
    assert _partitions_of(kafka_broker, topic, 3, 12) == {
        0: [0, 1, 2, 3], 1: [10, 11, 12, 13], 2: [20, 21, 22, 23]}


def test_an_unknown_partitioner_is_refused(kafka_broker):
    with pytest.raises(KafkaConfigurationError, match="partitioner='round_robin'"):
        KafkaSink(kafka_broker.bootstrap, "t", partitioner="round_robin")


# -- the publish path: an epoch this writer staged is published from memory, every other one
# -- is validated and decoded once from its staged description
def through_storage(txns: list) -> list:
    """The descriptions as a restore reads them: out of the checkpoint's JSON ``_metadata``."""
    return json.loads(json.dumps(txns))


@pytest.mark.timeout(60)
def test_an_epoch_this_writer_staged_is_published_from_memory_once(sink, kafka_broker):
    w = sink.create_writer(ctx())
    w.recover([])
    w.write(rows(6))
    txns = w.pre_commit(1)
    assert len(w.held) == 1 and w.held_bytes > 0
    w.commit(txns)
    assert not w.held and w.held_bytes == 0
    w.commit(txns)  # again (a repeated notification): published once
    w.close()
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=6)) == list(range(6))


@pytest.mark.timeout(60)
def test_epochs_beyond_the_memory_limit_and_restored_epochs_are_published_exactly_once(
        sink, kafka_broker):
    """Epoch 1 is held in memory, epoch 2 is not (the limit), epoch 3 was staged but its
    checkpoint's completion never reached the writer (the crash): the writer publishes 1 and
    2; the restore, reading all three from storage (never in its memory), publishes 3 only."""
    w = sink.create_writer(ctx())
    w.recover([])
    w.write(rows(5))
    first = w.pre_commit(1)
    sink.in_memory_limit_bytes = w.held_bytes  # full: the next epochs are not kept
    w.write(rows(5, start=5))
    second = w.pre_commit(2)
    w.write(rows(5, start=10))
    third = w.pre_commit(3)
    assert list(w.held) == [("job-1", 0, 1)]
    w.commit(first + second)
    w.close()
    again = sink.create_writer(ctx(attempt=1))
    again.recover(through_storage(first + second + third))
    assert not again.held
    again.write(rows(5, start=15))
    again.commit(again.pre_commit(4))
    again.close()
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=20)) == list(range(20))


@pytest.mark.timeout(60)
def test_a_corrupted_staged_epoch_is_refused_by_its_own_writer_and_by_a_restore(
        sink, kafka_broker):
    """A description whose records are not what the writer staged (another text: it came
    from storage) is validated, not taken from memory: records of the wrong type, a
    wrong count or an undecodable text are refused, nothing is published."""
    from airflow_checkpoint_provider.engine.connectors.kafka.sink import stage

    w = sink.create_writer(ctx())
    w.recover([])
    w.write(rows(2))
    [t] = w.pre_commit(1)
    corrupt = [{**t, "records": stage([[b"k0", "a str, not bytes", None], [None, b"{}", None]])},
               {**t, "count": 3},
               {**t, "records": t["records"][:-8]}]
    for bad in corrupt:
        with pytest.raises(CorruptCheckpointError, match="malformed"):
            w.commit([bad])
    for bad in corrupt:
        with pytest.raises(CorruptCheckpointError, match="malformed"):
            sink.create_writer(ctx(attempt=1)).recover(through_storage([bad]))
    w.close()
    assert kafka_broker.read(sink.topic, settle_s=1.0, timeout=3) == []


@pytest.mark.timeout(60)
def test_a_value_serializer_returning_str_publishes_the_same_from_memory_and_on_restore(
        kafka_broker):
    topic = kafka_broker.create_topic(f"sink-{uuid.uuid4().hex[:8]}")
    sink = KafkaSink(kafka_broker.bootstrap, topic, key="k", marker_topic=f"markers-{topic}",
                     value_serializer=lambda r: json.dumps(r))
    w = sink.create_writer(ctx())
    w.recover([])
    w.write(rows(3))
    w.commit(w.pre_commit(1))
    w.write(rows(3, start=3))
    staged = w.pre_commit(2)  # completed; the crash comes before the commit
    w.close()
    again = sink.create_writer(ctx(attempt=1))
    again.recover(through_storage(staged))
    again.close()
    assert sorted(r["i"] for r in kafka_broker.read(topic, expect=6)) == list(range(6))
    with pytest.raises(TypeError, match="value_serializer returned int"):
        KafkaSink(kafka_broker.bootstrap, topic, value_serializer=lambda r: 1).encode({})


@pytest.mark.parametrize("record", [
    {"key": "k1", "count": 3, "sum": 10, "ok": True, "none": None, "avg": 1 / 3},
    {"big": 2**70, "small": -(2**63), "exp": 1e16, "tiny": 1e-7, "text": "é\u2028\x00</"},
    {"nan": float("nan")}, {"inf": float("-inf")}, {"raw": b"caf\xc3\xa9", "bad": b"\xff"},
    {"nested": {"a": [1, (2, 3)]}}, {"set": {1}}, {1: "int key"}, {"when": uuid.UUID(int=7)},
])
def test_the_default_json_value_encodes_as_json_dumps_did(record):
    """msgspec for flat records, json.dumps for the rest: the same JSON values as the
    json.dumps-only encoder (bytes as UTF-8 text, NaN, str of other objects)."""
    from airflow_checkpoint_provider.engine.connectors.kafka.codec import (
        _json_default,
        json_value,
    )

    before = json.dumps(record, separators=(",", ":"), default=_json_default).encode()
    got = json_value(record)
    assert json.loads(got) == json.loads(before) or (
        "nan" in record and got == before)  # NaN != NaN: the same text then
