"""A broker that goes away fails the job with an error naming the partitions and offsets
(never a silent stall): a broker of its own, killed while the job reads."""

from __future__ import annotations

import os
import re
import time

import pytest
from kafka_server import TansuBroker
from pipelines import Background

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    DiscardSink,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSource
from airflow_checkpoint_provider.engine.errors import JobFailedError


@pytest.mark.timeout(60)
def test_an_unreachable_broker_fails_the_job_naming_partitions_and_offsets(workdir):
    broker = TansuBroker()
    try:
        broker.start()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"the Kafka test broker (Tansu) could not start: {exc}", pytrace=False)
    try:
        topic = broker.create_topic("lost", 2)
        broker.produce(topic, [(i % 2, {"id": i}) for i in range(20)])
        p = Pipeline("kafka-broker-loss", max_parallelism=128,
                     checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(workdir, "ckpt")),
                     restart_strategy=RestartStrategy.none(),
                     metadata_url="sqlite:///" + os.path.join(workdir, "meta.db"))
        p.source(KafkaSource(broker.bootstrap, topics=[topic], broker_timeout_s=2),
                 uid="kafka-in").sink(DiscardSink(), uid="out")
        bg = Background(p)
        bg.wait_running(min_checkpoints=1, timeout=30)
        broker.stop()
        started = time.monotonic()
        with pytest.raises(JobFailedError) as failed:
            bg.result(timeout=40)
        message = str(failed.value)
        assert "KafkaUnavailableError" in message or "no Kafka broker" in message, message
        assert re.search(rf"{topic}:0 at offset \d+, {topic}:1 at offset \d+", message), message
        assert time.monotonic() - started < 30
    finally:
        broker.stop()
