"""Our engine on the Kafka benchmark's two workloads (run by bench/peers/kafka.py with the
project's venv, against the broker the driver started).

Input: the topic ``--topic`` (one partition, ``--records`` records) the driver filled, a JSON
value ``{"key": "k<n>", "value": v}`` keyed by ``"k<n>"`` per record; output: the topic
``--output-topic`` (one partition), one JSON record ``{"key", "count", "sum"}`` per output
row, keyed by ``key``.

* ``per_record``: ``KafkaSource`` (dicts) -> ``key_by("key")`` -> ``KeyedProcessFunction``
  keeping a running count + sum in value state, one output per record
  (``examples.running_sum.RunningSum``) -> ``KafkaSink``.
* ``aggregate``: ``KafkaSource(arrow=True)`` (Arrow batches; ``--source-batches dicts``:
  ``arrow=False``, dicts the task converts; ``pylist`` / ``arrow-1k``: the variants of
  kafka_variants.py) -> ``key_by("key")`` -> built-in ``aggregate(count, sum)`` (one row
  per key a batch touched) -> ``KafkaSink``.

``KafkaSource`` bounded by ``stop_at`` at the input's end (the job finishes), reading
``read_committed`` (its default); ``KafkaSink`` exactly-once (its default). Parallelism 1,
heap state, checkpoints every ``--interval-ms``, every other setting as a user gets it by
default; local runner.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ours_pipeline, parse, run_ours  # noqa: E402
from kafka_variants import SOURCES  # noqa: E402


def main(argv=None) -> None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--source-batches", choices=tuple(SOURCES), default="arrow")
    own, rest = pre.parse_known_args(argv)
    args = parse(rest)
    from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource
    from airflow_checkpoint_provider.examples.running_sum import RunningSum

    # a job name of its own per run: its transactional ids, marker group and consumer group
    name = f"bench-kafka-{args.workload.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    p = ours_pipeline(args, name)
    arrow = args.workload == "aggregate" and own.source_batches != "dicts"
    source = (SOURCES[own.source_batches] if arrow else KafkaSource)(
        args.bootstrap, topics=[args.topic], stop_at={(args.topic, 0): args.records},
        arrow=arrow)
    keyed = p.source(source, uid="in", parallelism=1).key_by("key")
    if args.workload == "per_record":
        out = keyed.process(RunningSum(), uid="sum", parallelism=1)
    else:
        out = keyed.aggregate(count="count", sum=("sum", "value"), uid="agg", parallelism=1)
    out.sink(KafkaSink(args.bootstrap, args.output_topic, key="key"), uid="out")
    # the output is checked by the driver, which reads the output topic back
    run_ours(args, p)


if __name__ == "__main__":
    main()
