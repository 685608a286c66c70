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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ours_pipeline, parse, run_ours  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)
    from airflow_checkpoint_provider.engine import DiscardSink, GeneratorSource
    from airflow_checkpoint_provider.examples.running_sum import RunningSum

    p = ours_pipeline(args, f"bench-peers-{args.workload.replace('_', '-')}")
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
    # the discarding sink counts nothing: the engine's own tests check this job's output
    run_ours(args, p)


if __name__ == "__main__":
    main()
