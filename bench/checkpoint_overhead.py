"""Throughput with checkpoints every second vs checkpointing disabled, same job, same run.

    .venv/bin/python bench/checkpoint_overhead.py [--reps 3] [--keys 100000]
        [--aggregate-records 5000000] [--running-sum-records 300000]

Jobs (bench/jobs.py): ``aggregate`` (vectorized: Arrow batches, built-in count/sum) and
``running_sum`` (a per-record KeyedProcessFunction). Local runner, parallelism 2. Runs are
interleaved (off/on pairs, the order alternating per repetition) because this machine's speed drifts; the ratio is
computed pair by pair and the median reported. Writes checkpoint_overhead.json.
"""

from __future__ import annotations

import argparse
import sys

from jobs import add_results_dir, median, p99, peak_rss, run_job, write_results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--aggregate-records", type=int, default=5_000_000)
    ap.add_argument("--running-sum-records", type=int, default=300_000)
    add_results_dir(ap)
    args = ap.parse_args(argv)
    records = {"aggregate": args.aggregate_records, "running_sum": args.running_sum_records}
    runs: dict[str, list] = {job: [] for job in records}
    for rep in range(args.reps):
        for job, n in records.items():
            # alternate which of the pair runs first, so a drift within a pair cancels out
            if rep % 2:
                on = run_job(job, None, n, args.keys, 1000)
                off = run_job(job, None, n, args.keys, None)
            else:
                off = run_job(job, None, n, args.keys, None)
                on = run_job(job, None, n, args.keys, 1000)
            runs[job].append({"off": off, "on": on,
                              "ratio": on["records_per_s"] / off["records_per_s"]})
            print(f"rep {rep} {job}: off {off['records_per_s']:,.0f} rec/s, on "
                  f"{on['records_per_s']:,.0f} rec/s ({on['checkpoints']} checkpoints, "
                  f"{on['durations_ms']} ms)", flush=True)
    summary = {}
    for job, rs in runs.items():
        durations = [d for r in rs for d in r["on"]["durations_ms"]]
        summary[job] = {
            "records": records[job], "keys": args.keys, "reps": args.reps,
            "off_records_per_s": median(r["off"]["records_per_s"] for r in rs),
            "on_records_per_s": median(r["on"]["records_per_s"] for r in rs),
            "ratio_median": median(r["ratio"] for r in rs),
            "checkpoint_ms_p50": median(durations), "checkpoint_ms_p99": p99(durations),
            "checkpoints": len(durations),
            "peak_rss_mb": max((peak_rss(r[k]) or 0 for r in rs for k in ("off", "on")), default=None),
        }
    write_results(args.results_dir, "checkpoint_overhead.json", {"summary": summary, "runs": runs})
    for job, s in summary.items():
        print(f"{job}: ratio median {s['ratio_median']:.3f}, checkpoint p50 "
              f"{s['checkpoint_ms_p50']} ms p99 {s['checkpoint_ms_p99']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
