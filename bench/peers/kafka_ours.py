"""Our engine on the Kafka benchmark's two workloads (run by bench/peers/kafka.py with the
project's venv, against the broker the driver started).

Input: the topic ``--topic`` (one partition, ``--records`` records) the driver filled, a JSON
value ``{"key": "k<n>", "value": v}`` keyed by ``"k<n>"`` per record; output: the topic
``--output-topic`` (one partition), one JSON record ``{"key", "count", "sum"}`` per output
row, keyed by ``key``.

* ``per_record``: ``KafkaSource`` (dicts) -> ``key_by("key")`` -> ``KeyedProcessFunction``
  keeping a running count + sum in value state, one output per record
  (``examples.running_sum.RunningSum``) -> ``KafkaSink``.
* ``aggregate``: ``KafkaSource(arrow=True)`` (Arrow batches) -> ``key_by("key")`` ->
  built-in ``aggregate(count, sum)`` (one row per key a batch touched) -> ``KafkaSink``.

``KafkaSource`` bounded by ``stop_at`` at the input's end (the job finishes), reading
``read_committed`` (its default); ``KafkaSink`` exactly-once (its default). Parallelism 1,
heap state, checkpoints every ``--interval-ms``, every other setting as a user gets it by
default; local runner.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Timer, parse, report  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)
    from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy
    from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSink, KafkaSource
    from airflow_checkpoint_provider.examples.running_sum import RunningSum

    root = args.state_dir
    # a job name of its own per run: its transactional ids, marker group and consumer group
    name = f"bench-kafka-{args.workload.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    p = Pipeline(name, state_backend="heap",
                 checkpoint=CheckpointConfig(interval_ms=args.interval_ms,
                                             directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    source = KafkaSource(args.bootstrap, topics=[args.topic],
                         stop_at={(args.topic, 0): args.records},
                         arrow=args.workload == "aggregate")
    keyed = p.source(source, uid="in", parallelism=1).key_by("key")
    if args.workload == "per_record":
        out = keyed.process(RunningSum(), uid="sum", parallelism=1)
    else:
        out = keyed.aggregate(count="count", sum=("sum", "value"), uid="agg", parallelism=1)
    out.sink(KafkaSink(args.bootstrap, args.output_topic, key="key"), uid="out")
    try:
        with Timer() as t:
            result = p.run("local")
    finally:
        shutil.rmtree(os.path.join(root, "ckpt"), ignore_errors=True)
    if result.status != "FINISHED":
        print(f"job ended {result.status}: {result.failure_reason}", file=sys.stderr)
    # the output is checked by the driver, which reads the output topic back
    report(args, t.wall_s, outputs=-1, ok=result.status == "FINISHED",
           startup_s=(result.extra.get("startup_seconds") or [None])[0])


if __name__ == "__main__":
    main()
