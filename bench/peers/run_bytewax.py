"""Bytewax on the peers' two workloads (run by bench/peers/run.py with Bytewax's own venv).

Input: ``TestingSource`` over the records generated in process, batches of 1,000;
``key_on`` the key; ``per_record``: ``stateful_map`` keeping ``(count, sum)`` and emitting
``{"count", "sum"}`` per record; ``aggregate``: ``fold_final`` of ``(count, sum)`` per key.
Output: a discarding sink that counts. Recovery on as Bytewax recommends it: a SQLite
recovery directory (``init_db_dir``, one partition) and epochs of ``--interval-ms``.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Records, Timer, expected_sum, parse, report  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import TestingSource, run_main

    seen = {"outputs": 0, "count": 0, "sum": 0}

    class Discard(StatelessSinkPartition):
        def write_batch(self, items) -> None:
            seen["outputs"] += len(items)
            if args.workload == "aggregate":
                for _key, (c, s) in items:
                    seen["count"] += c
                    seen["sum"] += s

    class DiscardSink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return Discard()

    def running(state, value):
        c, s = state or (0, 0)
        state = (c + 1, s + value)
        return state, {"count": state[0], "sum": state[1]}

    flow = Dataflow("bench_peers")
    inp = op.input("in", flow, TestingSource(Records(args.records, args.keys), batch_size=1000))
    keyed = op.key_on("key", inp, lambda r: r[0])
    values = op.map_value("value", keyed, lambda r: r[1])
    if args.workload == "per_record":
        out = op.stateful_map("sum", values, running)
    else:
        out = op.fold_final("agg", values, lambda: (0, 0), lambda st, v: (st[0] + 1, st[1] + v))
    op.output("out", out, DiscardSink())

    db = Path(args.state_dir) / "recovery"
    db.mkdir(parents=True, exist_ok=True)
    init_db_dir(db, 1)
    with Timer() as t:
        run_main(flow, epoch_interval=timedelta(milliseconds=args.interval_ms),
                 recovery_config=RecoveryConfig(db))
    if args.workload == "per_record":
        ok = seen["outputs"] == args.records
    else:
        ok = (seen["count"] == args.records
              and seen["sum"] == expected_sum(args.records, args.keys))
    report(args, t.wall_s, seen["outputs"], ok)


if __name__ == "__main__":
    main()
