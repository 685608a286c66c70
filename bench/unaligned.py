"""Aligned vs unaligned checkpoints under backpressure.

    .venv/bin/python bench/unaligned.py [--seconds S] [--rate R]

The job: generator (dict records, ``--rate`` rows/s over 2 subtasks) -> key_by -> per-record
running sum (2 subtasks) -> key_by -> a sink throttled to 10% of the source rate (2
subtasks). The sink cannot keep up, so every mailbox and socket buffer between the sources
and the sink fills: the backlog a barrier waits behind. Each configuration runs for
``--seconds`` with a checkpoint every second (60 s timeout); the first third of the run
fills the buffers and is not measured. Per configuration: completed checkpoints' duration
(trigger to completion) p50/p99, checkpoints that expired, and the in-flight bytes the
unaligned ones persisted. Two batch sizes (the backlog in rows grows with them): aligned
checkpoints take as long as the backlog takes to drain through the sink, unaligned ones do
not depend on it.

Writes unaligned.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

from jobs import add_results_dir, median, p99, write_results

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    DiscardSink,
    DiscardWriter,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.client import MetadataStore
from airflow_checkpoint_provider.examples.running_sum import RunningSum


class ThrottledWriter(DiscardWriter):
    """Writes at most ``rows_per_second`` rows a second (sleeps for the rest)."""

    def __init__(self, rows_per_second: float) -> None:
        self.rows_per_second = rows_per_second

    def write(self, records) -> None:
        time.sleep(len(records) / self.rows_per_second)


class ThrottledSink(DiscardSink):
    def __init__(self, rows_per_second: float) -> None:
        self.rows_per_second = rows_per_second

    def create_writer(self, ctx):
        return ThrottledWriter(self.rows_per_second / ctx.parallelism)

    def describe(self) -> str:
        return f"throttled({self.rows_per_second:.0f} rows/s)"


def build(root: str, *, rate: float, batch_size: int, unaligned: bool) -> Pipeline:
    p = Pipeline("backpressure", batch_size=batch_size,
                 checkpoint=CheckpointConfig(interval_ms=1000, timeout_ms=60_000,
                                             directory=os.path.join(root, "ckpt"),
                                             unaligned=unaligned, tolerable_failures=None),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(10**9, num_keys=1000, seed=1, splits=2,
                              records_per_second=rate), uid="gen", parallelism=2)
      .key_by("key").process(RunningSum(), uid="sum", parallelism=2)
      .key_by("key").sink(ThrottledSink(rate * 0.1), uid="out", parallelism=2))
    return p


def run(*, rate: float, batch_size: int, unaligned: bool, seconds: float) -> dict:
    root = tempfile.mkdtemp(prefix="bench-unaligned-")
    try:
        p = build(root, rate=rate, batch_size=batch_size, unaligned=unaligned)
        outcome: dict = {}
        thread = threading.Thread(target=lambda: outcome.update(result=p.run()), daemon=True)
        thread.start()
        store = MetadataStore(p.metadata_url)
        deadline = time.monotonic() + 60
        while not store.list_jobs() and time.monotonic() < deadline:
            time.sleep(0.2)
        job = store.list_jobs()[0]
        started = time.monotonic()
        time.sleep(seconds)
        measured_from = started + seconds / 3
        rows = [c for c in store.list_checkpoints(job.job_id) if c.kind == "CHECKPOINT"]
        store.submit_control_request(job.job_id, "CANCEL", {})
        thread.join(120)
        # the rows' trigger times are wall clock: measure the last two thirds
        cutoff = rows[0].trigger_time if rows else None
        if rows:
            skip = (measured_from - started)
            cutoff = min(r.trigger_time for r in rows).timestamp() + skip
        done = [r for r in rows if r.status in ("COMPLETED", "SUBSUMED")
                and r.trigger_time.timestamp() >= cutoff]
        failed = [r for r in rows if r.status == "FAILED" and r.trigger_time.timestamp() >= cutoff]
        durations = [r.duration_ms for r in done]
        inflight = [sum(t.get("inflight_bytes", 0) for t in (r.task_stats or [])) for r in done]
        return {"mode": "unaligned" if unaligned else "aligned", "batch_size": batch_size,
                "rate": rate, "sink_rate": rate * 0.1, "completed": len(done),
                "failed": len(failed), "duration_ms": durations,
                "p50_ms": median(durations), "p99_ms": p99(durations),
                "inflight_bytes": inflight,
                "inflight_p50": median(inflight), "inflight_max": max(inflight, default=0),
                "alignment_p99_ms": p99([t.get("alignment_ms", 0) for r in done
                                         for t in (r.task_stats or [])])}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--rate", type=float, default=20_000.0)
    parser.add_argument("--batch-sizes", default="256,1024")
    add_results_dir(parser)
    args = parser.parse_args(argv)
    runs = []
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        for unaligned in (False, True):
            r = run(rate=args.rate, batch_size=batch_size, unaligned=unaligned,
                    seconds=args.seconds)
            print(f"batch {batch_size:5d} {r['mode']:9s}: {r['completed']} checkpoints, "
                  f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, {r['failed']} expired, "
                  f"in-flight p50 {r['inflight_p50']} B", flush=True)
            runs.append(r)
    path = write_results(args.results_dir, "unaligned.json",
                         {"seconds": args.seconds, "rate": args.rate, "runs": runs,
                          "command": "bench/unaligned.py " + " ".join(argv or sys.argv[1:])})
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
