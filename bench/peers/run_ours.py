"""Our engine on the peers' two workloads (run by bench/peers/run.py with the project's venv).

* ``per_record``: generator -> ``key_by("key")`` -> ``KeyedProcessFunction`` keeping a
  running count + sum in value state, one output per record
  (``examples.running_sum.RunningSum``) -> discarding sink: bench/per_record.py's job.
* ``aggregate``: generator (Arrow batches) -> ``key_by("key")`` -> built-in
  ``aggregate(count, sum)`` -> discarding sink.

Parallelism 1, heap state, checkpoints every ``--interval-ms``, every other setting as a user
gets it by default; local runner.
"""

from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Timer, parse, report  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)
    from airflow_checkpoint_provider.engine import (
        CheckpointConfig,
        DiscardSink,
        GeneratorSource,
        Pipeline,
        RestartStrategy,
    )
    from airflow_checkpoint_provider.examples.running_sum import RunningSum

    root = args.state_dir
    p = Pipeline(f"bench-peers-{args.workload.replace('_', '-')}", state_backend="heap",
                 checkpoint=CheckpointConfig(interval_ms=args.interval_ms,
                                             directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    if args.workload == "per_record":
        (p.source(GeneratorSource(args.records, num_keys=args.keys, seed=1), uid="gen",
                  parallelism=1)
          .key_by("key").process(RunningSum(), uid="sum", parallelism=1)
          .sink(DiscardSink(), uid="out"))
    else:
        (p.source(GeneratorSource(args.records, num_keys=args.keys, seed=1, arrow=True),
                  uid="gen", parallelism=1)
          .key_by("key").aggregate(count="count", sum=("sum", "value"), uid="agg",
                                   parallelism=1)
          .sink(DiscardSink(), uid="out"))
    try:
        with Timer() as t:
            result = p.run("local")
    finally:
        shutil.rmtree(os.path.join(root, "ckpt"), ignore_errors=True)
    if result.status != "FINISHED":
        print(f"job ended {result.status}: {result.failure_reason}", file=sys.stderr)
    # the discarding sink counts nothing: the engine's own tests check this job's output
    report(args, t.wall_s, outputs=-1, ok=result.status == "FINISHED",
           startup_s=(result.extra.get("startup_seconds") or [None])[0])


if __name__ == "__main__":
    main()
