"""KafkaSink across jobs of different names (blue-green: green restores blue's savepoint):
an epoch blue published is found published by green, one it did not publish is published
by green once; snapshots staged before the job name was recorded keep working."""

from __future__ import annotations

import uuid

import pytest

from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink


def ctx(job_id: str, job_name: str, attempt: int = 0) -> SourceContext:
    return SourceContext(job_id, job_name, "out", 0, 1, attempt)


@pytest.fixture
def sink(kafka_broker):
    topic = kafka_broker.create_topic(f"handover-{uuid.uuid4().hex[:8]}")
    return KafkaSink(kafka_broker.bootstrap, topic, key="k", marker_topic=f"markers-{topic}")


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"k": f"k{i % 3}", "i": i} for i in range(start, start + n)]


@pytest.mark.timeout(60)
def test_green_restoring_blues_savepoint_skips_the_epochs_blue_published(sink, kafka_broker):
    blue = sink.create_writer(ctx("blue-id", "sum-blue"))
    blue.recover([])
    blue.write(rows(4))
    published = blue.pre_commit(1)
    blue.commit(published)  # checkpoint 1 completed: blue published epoch 1
    blue.write(rows(3, start=4))
    staged = blue.pre_commit(2)  # the final savepoint: completed, blue stopped before publishing
    blue.close()
    assert published[0]["job_name"] == "sum-blue"

    green = sink.create_writer(ctx("green-id", "sum-green"))
    green.recover(published + staged)  # green restores the savepoint holding both epochs
    green.write(rows(2, start=7))
    green.commit(green.pre_commit(3))
    green.close()
    got = sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=9))
    assert got == list(range(9))  # epoch 1 once (blue's), epoch 2 once (green's), then green's


@pytest.mark.timeout(60)
def test_an_epoch_staged_without_a_job_name_uses_the_restoring_jobs(sink, kafka_broker):
    first = sink.create_writer(ctx("job-1", "orders"))
    first.recover([])
    first.write(rows(3))
    txns = first.pre_commit(1)
    first.commit(txns)
    first.close()
    older = [{k: v for k, v in t.items() if k != "job_name"} for t in txns]  # an older snapshot
    again = sink.create_writer(ctx("job-1", "orders", attempt=1))
    again.recover(older)
    again.close()
    assert sorted(r["i"] for r in kafka_broker.read(sink.topic, expect=3)) == [0, 1, 2]
