"""``KafkaSource(arrow=True)`` in jobs on a real broker: Arrow batches into the vectorized
``aggregate()`` and a per-record function, exactly once through a slot SIGKILL (the
read_committed output equals a failure-free run's and the computed reference); a record that
does not fit the schema fails the job naming topic, partition and offset; the metadata
column ``_timestamp`` gives each partition its own watermark."""

from __future__ import annotations

import os
import uuid
from collections import defaultdict

import pyarrow as pa
import pytest
from kafka_jobs import (
    KILL_AT_FIRST_SNAPSHOT,
    OUT_PARTITIONS,
    ThirdSnapshotKillingSum,
    check_output,
    expected_sums,
    make_input,
)
from pipelines import TEST_RESTARTS, FaultPlan, RunningSum

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource
from airflow_checkpoint_provider.engine.errors import JobFailedError

SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("value", pa.int64())])


def arrow_job(root: str, broker, in_topic: str, stop_at: dict, sums: str, totals: str, *,
              name: str, function: type[RunningSum] = RunningSum,
              faults: FaultPlan | None = None) -> Pipeline:
    """Kafka (Arrow batches, a given schema) -> key_by(key) -> [aggregate(count, sum) ->
    Kafka ``totals``] and [running sum per record -> Kafka ``sums``], parallelism 2, each
    sink subtask writing partitions of its own (kafka_jobs.py: Tansu and concurrent
    transactions)."""
    p = Pipeline(name, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=250, directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    keyed = (p.source(KafkaSource(broker.bootstrap, topics=[in_topic], stop_at=stop_at,
                                  arrow=True, schema=SCHEMA),
                      uid="kafka-in", parallelism=2)
             .key_by("key"))
    (keyed.aggregate(uid="totals", parallelism=2, count="count", sum=("sum", "value"))
          .sink(KafkaSink(broker.bootstrap, totals, key="key", partitioner="fixed"),
                uid="totals-out", parallelism=2))
    (keyed.process(function(faults, 0.0005), uid="sum", parallelism=2)
          .sink(KafkaSink(broker.bootstrap, sums, key="key", partitioner="fixed"),
                uid="sums-out", parallelism=2))
    return p


def final_totals(broker, topic: str, keys: int) -> dict[str, tuple[int, int]]:
    """Per key the last (count, sum) of the aggregate's read_committed output; fails when a
    count was committed twice (a replayed epoch would repeat one)."""
    rows = broker.read(topic, OUT_PARTITIONS, expect=keys, settle_s=1.0)
    per_key: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        per_key[r["key"]].append(r)
    for key, got in per_key.items():
        counts = [r["count"] for r in got]
        assert len(counts) == len(set(counts)), f"key {key}: a count committed twice: {counts}"
    return {k: (max(r["count"] for r in got), max(got, key=lambda r: r["count"])["sum"])
            for k, got in per_key.items()}


@pytest.mark.timeout(150)
def test_arrow_batches_through_a_slot_sigkill_equal_the_failure_free_run(workdir, kafka_broker):
    n = 6_000
    in_topic, stop_at = make_input(kafka_broker, n)
    reference = {k: (len(v["ids"]), v["sum"]) for k, v in expected_sums(n).items()}

    outs = {}
    for run in ("clean", "killed"):
        sums = kafka_broker.create_topic(f"sums-{run}-{in_topic}", OUT_PARTITIONS)
        totals = kafka_broker.create_topic(f"totals-{run}-{in_topic}", OUT_PARTITIONS)
        faults = (FaultPlan(str(workdir / "faults"), [("kill", KILL_AT_FIRST_SNAPSHOT)])
                  if run == "killed" else None)
        result = arrow_job(str(workdir / run), kafka_broker, in_topic, stop_at, sums, totals,
                           name=f"kafka-arrow-{run}", faults=faults,
                           function=ThirdSnapshotKillingSum if faults else RunningSum).run()
        assert result.status == "FINISHED", result.failure_reason
        if faults is not None:
            assert len(faults.fired()) == 1 and result.restarts >= 1
            assert faults.fired()[f"kill-{KILL_AT_FIRST_SNAPSHOT}"]["last_notified"] >= 1
        else:
            assert result.restarts == 0
        check_output(kafka_broker, sums, n, OUT_PARTITIONS)  # every record once, in order
        outs[run] = final_totals(kafka_broker, totals, len(reference))
    assert outs["clean"] == reference
    assert outs["killed"] == outs["clean"]


@pytest.mark.timeout(90)
def test_a_record_that_does_not_fit_the_schema_fails_the_job_naming_where_it_is(
        workdir, kafka_broker):
    from confluent_kafka import Producer

    topic = kafka_broker.create_topic(f"bad-{uuid.uuid4().hex[:8]}", 2)
    counts = kafka_broker.produce(topic, [(p, {"id": i, "key": f"k{i}", "value": i})
                                          for i in range(40) for p in (0, 1)])
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "log_level": 3})
    producer.produce(topic, b'{"id": 99, "key": "k99", "value": "ninety-nine"}', partition=1)
    assert producer.flush(30) == 0
    out = kafka_broker.create_topic(f"out-{topic}")
    p = Pipeline("kafka-arrow-bad", max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=200, directory=str(workdir / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url="sqlite:///" + str(workdir / "meta.db"))
    (p.source(KafkaSource(kafka_broker.bootstrap, topics=[topic], arrow=True, schema=SCHEMA,
                          stop_at={(topic, 0): counts[0], (topic, 1): counts[1] + 1}),
              uid="kafka-in", parallelism=1)
      .key_by("key").aggregate(uid="totals", n="count")
      .sink(KafkaSink(kafka_broker.bootstrap, out), uid="out"))
    with pytest.raises(JobFailedError) as failed:
        p.run()
    assert (f"KafkaSchemaError: Kafka record at {topic}:1 offset {counts[1]}: field 'value' is "
            "'ninety-nine', which does not convert to int64") in str(failed.value)
    with MetadataStore("sqlite:///" + str(workdir / "meta.db")) as store:
        [job] = store.list_jobs()
        assert job.status == "FAILED"
        # a deterministic error: no restart reads the record again
        assert len(store.list_attempts(job.job_id)) == 1


@pytest.mark.timeout(60)
def test_the_timestamp_column_gives_each_partition_its_own_watermark(workdir, kafka_broker):
    """The Kafka timestamps of partition p start p * 100 s after partition 0's; batches of
    50 interleave the partitions in one subtask. One watermark over them would call
    partition 0's records late; per partition none is."""
    from confluent_kafka import Producer

    per_partition, window_ms = 600, 1_000
    topic = kafka_broker.create_topic(f"ts-{uuid.uuid4().hex[:8]}", 3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "log_level": 3,
                         "linger.ms": 20})
    base = 1_700_000_000_000
    for i in range(per_partition):
        for part in range(3):
            producer.produce(topic, b'{"key": "k%d"}' % (i % 4), partition=part,
                             timestamp=base + part * 100_000 + i * 10)
        producer.poll(0)
    assert producer.flush(30) == 0
    out = kafka_broker.create_topic(f"out-{topic}")
    p = Pipeline("kafka-arrow-ts", max_parallelism=128, batch_size=50,
                 checkpoint=CheckpointConfig(interval_ms=100, directory=str(workdir / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + str(workdir / "meta.db"))
    (p.source(KafkaSource(kafka_broker.bootstrap, topics=[topic], arrow=True, metadata=True,
                          stop_at={(topic, q): per_partition for q in range(3)}),
              uid="kafka-in", parallelism=1,
              watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                  0, timestamp_field="_timestamp").with_emit_interval(1))
      .key_by("key").window(TumblingWindows(window_ms))
      .aggregate(uid="win", n="count")
      .sink(KafkaSink(kafka_broker.bootstrap, out), uid="kafka-out"))
    result = p.run()
    assert result.status == "FINISHED", result.failure_reason
    windows = kafka_broker.read(out, expect=3 * 4 * (per_partition * 10 // window_ms))
    assert sum(w["n"] for w in windows) == 3 * per_partition
    assert len(windows) == 3 * 4 * (per_partition * 10 // window_ms)  # every (key, window) once
