"""Event time from a Kafka source: one watermark per partition (split), so a partition whose
timestamps lag far behind another's read by the same subtask loses no record as late (the
batches as Arrow record batches, into the vectorized window aggregate)."""

from __future__ import annotations

import os
import uuid

import pytest
from pipelines import TEST_RESTARTS

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource

PER_PARTITION, WINDOW_MS = 600, 1_000


@pytest.mark.timeout(60)
def test_partitions_far_apart_in_event_time_lose_no_record_as_late(workdir, kafka_broker):
    topic = kafka_broker.create_topic(f"ev-{uuid.uuid4().hex[:8]}", 3)
    # partition p's event times start p * 100 s later than partition 0's: one watermark over
    # the subtask's interleaved reads would call partition 0's records late
    rows = [(p, {"key": f"k{i % 4}", "ts": p * 100_000 + i * 10})
            for i in range(PER_PARTITION) for p in range(3)]
    counts = kafka_broker.produce(topic, rows)
    out = kafka_broker.create_topic(f"out-{topic}")
    # small batches: the subtask's reads interleave the partitions (50 records each)
    p = Pipeline("kafka-windows", max_parallelism=128, batch_size=50,
                 checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(workdir, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(workdir, "meta.db"))
    (p.source(KafkaSource(kafka_broker.bootstrap, topics=[topic], arrow=True,
                          stop_at={(topic, q): n for q, n in counts.items()}),
              uid="kafka-in", parallelism=1,
              watermarks=WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="ts")
              .with_emit_interval(1))
      .key_by("key").window(TumblingWindows(WINDOW_MS))
      .aggregate(uid="win", n="count")
      .sink(KafkaSink(kafka_broker.bootstrap, out), uid="kafka-out"))
    result = p.run()
    assert result.status == "FINISHED"
    windows = kafka_broker.read(out, expect=3 * PER_PARTITION * 10 // WINDOW_MS)
    assert sum(w["n"] for w in windows) == 3 * PER_PARTITION
    assert len(windows) == 3 * 4 * (PER_PARTITION * 10 // WINDOW_MS)  # every (key, window) once
