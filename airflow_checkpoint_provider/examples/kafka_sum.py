"""Example Kafka-to-Kafka job in two versions, for the ``kafka_blue_green`` DAG.

An unbounded keyed running count and sum: ``KafkaSource`` (every partition of the input
topic, offsets in the checkpoints) -> ``key_by("key")`` -> running sum -> ``KafkaSink``
(exactly once, keyed by ``key``). Each input record ``{"id", "key", "value"}`` gives one
output record ``{"key", "count", "sum", "id", "version"}`` (``id``: the input record's), so
a reader of the output topic sees every input record's effect once: per key, the counts
1..n each exactly once, and the final sum.

* ``build_v1`` -- ``"version": "v1"``;
* ``build_v2`` -- the same state (operator uids and state names), so each restores the
  other's savepoints; ``"version": "v2"`` and the running average.

Options from the worker's environment (a DAG run's conf never names a broker or a topic):
``CKPT_KAFKA_BOOTSTRAP`` (``host:port,...``, default ``localhost:9092``),
``CKPT_KAFKA_INPUT`` / ``CKPT_KAFKA_OUTPUT`` (topics, default ``orders`` / ``order-sums``;
they must exist), ``CKPT_KAFKA_PARTITIONER`` (the sink's ``partitioner``: ``key``, the
default, keeps each key in the partition of its hash whatever the parallelism, as a keyed
topic's readers expect; ``fixed`` sends subtask ``i``'s records to partition ``i %
partitions``, for a test broker that mishandles concurrent transactions on one partition:
Tansu 0.6), ``CKPT_EXAMPLE_DIR`` (checkpoints and savepoints, as every example).
Bounded options a conf may set (:data:`airflow_checkpoint_provider.params.EXAMPLE_ENV`):
``CKPT_EXAMPLE_INTERVAL_MS`` (checkpoint interval, default 500),
``CKPT_EXAMPLE_PARALLELISM`` (default 2), ``CKPT_EXAMPLE_SLOW_MS`` (a pause per record,
default 0: a slow version builds up consumer lag).
"""

from __future__ import annotations

import os
import time

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource
from airflow_checkpoint_provider.examples import example_root

BOOTSTRAP_ENV = "CKPT_KAFKA_BOOTSTRAP"
INPUT_ENV = "CKPT_KAFKA_INPUT"
OUTPUT_ENV = "CKPT_KAFKA_OUTPUT"
PARTITIONER_ENV = "CKPT_KAFKA_PARTITIONER"


class KafkaRunningSum(KeyedProcessFunction):
    """Count and sum per key; one output record per input record."""

    def __init__(self, version: str) -> None:
        self.version = version

    def open(self, ctx):
        self.sum = ctx.value_state("sum", 0)
        self.count = ctx.value_state("count", 0)
        self.pause_s = float(os.environ.get("CKPT_EXAMPLE_SLOW_MS", "0")) / 1000.0

    def process_element(self, record, ctx):
        if self.pause_s:
            time.sleep(self.pause_s)
        s = self.sum.value() + record["value"]
        c = self.count.value() + 1
        self.sum.update(s)
        self.count.update(c)
        out = {"key": ctx.current_key, "count": c, "sum": s, "id": record["id"],
               "version": self.version}
        if self.version != "v1":
            out["avg"] = s / c
        return out


def _build(version: str) -> Pipeline:
    root = example_root()
    bootstrap = os.environ.get(BOOTSTRAP_ENV, "localhost:9092")
    parallelism = int(os.environ.get("CKPT_EXAMPLE_PARALLELISM", "2"))
    p = Pipeline(
        "kafka-sum", version=version,
        checkpoint=CheckpointConfig(
            interval_ms=int(os.environ.get("CKPT_EXAMPLE_INTERVAL_MS", "500")),
            directory=os.path.join(root, "checkpoints"),
            savepoint_directory=os.path.join(root, "savepoints")),
        restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=500))
    (p.source(KafkaSource(bootstrap, topics=[os.environ.get(INPUT_ENV, "orders")]),
              uid="orders", parallelism=parallelism)
      .key_by("key")
      .process(KafkaRunningSum(version), uid="running-sum", parallelism=parallelism)
      .sink(KafkaSink(bootstrap, os.environ.get(OUTPUT_ENV, "order-sums"), key="key",
                      partitioner=os.environ.get(PARTITIONER_ENV, "key")),
            uid="sums-out", parallelism=parallelism))
    return p


def build_v1() -> Pipeline:
    return _build("v1")


def build_v2() -> Pipeline:
    return _build("v2")
