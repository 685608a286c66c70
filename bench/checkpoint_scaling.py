"""Checkpoint duration and size as keyed state grows: 10k, 100k and 1M keys.

    .venv/bin/python bench/checkpoint_scaling.py [--keys 10000,100000,1000000] [--reps 3]

The ``aggregate`` job (bench/jobs.py: built-in count/sum, columnar state, Arrow IPC
snapshots) with checkpoints every second on the local runner, parallelism 2; records =
max(1M, 3 x keys) so the state reaches its size early. Durations are the coordinator's
(trigger to completion, as Flink reports them), bytes are the checkpointed state size. The
per-record backends (heap, RocksDB full / incremental) are measured by state_backends.py.
Writes checkpoint_scaling.json.
"""

from __future__ import annotations

import argparse
import sys

from jobs import add_results_dir, median, p99, peak_rss, run_job, write_results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", default="10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-records", type=int, default=1_000_000)
    add_results_dir(ap)
    args = ap.parse_args(argv)
    key_counts = [int(k) for k in args.keys.split(",")]
    runs: dict[int, list] = {k: [] for k in key_counts}
    for rep in range(args.reps):
        for keys in key_counts:  # interleaved: every key count once per repetition
            records = max(args.min_records, 3 * keys)
            r = run_job("aggregate", None, records, keys, 1000)
            runs[keys].append(r)
            print(f"rep {rep} {keys:>8} keys: {r['records_per_s']:,.0f} rec/s, checkpoints "
                  f"{r['durations_ms']} ms, {max(r['state_bytes'], default=0) / 1e6:.1f} MB, "
                  f"peak RSS {peak_rss(r)} MB", flush=True)
    summary = []
    for keys, rs in runs.items():
        durations = [d for r in rs for d in r["durations_ms"]]
        sizes = [b for r in rs for b in r["state_bytes"]]
        summary.append({"keys": keys, "records": max(args.min_records, 3 * keys),
                        "reps": args.reps, "checkpoints": len(durations),
                        "checkpoint_ms_p50": median(durations), "checkpoint_ms_p99": p99(durations),
                        "checkpoint_ms_max": max(durations, default=None),
                        "bytes_median": median(sizes), "bytes_max": max(sizes, default=None),
                        "records_per_s": median(r["records_per_s"] for r in rs),
                        "peak_rss_mb": max((peak_rss(r) or 0 for r in rs), default=None)})
    write_results(args.results_dir, "checkpoint_scaling.json",
                  {"summary": summary, "runs": {str(k): v for k, v in runs.items()}})
    for s in summary:
        print(f"{s['keys']:>8} keys: p50 {s['checkpoint_ms_p50']} ms, p99 {s['checkpoint_ms_p99']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
