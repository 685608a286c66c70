"""Where the time goes: sample a keyed job (every slot process) with py-spy.

    .venv/bin/python bench/hotspots.py [--records N] [--keys K] [--job running_sum|aggregate]

Runs the job on the local runner under ``py-spy record --subprocesses`` and prints the
functions with the most samples where they were on top of the stack ("self"), across every
task thread of every slot process (idle waits are left out). Writes
bench/results/profile_<job>.json; BENCHMARKS.md shows its top rows.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Frames where a thread waits rather than works.
IDLE = re.compile(r"^(Condition\.wait|Event\.wait|Thread\._wait_for_tstate_lock|socket\.accept|"
                  r"recv_exact|select|sleep|_call_with_frames_removed|.*\.select)$")


def profile(job: str, records: int, keys: int, interval_ms: int | None = None,
            keep_raw: str | None = None, **build_opts) -> dict:
    tmp = tempfile.mkdtemp(prefix="bench-profile-")
    raw = os.path.join(tmp, "stacks.txt")
    code = (f"import sys; sys.path.insert(0, {HERE!r}); from jobs import run_job; "
            f"run_job({job!r}, {tmp!r}, {records}, {keys}, {interval_ms!r}, **{build_opts!r})")
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    try:
        # --nonblocking: never pause the sampled processes (a paused slot process can be
        # left stopped when its job ends mid-sample)
        subprocess.run([py_spy, "record", "--subprocesses", "--nonblocking", "--format", "raw",
                        "--rate", "200", "--output", raw, "--", sys.executable, "-c", code],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=600)
        if keep_raw:
            shutil.copy(raw, keep_raw)
        self_samples: collections.Counter = collections.Counter()
        total = 0
        with open(raw) as f:
            for line in f:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                frames = stack.split(";")
                if "engine/runtime/" not in stack or "importlib._bootstrap" in stack:
                    continue  # only the slots' task and channel threads, imports excluded
                leaf = frames[-1]
                name = leaf.split(" (")[0]
                if IDLE.match(name):
                    continue
                n = int(count)
                total += n
                self_samples[leaf] += n
        top = [{"function": k, "share": round(v / total, 4)} for k, v in self_samples.most_common(12)]
        return {"job": job, "records": records, "keys": keys, "interval_ms": interval_ms,
                "busy_samples": total, "top": top}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--job", default="aggregate", choices=["running_sum", "aggregate"])
    ap.add_argument("--label", default=None, help="results file suffix (default: the job name)")
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--interval-ms", type=int, default=None, help="checkpoint interval")
    ap.add_argument("--int-keys", action="store_true", help="int64 keys instead of k<n>")
    ap.add_argument("--batch-size", type=int, default=None, help="source batch size")
    ap.add_argument("--keep-raw", default=None, help="copy py-spy's raw stacks here")
    args = ap.parse_args(argv)
    opts: dict = {"int_keys": True} if args.int_keys else {}
    if args.batch_size:
        opts["batch_size"] = args.batch_size
    result = profile(args.job, args.records, args.keys, args.interval_ms,
                     keep_raw=args.keep_raw, **opts)
    os.makedirs(args.results_dir, exist_ok=True)
    with open(os.path.join(args.results_dir, f"profile_{args.label or args.job}.json"), "w") as f:
        json.dump(result, f, indent=1)
    for row in result["top"]:
        print(f"{row['share']:6.1%}  {row['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
