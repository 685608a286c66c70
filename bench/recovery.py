"""Recovery time at 1M keys: from an injected failure to the first record processed after
the restore from the latest checkpoint.

    .venv/bin/python bench/recovery.py [--keys 1000000] [--records 3000000] [--reps 3]

The ``aggregate`` job (bench/jobs.py) on the local runner, parallelism 2, checkpoints every
second. A function after the source raises once, when the stream reaches record id
``--fail-at`` (default 80% of the records: the state holds ~all keys by then), and notes the
time. Every slot process notes when its first aggregated batch passes a probe after the
aggregation; the recovery time is the first such moment after the failure. Slot processes
are new for every attempt, so a probe time after the failure is the restored attempt's.
Also reported: the job master's restart figure (launch of the new slots until every task
restored its state and runs). Writes recovery.json.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

from jobs import add_results_dir, median, peak_rss, run_job, write_results


class FailOnce:
    """Raise once (across attempts) when a batch holds an id >= ``at``; note the time."""

    def __init__(self, directory: str, at: int) -> None:
        self.path = os.path.join(directory, "failed")
        self.at = at

    def __call__(self, batch):
        if batch.num_rows and batch.column("id").to_numpy().max() >= self.at:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return batch
            with os.fdopen(fd, "w") as f:
                f.write(repr(time.time()))
            raise RuntimeError(f"injected failure at record {self.at}")
        return batch


class FirstBatch:
    """Note, per slot process, when the first aggregated batch passes."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.seen = False

    def __call__(self, batch):
        if not self.seen:
            self.seen = True
            with open(os.path.join(self.directory, f"first-{os.getpid()}"), "w") as f:
                f.write(repr(time.time()))
        return batch


def one(records: int, keys: int, fail_at: int) -> dict:
    marks = tempfile.mkdtemp(prefix="bench-recovery-")
    try:
        r = run_job("aggregate", None, records, keys, 1000, fault=FailOnce(marks, fail_at),
                    probe=FirstBatch(marks))
        with open(os.path.join(marks, "failed")) as f:
            failed = float(f.read())
        firsts = []
        for path in glob.glob(os.path.join(marks, "first-*")):
            with open(path) as f:
                firsts.append(float(f.read()))
        after = [t for t in firsts if t > failed]
        return {**r, "recovery_s": (min(after) - failed) if after else None}
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--fail-at", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    add_results_dir(ap)
    args = ap.parse_args(argv)
    fail_at = args.fail_at if args.fail_at is not None else int(args.records * 0.8)
    runs = []
    for rep in range(args.reps):
        r = one(args.records, args.keys, fail_at)
        runs.append(r)
        print(f"rep {rep}: recovery {r['recovery_s']:.2f} s, restarts {r['restarts']}, "
              f"restored state {max(r['state_bytes'], default=0) / 1e6:.1f} MB, peak RSS "
              f"{peak_rss(r)} MB", flush=True)
    summary = {"keys": args.keys, "records": args.records, "fail_at": fail_at, "reps": args.reps,
               "recovery_s_median": median(r["recovery_s"] for r in runs),
               "recovery_s_max": max((r["recovery_s"] or 0) for r in runs),
               "restart_startup_s_median": median(r["startup_after_failure_s"] for r in runs),
               "state_mb_median": median(max(r["state_bytes"], default=0) / 1e6 for r in runs),
               "peak_rss_mb": max((peak_rss(r) or 0) for r in runs)}
    write_results(args.results_dir, "recovery.json", {"summary": summary, "runs": runs})
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
