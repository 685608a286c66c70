"""Throughput of the keyed running-sum pipeline with and without checkpointing.

    .venv/bin/python bench/running_sum.py [--records N] [--keys K] [--reps R] [--runner local]

Runs are interleaved (off, on, off, on, ...) because this machine's speed drifts; the ratio
is computed pair by pair and the median reported. Writes bench/results/running_sum.json and
the "Running sum" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
)
from airflow_checkpoint_provider.engine.checkpoint.store import MetadataStore  # noqa: E402
from airflow_checkpoint_provider.examples.running_sum import RunningSum  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build(root: str, records: int, keys: int, interval_ms: int | None) -> Pipeline:
    p = Pipeline("bench-running-sum",
                 checkpoint=CheckpointConfig(interval_ms=interval_ms, directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(records, num_keys=keys, seed=1), uid="gen", parallelism=2)
      .key_by("key").process(RunningSum(), uid="sum", parallelism=2)
      .sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


def one_run(records: int, keys: int, interval_ms: int | None, runner: str, runner_opts: dict) -> dict:
    root = tempfile.mkdtemp(prefix="bench-")
    try:
        p = build(root, records, keys, interval_ms)
        t0 = time.monotonic()
        result = p.run(runner, **runner_opts)
        elapsed = time.monotonic() - t0
        store = MetadataStore(p.metadata_url)
        rows = [c for c in store.list_checkpoints(result.job_id) if c.status in ("COMPLETED", "SUBSUMED")]
        store.close()
        return {"seconds": elapsed, "records_per_s": records / elapsed,
                "checkpoints": result.checkpoints_completed,
                "startup_s": (result.extra.get("startup_seconds") or [None])[0],
                "durations_ms": [c.duration_ms for c in rows],
                "state_bytes": [c.state_size for c in rows]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runner", default="local")
    ap.add_argument("--master", default=None)
    args = ap.parse_args()
    opts = {"master": args.master} if args.master else {}
    if args.runner == "spark":
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    runs = []
    for rep in range(args.reps):
        off = one_run(args.records, args.keys, None, args.runner, opts)
        on = one_run(args.records, args.keys, 1000, args.runner, opts)
        runs.append({"off": off, "on": on, "ratio": on["records_per_s"] / off["records_per_s"]})
        print(f"rep {rep}: off {off['records_per_s']:.0f} rec/s, on {on['records_per_s']:.0f} rec/s "
              f"({on['checkpoints']} checkpoints, {on['durations_ms']} ms)", flush=True)
    durations = sorted(d for r in runs for d in r["on"]["durations_ms"])
    summary = {
        "records": args.records, "keys": args.keys, "reps": args.reps, "runner": args.runner,
        "master": args.master,
        "off_records_per_s": statistics.median(r["off"]["records_per_s"] for r in runs),
        "on_records_per_s": statistics.median(r["on"]["records_per_s"] for r in runs),
        "ratio_median": statistics.median(r["ratio"] for r in runs),
        "checkpoint_ms_p50": statistics.median(durations) if durations else None,
        "checkpoint_ms_max": max(durations) if durations else None,
        "startup_s_median": statistics.median(
            r[k]["startup_s"] for r in runs for k in ("off", "on") if r[k]["startup_s"] is not None),
        "python": platform.python_version(), "cores": os.cpu_count(),
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"running_sum_{args.runner}.json"), "w") as f:
        json.dump({"summary": summary, "runs": runs}, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
