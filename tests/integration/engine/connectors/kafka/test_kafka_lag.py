"""Consumer lag of the Kafka source: measured per partition from the fetch responses' end
offset (not ListOffsets, which Tansu answers wrong), carried in the checkpoints' task
statistics, summed by consumer_lag and published as Prometheus gauges."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kafka_jobs import make_input, running_sum_job
from test_kafka_source import ctx

from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSource
from airflow_checkpoint_provider.engine.connectors.kafka.lag import (
    consumer_lag,
    merge_task_lag,
    partition_lag,
)
from airflow_checkpoint_provider.engine.runners.jobmaster.metrics import JobMetrics
from airflow_checkpoint_provider.engine.runtime.task.checkpointing import source_lag


def test_partition_lag_is_end_minus_position_and_unknown_before_a_fetch():
    assert partition_lag(52, 40) == {"offset": 40, "end_offset": 52, "lag": 12}
    assert partition_lag(None, 40)["lag"] is None
    assert partition_lag(-1001, 40)["lag"] is None  # librdkafka's OFFSET_INVALID
    assert partition_lag(52, 40, stop_at=45)["lag"] == 5  # a bounded reader: up to its end
    assert partition_lag(52, 51, read_to=52)["lag"] == 0  # a commit marker at offset 51
    assert partition_lag(52, 40, read_to=30)["lag"] == 12  # never behind the checkpoint


def test_consumer_lag_sums_partitions_and_ignores_cdc_entries():
    a = merge_task_lag(None, "t:0", partition_lag(10, 4))
    a = merge_task_lag(a, "t:2", partition_lag(7, 7))
    b = merge_task_lag(None, "t:1", partition_lag(9, 0))
    stats = [{"source_lag": {"in": a}}, {"source_lag": {"in": b}},
             {"source_lag": {"cdc": {"lag_bytes": 5, "lag_seconds": 1.0}}}]
    lag = consumer_lag(stats, checkpoint_id=7)
    assert lag is not None and lag.total == 6 + 0 + 9 and lag.checkpoint_id == 7
    assert lag.by_topic_partition() == {"t:0": 6, "t:1": 9, "t:2": 0}
    assert lag.describe() == "15 records (t:0 6, t:1 9, t:2 0)"
    doc = lag.to_dict()
    assert doc["partitions"][1] == {"operator": "in", "partition": "t:1", "offset": 0,
                                    "end_offset": 9, "lag": 9}
    unknown = consumer_lag([{"source_lag": {"in": merge_task_lag(b, "t:3", partition_lag(None, 0))}}])
    assert unknown is not None and unknown.total is None and not unknown.known
    assert consumer_lag([{"source_lag": {"cdc": {"lag_bytes": 5, "lag_seconds": 1.0}}}]) is None
    assert consumer_lag(None) is None


def test_metrics_publish_a_gauge_per_partition_next_to_cdc_lag():
    metrics = JobMetrics(job_name="j", job_id="id")
    entry = merge_task_lag(merge_task_lag(None, "orders:0", partition_lag(10, 4)),
                           "orders:1", partition_lag(None, 0))
    metrics.on_source_lag([{"source_lag": {"in": entry,
                                           "cdc": {"lag_bytes": 5, "lag_seconds": 1.0}}}])
    text = metrics.exposition().decode()
    assert ('ckpt_kafka_consumer_lag_records{job_id="id",job_name="j",operator="in",'
            'partition="0",topic="orders"} 6.0') in text
    assert 'partition="1",topic="orders"} NaN' in text
    assert 'ckpt_replication_lag_bytes{job_id="id",job_name="j",operator="cdc"} 5.0' in text


class _Op:
    def __init__(self, uid, readers):
        self.uid, self.readers = uid, readers


def _wait_lag(reader, want, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        lag = reader.lag()
        if lag["lag_records"] == want or time.monotonic() > deadline:
            return lag
        reader.read_batch(0)  # let the consumer fetch (a batch of 0 records)
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_a_reader_measures_lag_from_the_fetch_response_end_offset(kafka_broker):
    """30 records in 6 batches (5 of one record, one of 25): Tansu's ListOffsets says the
    end is 6, its fetch responses say 30. The lag is 30 - position."""
    from confluent_kafka import Producer

    topic = kafka_broker.create_topic(f"lag-{uuid.uuid4().hex[:8]}", 1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "log_level": 3})
    for i in range(5):
        producer.produce(topic, json.dumps({"id": i}).encode(), partition=0)
        producer.flush(10)
    for i in range(5, 30):
        producer.produce(topic, json.dumps({"id": i}).encode(), partition=0)
    assert producer.flush(10) == 0
    reader = KafkaSource(kafka_broker.bootstrap, topics=[topic]).open_split(f"{topic}:0", None, ctx())
    try:
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(reader.read_batch(10 - len(got)) or [])
        assert len(got) == 10
        lag = reader.lag()
        assert lag["partitions"][f"{topic}:0"] == {"offset": 10, "end_offset": 30, "lag": 20}
        assert lag["lag_records"] == 20
        while len(got) < 30 and time.monotonic() < deadline:
            got.extend(reader.read_batch(100) or [])
        assert _wait_lag(reader, 0)["lag_records"] == 0
        # more records arrive: the next fetch response carries the new end
        kafka_broker.produce(topic, [(0, {"id": 30 + i}) for i in range(4)])
        assert _wait_lag(reader, 4)["partitions"][f"{topic}:0"] == {
            "offset": 30, "end_offset": 34, "lag": 4}
        assert source_lag([_Op("in", {f"{topic}:0": reader})]) == {
            "in": {"lag_records": 4, "partitions": {
                f"{topic}:0": {"offset": 30, "end_offset": 34, "lag": 4}}}}
    finally:
        reader.close()


@pytest.mark.timeout(60)
def test_a_caught_up_reader_of_a_transactional_topic_has_no_lag(kafka_broker):
    """A transaction's commit marker takes an offset no record is read from: once the reader
    read every record, its lag is 0, not 1 per transaction."""
    from confluent_kafka import Producer

    topic = kafka_broker.create_topic(f"lagtx-{uuid.uuid4().hex[:8]}", 1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "log_level": 3,
                         "transactional.id": f"lag-test-{topic}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, json.dumps({"id": i}).encode(), partition=0)
    producer.commit_transaction(15)
    reader = KafkaSource(kafka_broker.bootstrap, topics=[topic]).open_split(f"{topic}:0", None, ctx())
    try:
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            got.extend(reader.read_batch(100) or [])
        assert [r["id"] for r in got] == list(range(5))
        lag = _wait_lag(reader, 0)
        assert lag["lag_records"] == 0, lag
        assert lag["partitions"][f"{topic}:0"]["end_offset"] == 6  # 5 records + the marker
    finally:
        reader.close()


@pytest.mark.timeout(90)
def test_a_jobs_checkpoints_record_the_lag_of_every_partition(workdir, kafka_broker):
    """A bounded Kafka job: its completed checkpoints hold each partition's lag. The sum is
    slow (2 ms a record, ~3 s a subtask) so that channel credit holds the sources back and
    checkpoints complete while they still read, also on a loaded machine (a finished source
    subtask reports no lag)."""
    from airflow_checkpoint_provider.engine.client import MetadataStore

    n = 3000
    in_topic, stop_at = make_input(kafka_broker, n)
    out = kafka_broker.create_topic(f"out-{in_topic}")
    result = running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out,
                             name="kafka-lag", delay_s=0.002).run()
    assert result.status == "FINISHED"
    store = MetadataStore("sqlite:///" + str(workdir / "meta.db"))
    job = store.resolve_job("kafka-lag")
    lags = [consumer_lag(c.task_stats, checkpoint_id=c.checkpoint_id)
            for c in store.list_checkpoints(job.job_id) if c.status in ("COMPLETED", "SUBSUMED")]
    lags = [lag for lag in lags if lag is not None]
    print("checkpoints with a lag:", len(lags))
    assert lags, "no completed checkpoint recorded a Kafka lag"
    splits = {f"{in_topic}:{p}" for p in range(3)}
    assert all(set(lag.by_topic_partition()) <= splits for lag in lags)
    known = [lag for lag in lags if lag.known]
    assert known and all(0 <= lag.total <= n for lag in known)


def _lagging_job(store, job_id: str = "job-k", status: str = "RUNNING") -> None:
    from datetime import UTC, datetime

    store.create_job(job_id=job_id, job_name="orders-k", parallelism=2)
    store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=None)
    store.set_job_status(job_id, status)
    stats = [{"vertex": 0, "subtask": 0, "source_lag": {"in": merge_task_lag(
                 merge_task_lag(None, "orders:0", partition_lag(52, 40)), "orders:2",
                 partition_lag(9, 9))}},
             {"vertex": 0, "subtask": 1, "source_lag": {"in": merge_task_lag(
                 None, "orders:1", partition_lag(30, 27))}}]
    store.add_pending_checkpoint(job_id, 3, kind="CHECKPOINT", trigger_time=datetime.now(UTC),
                                 location="/ckpt/chk-3")
    store.complete_checkpoint(job_id, 3, complete_time=datetime.now(UTC), duration_ms=5,
                              state_size=10, checkpointed_size=10, task_stats=stats)


def test_ckpt_jobs_shows_an_active_jobs_lag_per_topic_partition(tmp_path):
    from click.testing import CliRunner

    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from airflow_checkpoint_provider.engine.cli import main

    db = f"sqlite:///{tmp_path}/meta.db"
    store = MetadataStore(db)
    _lagging_job(store)
    res = CliRunner().invoke(main, ["jobs", "--db", db], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert ("    kafka lag 15 records (orders:0 12, orders:1 3, orders:2 0) at checkpoint 3"
            in res.output.splitlines())
    res = CliRunner().invoke(main, ["jobs", "--db", db, "--json"], catch_exceptions=False)
    [doc] = json.loads(res.output)
    assert doc["kafka_consumer_lag"]["total"] == 15
    assert doc["kafka_consumer_lag"]["partitions"][0] == {
        "operator": "in", "partition": "orders:0", "offset": 40, "end_offset": 52, "lag": 12}
    store.set_job_status("job-k", "CANCELED")  # an ended job: no lag line
    res = CliRunner().invoke(main, ["jobs", "--db", db], catch_exceptions=False)
    assert "kafka lag" not in res.output


def test_the_checkpoint_report_has_a_kafka_lag_table(tmp_path):
    from airflow_checkpoint_provider.engine.catalog import MetadataStore
    from airflow_checkpoint_provider.engine.lifecycle.report import ReportData, render_html

    store = MetadataStore(f"sqlite:///{tmp_path}/meta.db")
    _lagging_job(store)
    html = render_html(ReportData.load(store, "job-k"))
    assert '<h2>Kafka consumer lag</h2>' in html
    assert '<p id="kafka-lag-total">At checkpoint 3: <b>15 records</b>' in html
    assert ('<tr><td class="text">in</td><td class="text">orders:0</td><td>40</td>'
            '<td>52</td><td>12</td></tr>') in html
