"""Kafka -> keyed running sum -> Kafka, exactly once: the output read back with
read_committed equals the failure-free reference, through a slot SIGKILL and a rescale."""

from __future__ import annotations

import pytest
from kafka_jobs import expected_sums, make_input, running_sum_job
from pipelines import Background, FaultPlan, check_exactly_once_rows


@pytest.mark.timeout(60)
def test_three_partition_topic_aggregated_to_a_topic_exactly_once(workdir, kafka_broker):
    n = 3_000
    in_topic, stop_at = make_input(kafka_broker, n)
    out = kafka_broker.create_topic(f"out-{in_topic}")
    result = running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out).run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert result.checkpoints_completed >= 1
    check_exactly_once_rows(kafka_broker.read(out, expect=n), expected_sums(n))


@pytest.mark.timeout(90)
def test_slot_sigkill_and_a_failure_before_the_commit_still_publish_exactly_once(
        workdir, kafka_broker):
    """A task fails after checkpoint 2 completed, before its sink published epoch 2 (the
    restore publishes it), then a slot process is SIGKILLed after more checkpoints completed
    and were published (the restore finds their markers and skips them): Kafka offsets
    rewind each time and the output equals the failure-free reference."""
    n = 6_000
    in_topic, stop_at = make_input(kafka_broker, n)
    out = kafka_broker.create_topic(f"out-{in_topic}")
    faults = FaultPlan(str(workdir / "faults"), [("notify", 2), ("kill", 3_500)])
    # ~1.5 s per subtask: several checkpoints complete (and publish) before the kill
    result = running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out,
                             faults=faults, delay_s=0.0005).run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 2 and result.restarts >= 2
    assert faults.fired()["kill-3500"]["last_notified"] >= 1  # killed after a completed checkpoint
    check_exactly_once_rows(kafka_broker.read(out, expect=n), expected_sums(n))


@pytest.mark.timeout(120)
def test_savepoint_restored_at_parallelism_3_continues_exactly_once(workdir, kafka_broker):
    """Stop with a savepoint at parallelism 2 mid-stream, restore it at parallelism 3: the
    3 partitions are reassigned (one per source subtask), the restored sink epochs are
    published once, and the two jobs' output together equals the reference."""
    n = 9_000
    in_topic, stop_at = make_input(kafka_broker, n)
    out = kafka_broker.create_topic(f"out-{in_topic}")
    bg = Background(running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out,
                                    delay_s=0.0005))
    job = bg.wait_running(min_checkpoints=2, timeout=60)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    partial = kafka_broker.read(out, expect=1, settle_s=0.5)
    assert 0 < len(partial) < n
    result = running_sum_job(str(workdir), kafka_broker, in_topic, stop_at, out,
                             parallelism=3).run(restore=req.result["location"])
    assert result.status == "FINISHED"
    check_exactly_once_rows(kafka_broker.read(out, expect=n), expected_sums(n))
