"""A KafkaSource with a topic pattern picks up a topic created while the job runs."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from pipelines import TEST_RESTARTS, Background

from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource


@pytest.mark.timeout(90)
def test_a_topic_matching_the_pattern_created_while_running_is_read(workdir, kafka_broker):
    prefix = f"disc-{uuid.uuid4().hex[:6]}"
    first = kafka_broker.create_topic(f"{prefix}-a", 2)
    kafka_broker.produce(first, [(i % 2, {"id": i}) for i in range(10)])
    out = kafka_broker.create_topic(f"out-{prefix}")
    p = Pipeline("kafka-discovery", max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(workdir, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(workdir, "meta.db"))
    (p.source(KafkaSource(kafka_broker.bootstrap, topic_pattern=rf"{prefix}-.*",
                          discover_interval_s=0.2), uid="kafka-in", parallelism=2)
      .sink(KafkaSink(kafka_broker.bootstrap, out), uid="kafka-out", parallelism=2))
    bg = Background(p)
    job = bg.wait_running(min_checkpoints=1, timeout=60)
    assert len(kafka_broker.read(out, expect=10, timeout=20)) == 10
    second = kafka_broker.create_topic(f"{prefix}-b", 3)
    kafka_broker.produce(second, [(i % 3, {"id": i}) for i in range(100, 106)])
    deadline = time.monotonic() + 30
    while len(kafka_broker.read(out, expect=16, settle_s=0.2, timeout=2)) < 16:
        assert time.monotonic() < deadline, "the new topic's records were not published"
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    ids = sorted(r["id"] for r in kafka_broker.read(out, expect=16))
    assert ids == [*range(10), *range(100, 106)]
