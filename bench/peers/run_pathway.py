"""Pathway on the aggregation workload (run by bench/peers/run.py with Pathway's own venv).

Input: a ``pw.io.python`` connector subject emitting the records generated in process
(commits every ``--interval-ms``); ``groupby(key).reduce(count, sum)``; output through
``pw.io.subscribe`` keeping each key's latest row (the check). Persistence on as Pathway
recommends it: a filesystem backend (``pw.persistence.Backend.filesystem``), the source
named so that it is persisted.

The per-record workload (one output per record) has no Pathway form: its incremental
``reduce`` emits each key's new value once per commit, not once per record; the driver
records it as not expressible.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Records, Timer, expected_sum, parse, report  # noqa: E402


def main(argv=None) -> None:
    args = parse(argv)
    if args.workload != "aggregate":
        raise SystemExit("Pathway runs the aggregate workload only (see the module docstring)")
    import pathway as pw

    class Schema(pw.Schema):
        key: str
        value: int

    class Generate(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            for key, value in Records(args.records, args.keys):
                self.next(key=key, value=value)

    t = pw.io.python.read(Generate(), schema=Schema, autocommit_duration_ms=args.interval_ms,
                          name="gen")
    agg = t.groupby(t.key).reduce(t.key, count=pw.reducers.count(),
                                  sum=pw.reducers.sum(t.value))
    latest: dict[str, tuple[int, int]] = {}
    seen = {"outputs": 0}

    def on_change(key, row, time, is_addition) -> None:
        seen["outputs"] += 1
        if is_addition:
            latest[row["key"]] = (row["count"], row["sum"])

    pw.io.subscribe(agg, on_change=on_change)
    config = pw.persistence.Config(
        pw.persistence.Backend.filesystem(os.path.join(args.state_dir, "persistence")))
    with Timer() as timer:
        pw.run(persistence_config=config, monitoring_level=pw.MonitoringLevel.NONE)
    ok = (sum(c for c, _ in latest.values()) == args.records
          and sum(s for _, s in latest.values()) == expected_sum(args.records, args.keys))
    report(args, timer.wall_s, seen["outputs"], ok)


if __name__ == "__main__":
    main()
