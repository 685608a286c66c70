"""The chaos harness's look at the broker after a Kafka run that differed
(bench/chaos/kafka_state.py), against the test broker (Tansu, started and stopped here on
127.0.0.1): what read_committed and read_uncommitted show per partition, the sinks' commit
markers, and the verdict -- records the sink never published are named as such, a healthy
topic's probes are visible, a transaction left open by a sink's transactional.id is
aborted by the re-initialization and named."""

from __future__ import annotations

import json
import uuid

import pytest
from kafka_server import broker_fixture

from bench.chaos import kafka_state

pytestmark = pytest.mark.timeout(120)

kafka_broker = broker_fixture(scope="module")

JOB, UID, JOB_ID = "chaos-job", "rows-out", "0123456789abcdef"
TABLE = {(i,): {"id": i, "v": i * 10} for i in range(6)}


def _producer(broker, tid: str):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                  "linger.ms": 0, "log_level": 3})
    p.init_transactions(15)
    return p


def _publish(broker, topic: str, rows: dict, *, subtask: int = 0, epoch: int | None = None,
             commit: bool = True):
    """The rows (key id) in one transaction of the sink's transactional.id for ``subtask``,
    partition id % 2, with the commit marker of ``epoch``; left open unless ``commit``."""
    from confluent_kafka import Consumer, TopicPartition

    p = _producer(broker, f"{kafka_state.PREFIX}-{JOB}-{UID}-{subtask}")
    p.begin_transaction()
    for (i,), row in rows.items():
        p.produce(topic, json.dumps(row).encode(), json.dumps({"id": i}).encode(),
                  partition=i % 2)
    p.flush(15)
    if epoch is not None:
        group = Consumer({"bootstrap.servers": broker.bootstrap, "log_level": 3,
                          "group.id": f"{kafka_state.PREFIX}-{JOB}-{UID}-{subtask}-{JOB_ID}"})
        p.send_offsets_to_transaction([TopicPartition(kafka_state.MARKER_TOPIC, 0, epoch)],
                                      group.consumer_group_metadata(), 15)
        group.close()
    if commit:
        p.commit_transaction(15)
    return p


def _state(broker, topic: str) -> dict:
    return kafka_state.broker_state(broker.bootstrap, {topic: 2}, {topic: TABLE}, job_name=JOB,
                                    uids=[UID], subtasks=2, job_ids=[JOB_ID])


def test_a_healthy_topic_shows_every_record_its_markers_and_visible_probes(kafka_broker):
    kafka_broker.create_topic(kafka_state.MARKER_TOPIC, 1)
    topic = kafka_broker.create_topic(f"rows-{uuid.uuid4().hex[:8]}", 2)
    _publish(kafka_broker, topic, TABLE, epoch=4)
    state = _state(kafka_broker, topic)
    t = state["topics"][topic]
    assert t["read_committed_vs_reference"] == {"missing": 0, "extra": 0}
    assert t["read_committed"] == t["read_uncommitted"]
    assert {p: r["records"] for p, r in t["read_committed"].items()} == {0: 3, 1: 3}
    assert all(s is not None for s in t["probe_visible_after_s"].values())
    assert state["wedged_partitions"] == [] and state["hidden_partitions"] == []
    assert state["markers"][f"{UID}/0/{JOB_ID[:8]}"] == 4
    assert state["markers"][f"{UID}/1/{JOB_ID[:8]}"] == -1
    assert "undetermined" in state["verdict"]


def test_records_the_sink_never_published_are_named_as_such(kafka_broker):
    topic = kafka_broker.create_topic(f"rows-{uuid.uuid4().hex[:8]}", 2)
    _publish(kafka_broker, topic, {k: v for k, v in TABLE.items() if k != (5,)})
    state = _state(kafka_broker, topic)
    assert state["topics"][topic]["read_uncommitted_vs_reference"] == {"missing": 1, "extra": 0}
    assert state["verdict"].startswith("records missing even read_uncommitted")


def test_a_transaction_left_open_by_the_sinks_id_is_aborted_and_named(kafka_broker):
    topic = kafka_broker.create_topic(f"rows-{uuid.uuid4().hex[:8]}", 2)
    _publish(kafka_broker, topic, {k: {**v, "v": -1} for k, v in TABLE.items()}, subtask=1)
    # the final values in a transaction of subtask 0's id that never ends (a killed publisher)
    open_txn = _publish(kafka_broker, topic, TABLE, commit=False)
    state = _state(kafka_broker, topic)
    t = state["topics"][topic]
    assert t["read_committed_vs_reference"]["missing"] == len(TABLE)  # the old values
    assert t["read_uncommitted_vs_reference"] == {"missing": 0, "extra": 0}
    assert sorted(state["hidden_partitions"]) == [f"{topic}[0]", f"{topic}[1]"]
    assert state["reinitialized"] == [f"ckpt-{JOB}-{UID}-0", f"ckpt-{JOB}-{UID}-1"]
    # re-initialized: the open transaction is aborted; the probes are visible
    assert all(s is not None for s in t["probe_visible_after_s"].values())
    assert state["wedged_partitions"] == []
    # the test broker shows the aborted records (its caveat 1): the table is whole again
    assert t["read_committed_after_probe_vs_reference"] == {"missing": 0, "extra": 0}
    assert "a transaction of the run was left open" in state["verdict"]
    del open_txn


def test_the_log_names_aborted_records_and_read_committed_drops_them(kafka_broker):
    from bench.chaos.kafka_log import aborted_offsets, partition_log, summary

    topic = kafka_broker.create_topic(f"rows-{uuid.uuid4().hex[:8]}", 2)
    _publish(kafka_broker, topic, {(0,): {"id": 0, "v": 1}})  # committed: offsets 0, 1 marker
    aborting = _publish(kafka_broker, topic, {(2,): {"id": 2, "v": 2}, (4,): {"id": 4, "v": 3}},
                        subtask=1, commit=False)
    aborting.abort_transaction(15)
    _publish(kafka_broker, topic, {(6,): {"id": 6, "v": 4}})
    log = partition_log(kafka_broker.bootstrap, topic, 0)
    assert [(b.control, b.records) for b in log] == [
        (None, 1), ("COMMIT", 1), (None, 2), ("ABORT", 1), (None, 1), ("COMMIT", 1)]
    assert aborted_offsets(log) == {2, 3}
    assert any("ABORT marker" in line for line in summary(log))
    # the test broker returns the aborted records to read_committed (its caveat 1) ...
    raw = kafka_state.read_partitions(kafka_broker.bootstrap, topic, 2, "read_committed")
    assert sorted(o for p, o, _k, _v in raw if p == 0) == [0, 2, 3, 5]
    # ... which the harness drops, as Apache Kafka's read_committed would
    kept, dropped = kafka_state.read_committed(kafka_broker.bootstrap, topic, 2)
    assert dropped == 2
    assert kafka_state.compact(kept) == {(0,): {"id": 0, "v": 1}, (6,): {"id": 6, "v": 4}}
