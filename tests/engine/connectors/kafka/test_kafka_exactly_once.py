"""Kafka -> keyed running sum -> Kafka, exactly once: the output read back with
read_committed equals the failure-free reference, through a slot SIGKILL and a rescale."""

from __future__ import annotations

import pytest
from kafka_jobs import expected_sums, make_input, running_sum_job
from pipelines import check_exactly_once_rows


@pytest.mark.timeout(60)
def test_three_partition_topic_aggregated_to_a_topic_exactly_once(workdir, kafka_broker):
    n = 3_000
    in_topic, stop_at = make_input(kafka_broker, n)
    out = kafka_broker.create_topic(f"out-{in_topic}")
    result = running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out).run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert result.checkpoints_completed >= 1
    check_exactly_once_rows(kafka_broker.read(out, expect=n), expected_sums(n))
