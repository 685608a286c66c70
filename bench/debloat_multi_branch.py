"""Buffer debloating on a job whose queries share one source (issue 51, item 1): default
settings against ``buffer_debloat_target_ms=None``, runs interleaved.

    .venv/bin/python bench/debloat_multi_branch.py [--runner local|spark] [--reps 3]
        [--kills 0] [--events 1500000] [--results-dir bench/results]

The job is tests/integration/engine/runners/test_progress_multibranch.py's: bench/nexmark's q7 (a per-batch
combiner, then a 10 s window) and q19 (a keyed top-n) on one Parquet ``FileSource`` at
parallelism 2, 200 ms checkpoints. Each run is a driver process (Spark: ``local[4]``,
barrier mode); with ``--kills N`` this process SIGKILLs a slot (Spark: the Python worker
hosting it) N times, ``--kill-every-s`` apart from when the job first ran, and the job
restores from its latest checkpoint. Reported per run: wall time (from the driver's start,
Spark session included), status, restarts and the completed checkpoints' durations; per
mode the median, and the default's median over the run without debloating's.

Writes ``debloat_multi_branch.json`` to the results directory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: the test whose job this is (imported by its module name, by the slots too: they inherit
#: sys.path) and the tests' helper modules it imports
JOB_TEST = os.path.join(ROOT, "tests", "integration", "engine", "runners")
for _p in (ROOT, os.path.join(ROOT, "tests", "support"), JOB_TEST):
    if _p not in sys.path:
        sys.path.insert(0, _p)

MODES = {"off": {"buffer_debloat_target_ms": None}, "default": {}}


def child(args) -> int:
    """One run (the driver process): build, run, write the result."""
    from test_progress_multibranch import build

    from airflow_checkpoint_provider.engine import RestartStrategy
    from airflow_checkpoint_provider.engine.client import MetadataStore

    p = build(args.root, args.data, tuple(args.queries.split(",")), **MODES[args.mode])
    p.restart_strategy = RestartStrategy.fixed_delay(attempts=10, delay_ms=0)
    options: dict = {}
    if args.runner == "spark":
        from airflow_checkpoint_provider.engine.client import spark_session

        options["spark"] = spark_session("local[4]", f"debloat-{args.mode}")
    result = p.run(args.runner, **options)
    store = MetadataStore(p.metadata_url)
    try:
        durations = [c.duration_ms for c in store.list_checkpoints(result.job_id)
                     if c.duration_ms is not None and c.complete_time is not None]
    finally:
        store.close()
    with open(os.path.join(args.root, "result.json"), "w") as f:
        json.dump({"status": result.status, "restarts": result.restarts,
                   "failure_reason": result.failure_reason,
                   "checkpoint_ms": durations}, f)
    if "spark" in options:
        options["spark"].stop()
    return 0


def one_run(mode: str, data: str, runner: str, queries: str, kills: int, every_s: float,
            timeout_s: float, rng: random.Random) -> dict:
    from bench.chaos.run import _live_slot_pids, _store

    root = tempfile.mkdtemp(prefix=f"debloat-{mode}-")
    env = {**os.environ, "PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--mode", mode, "--root", root,
           "--data", data, "--runner", runner, "--queries", queries]
    t0 = time.monotonic()
    with open(os.path.join(root, "driver.log"), "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    fired, first, store = [], None, None
    try:
        while proc.poll() is None and time.monotonic() - t0 < timeout_s:
            time.sleep(0.2)
            if store is None:
                store = _store(root)
            if store is None or len(fired) >= kills:
                continue
            pids = _live_slot_pids(store)
            if first is None and pids:
                first = time.monotonic()
            if first is not None and pids and time.monotonic() >= first + every_s * (len(fired) + 1):
                pid = rng.choice(sorted(pids))
                try:
                    os.kill(pid, signal.SIGKILL)
                    fired.append(round(time.monotonic() - t0, 1))
                except ProcessLookupError:
                    pass
        wall = time.monotonic() - t0
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            out = {"status": "UNFINISHED", "failure_reason": f"no end within {timeout_s:.0f} s"}
        else:
            path = os.path.join(root, "result.json")
            out = json.load(open(path)) if os.path.exists(path) else {  # noqa: SIM115
                "status": "DRIVER-DIED", "failure_reason": f"see {root}/driver.log"}
    finally:
        if store is not None:
            store.close()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    ok = out["status"] == "FINISHED"
    if ok:
        shutil.rmtree(root, ignore_errors=True)
    ckpt = sorted(out.pop("checkpoint_ms", None) or [])
    return {"mode": mode, "runner": runner, "queries": queries, "wall_s": round(wall, 1), **out,
            "kills_at_s": fired, "checkpoints": len(ckpt),
            "checkpoint_p50_ms": ckpt[len(ckpt) // 2] if ckpt else None,
            "checkpoint_max_ms": ckpt[-1] if ckpt else None,
            "load_before": os.getloadavg()[0], "root": None if ok else root}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    for a in ("--mode", "--root", "--data", "--runner", "--queries"):
        c.add_argument(a, required=True)
    ap.add_argument("--runner", default="local", choices=("local", "spark"))
    ap.add_argument("--queries", default="q7,q19", help="bench/nexmark queries on the source")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kills", type=int, default=0)
    ap.add_argument("--kill-every-s", type=float, default=5.0)
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "debloat-multi"))
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    if args.cmd == "child":
        return child(args)
    import test_progress_multibranch as job

    from bench.nexmark.generator import NexmarkConfig, write_parquet

    data = os.path.join(args.data_dir, f"e{args.events}")
    if not os.path.isdir(data):  # a file per source subtask, as in the test
        write_parquet(data + ".tmp", args.events,
                      config=NexmarkConfig(events_per_second=job.EVENT_RATE),
                      events_per_file=args.events // 2)
        os.rename(data + ".tmp", data)
    rng = random.Random(51)
    runs = []
    for rep in range(args.reps):
        for mode in MODES:  # interleaved: a loaded machine slows both
            r = one_run(mode, data, args.runner, args.queries, args.kills, args.kill_every_s,
                        args.timeout_s, rng)
            r["rep"] = rep
            runs.append(r)
            print(json.dumps(r), flush=True)
    med: dict = {}
    for mode in MODES:  # finished runs only: a driver that died at start measured nothing
        walls = sorted(r["wall_s"] for r in runs if r["mode"] == mode
                       and r["status"] == "FINISHED")
        med[mode] = walls[len(walls) // 2] if walls else None
    ratio = round(med["default"] / med["off"], 2) if med["default"] and med["off"] else None
    summary = {"median_wall_s": med, "default_over_off": ratio}
    print(json.dumps(summary), flush=True)
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, "debloat_multi_branch.json")
    old = json.load(open(path)) if os.path.exists(path) else {"sessions": []}  # noqa: SIM115
    old["sessions"].append({"time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                            "runner": args.runner, "kills": args.kills, "events": args.events,
                            "queries": args.queries,
                            "runs": runs, **summary,
                            "command": "bench/debloat_multi_branch.py " + " ".join(argv or sys.argv[1:])})
    with open(path, "w") as f:
        json.dump(old, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
