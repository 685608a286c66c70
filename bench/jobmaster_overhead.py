"""What checkpoints every second cost the job master: CPU of the job master's process on a
small job, with checkpoints every 1 s against none, interleaved.

    .venv/bin/python bench/jobmaster_overhead.py [--reps 3] [--short 10] [--long 60]

The job: a rate-limited generator (500 records/s, 2 splits, parallelism 2) keyed into a
running ``reduce`` and an exactly-once file sink, local runner, SQLite metadata DB. Every run
is its own process, and its CPU time (user + system, all threads: the job master's loop,
the metadata writer thread, the checkpoint coordinator) is that process's own; the slot
processes are children and not counted. Each configuration runs for a short and a long
duration: the difference of CPU over the difference of wall time is the steady cost, so
imports, schema migration and launch cancel. The checkpoints' share is the steady cost with
checkpoints minus the steady cost without. Writes jobmaster_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

RATE = 500  # records per second, both splits together


def _child(seconds: float, checkpoints: bool) -> None:
    """One run (in its own process): print the job master's wall and CPU time as JSON."""
    from airflow_checkpoint_provider.engine import (
        CheckpointConfig,
        FileSink,
        GeneratorSource,
        Pipeline,
    )

    root = tempfile.mkdtemp(prefix="jm-overhead-")
    p = Pipeline("jm_overhead", metadata_url=f"sqlite:///{root}/meta.db",
                 checkpoint=CheckpointConfig(interval_ms=1000 if checkpoints else None,
                                             directory=f"{root}/chk"))
    (p.source(GeneratorSource(int(seconds * RATE), num_keys=100, records_per_second=RATE,
                              splits=2), uid="src", parallelism=2)
      .key_by("key")
      .reduce(lambda a, b: {**a, "value": a["value"] + b["value"]}, uid="sum")
      .sink(FileSink(f"{root}/out"), uid="sink"))
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    result = p.run()
    t1, r1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"wall_s": t1 - t0, "cpu_s": cpu, "status": result.status,
                      "checkpoints": result.checkpoints_completed}))


def run_once(seconds: float, checkpoints: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(seconds),
                          "--checkpoints" if checkpoints else "--no-checkpoints"],
                         capture_output=True, text=True, check=True, timeout=seconds * 10 + 120)
    run = json.loads(out.stdout.strip().splitlines()[-1])
    if run["status"] != "FINISHED":
        raise SystemExit(f"run of {seconds} s (checkpoints={checkpoints}) ended {run['status']}")
    return {**run, "seconds": seconds, "checkpoints_on": checkpoints,
            "load_1m": round(os.getloadavg()[0], 1)}


def steady_share(short: dict, long: dict) -> float:
    """CPU seconds per wall second between the short and the long run (start-up cancels)."""
    return (long["cpu_s"] - short["cpu_s"]) / (long["wall_s"] - short["wall_s"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--short", type=float, default=10.0)
    ap.add_argument("--long", type=float, default=60.0)
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--checkpoints", dest="ckpt", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-checkpoints", dest="ckpt", action="store_false", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        _child(args.child, args.ckpt)
        return 0
    reps = []
    for rep in range(args.reps):
        order = [True, False] if rep % 2 == 0 else [False, True]
        runs = {}
        for on in order:
            runs[on] = (run_once(args.short, on), run_once(args.long, on))
        on_share, off_share = steady_share(*runs[True]), steady_share(*runs[False])
        reps.append({"on": [*runs[True]], "off": [*runs[False]],
                     "on_share": on_share, "off_share": off_share,
                     "checkpoint_share": on_share - off_share})
        print(f"rep {rep}: job master {100 * on_share:.2f}% of a core with 1 s checkpoints, "
              f"{100 * off_share:.2f}% without; checkpoints {100 * (on_share - off_share):.2f}%",
              flush=True)
    summary = {
        "rate": RATE, "short_s": args.short, "long_s": args.long, "reps": args.reps,
        "on_share_median": statistics.median(r["on_share"] for r in reps),
        "off_share_median": statistics.median(r["off_share"] for r in reps),
        "checkpoint_share_median": statistics.median(r["checkpoint_share"] for r in reps),
        "checkpoints_per_long_run": statistics.median(r["on"][1]["checkpoints"] for r in reps),
    }
    sys.path.insert(0, HERE)
    from jobs import write_results

    write_results(args.results_dir, "jobmaster_overhead.json", {"summary": summary, "reps": reps})
    print(json.dumps(summary, indent=1))
    return 0


def render(data: dict) -> list[str]:
    """The BENCHMARKS.md section (bench/write_benchmarks.py picks its table)."""
    s = data["summary"]
    lines = [f"## Job master CPU with checkpoints every second ({s['reps']} interleaved reps)", "",
             f"Command: `.venv/bin/python bench/jobmaster_overhead.py --reps {s['reps']} "
             f"--short {s['short_s']:g} --long {s['long_s']:g}`", "",
             "| rep | with 1 s checkpoints (% of a core) | without (% of a core) | "
             "checkpoints' share (% of a core) |", "|---|---|---|---|"]
    for i, r in enumerate(data["reps"]):
        lines.append(f"| {i} | {100 * r['on_share']:.2f} | {100 * r['off_share']:.2f} | "
                     f"{100 * r['checkpoint_share']:.2f} |")
    lines.append(f"| median | {100 * s['on_share_median']:.2f} | {100 * s['off_share_median']:.2f}"
                 f" | {100 * s['checkpoint_share_median']:.2f} |")
    return lines + [""]


if __name__ == "__main__":
    sys.exit(main())
