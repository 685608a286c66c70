"""The per-record Python path on one core: a keyed running count + sum per record.

    .venv/bin/python bench/per_record.py [--records 150000,450000] [--keys 100000]
        [--reps 3] [--backends heap,rocksdb] [--cpu 1] [--tree LABEL=PATH ...] [--write-md]

The job (issue 55): generator (dict records, ``num_keys`` string keys) -> ``key_by("key")``
-> a ``KeyedProcessFunction`` keeping a count and a sum in value state and emitting one
record per input record (``examples/running_sum.RunningSum``) -> discarding sink;
parallelism 1, checkpoints every 1 s, every other setting (batch size, buffer debloating,
checkpoint options) as a user gets it by default; local runner.

Method: every run is a fresh interpreter pinned with ``taskset -c CPU`` (the job master and
the slot processes inherit it); each repetition runs the two input sizes of ``--records``
back to back for each backend, and the rate is the **marginal rate** between them,
``(n2 - n1) / (wall2 - wall1)``, so start-up, the final checkpoint and teardown cancel. The
same difference over the CPU seconds of the run (the child and its waited-for children:
job master and slots) is ``records per CPU-second``, a check that does not depend on what
else the machine runs. The 1-minute load average is recorded at the start of every run.

A/B: ``--tree LABEL=PATH`` (repeatable) runs the job against the engine checked out at
``PATH`` (e.g. a ``git worktree`` of the baseline commit), interleaved with the other trees
run by run, each run's processes importing that tree (``PYTHONPATH``).

The state access of the same job alone, on the backends themselves (no job, CPU per
record), is a component benchmark: tools/microbench/per_record_state.py.

Writes ``per_record.json`` (in bench/results unless ``--results-dir``; ``--append`` keeps the
runs already there) and, with ``--write-md``, BENCHMARKS.md (bench/write_benchmarks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULT = "per_record.json"


# -- one run (a child interpreter) --------------------------------------------------------
class CpuMeter:
    """CPU seconds of a run's processes: the child, and every descendant (job master, fork
    server, slots). A thread of the parent (which is not pinned: it takes no time from the
    measured core) samples each one's user + system time every 100 ms and keeps its last
    value, so slots forked by the fork server and never waited for by the child count too.
    Up to one sampling interval of a process's last moments is missed, the same for both
    input sizes: it cancels in the marginal figure."""

    def __init__(self, pid: int) -> None:
        import threading

        import psutil

        self.root = psutil.Process(pid)
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        import psutil

        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            self.seen[proc.pid] = t.user + t.system

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            self._sample()

    def total(self) -> float:
        self.stop.set()
        self.thread.join()
        return sum(self.seen.values())


def child(records: int, keys: int, backend: str, interval_ms: int, sink: str) -> dict:
    from airflow_checkpoint_provider.engine import (
        CheckpointConfig,
        DiscardSink,
        FileSink,
        GeneratorSource,
        Pipeline,
        RestartStrategy,
    )
    from airflow_checkpoint_provider.engine.client import MetadataStore
    from airflow_checkpoint_provider.examples.running_sum import RunningSum

    root = tempfile.mkdtemp(prefix="bench-per-record-")
    try:
        # "heap-full" / "heap-incremental": the heap backend with incremental snapshots off
        # or on (plain "heap" and "rocksdb": as a user gets them by default)
        kind, _, mode = backend.partition("-")
        options = {"heap_incremental": mode == "incremental"} if mode else {}
        p = Pipeline("bench-per-record", state_backend=kind, **options,
                     checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                                 directory=os.path.join(root, "ckpt")),
                     metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                     restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
        (p.source(GeneratorSource(records, num_keys=keys, seed=1), uid="gen", parallelism=1)
          .key_by("key").process(RunningSum(), uid="sum", parallelism=1)
          .sink(DiscardSink() if sink == "discard" else FileSink(os.path.join(root, "out")),
                uid="out"))
        t0 = time.monotonic()
        result = p.run("local")
        wall = time.monotonic() - t0
        if result.status != "FINISHED":
            raise RuntimeError(f"per-record job ended {result.status}: {result.failure_reason}")
        store = MetadataStore(p.metadata_url)
        done = [c for c in store.list_checkpoints(result.job_id)
                if c.status in ("COMPLETED", "SUBSUMED")]
        store.close()
        return {"records": records, "wall_s": wall,
                "startup_s": (result.extra.get("startup_seconds") or [None])[0],
                "checkpoints": len(done),
                "checkpoint_ms": [c.duration_ms for c in done if c.duration_ms is not None],
                "state_bytes": max((c.state_size or 0 for c in done), default=0)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_child(args, tree: str, backend: str, records: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--backend", backend,
           "--records", str(records), "--keys", str(args.keys), "--interval-ms",
           str(args.interval_ms), "--sink", args.sink]
    if args.cpu is not None:
        cmd = ["taskset", "-c", str(args.cpu), *cmd]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [tree, *filter(None, [os.environ.get("PYTHONPATH")])])}
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # cwd: the tree, since processes started with ``python -m`` (the fork server, the
        # slots) put their working directory first on sys.path, before PYTHONPATH
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True, cwd=tree)
        meter = CpuMeter(proc.pid)
        # the run's CPU: the child and every process it and its children waited for (the
        # job master, the fork server, the slots), from the kernel's accounting
        _pid, status, usage = os.wait4(proc.pid, 0)
        cpu = meter.total()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"run failed ({proc.returncode}): {err.read()[-3000:]}")
        r = json.loads(out.read().strip().splitlines()[-1])
    r.update(cpu_s=cpu, cpu_waited_s=usage.ru_utime + usage.ru_stime, loadavg_before=load,
             loadavg_after=os.getloadavg()[0])
    return r


# -- the series -----------------------------------------------------------------------------
def marginal(small: dict, large: dict) -> dict:
    n = large["records"] - small["records"]
    wall = large["wall_s"] - small["wall_s"]
    cpu = large["cpu_s"] - small["cpu_s"]
    return {"rate": n / wall if wall > 0 else None,
            "records_per_cpu_s": n / cpu if cpu > 0 else None}


def summarize(runs: list[dict]) -> list[dict]:
    """Median marginal rate per (tree, backend) over the repetitions."""
    groups: dict[tuple, list] = {}
    for r in runs:
        if r.get("marginal"):
            groups.setdefault((r["tree"], r["backend"]), []).append(r)
    out = []
    for (tree, backend), rs in groups.items():
        rates = [r["marginal"]["rate"] for r in rs if r["marginal"]["rate"]]
        cpus = [r["marginal"]["records_per_cpu_s"] for r in rs
                if r["marginal"]["records_per_cpu_s"]]
        out.append({"tree": tree, "backend": backend, "reps": len(rs),
                    "rate": statistics.median(rates) if rates else None,
                    "rates": rates,
                    "records_per_cpu_s": statistics.median(cpus) if cpus else None,
                    "loads": [r["loadavg_before"] for r in rs]})
    return out


def _commit(tree: str) -> str | None:
    """The commit checked out at ``tree`` (short), or None outside git."""
    out = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


def _shown(arg: str, trees: list) -> str:
    """A command-line argument as the page shows it: a tree path becomes its commit."""
    for label, tree in trees:
        if arg == f"{label}={tree}":
            return f"{label}=<checkout of {_commit(tree) or tree}>"
    return arg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default="150000,450000",
                    help="two input sizes (the marginal rate is taken between them)")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backends", default="heap,rocksdb",
                    help="heap, rocksdb (as a user gets them), heap-full, heap-incremental "
                         "(heap with incremental snapshots off / on)")
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--sink", choices=("discard", "file"), default="discard")
    ap.add_argument("--cpu", default="1", help="taskset -c of every run ('' to not pin)")
    ap.add_argument("--tree", action="append", default=[],
                    help="LABEL=PATH: an engine checkout to measure (repeatable; default: "
                         "this one, labelled 'current')")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--write-md", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="heap", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(int(args.records), args.keys, args.backend, args.interval_ms,
                               args.sink)), flush=True)
        return 0
    args.cpu = args.cpu or None
    sizes = sorted(int(n) for n in args.records.split(","))
    if len(sizes) != 2:
        ap.error("--records takes two sizes")
    trees = [t.split("=", 1) for t in args.tree] or [["current", ROOT]]
    path = os.path.join(args.results_dir, RESULT)
    runs: list[dict] = []
    if args.append and os.path.exists(path):
        with open(path) as f:
            runs = json.load(f).get("runs", [])
    for rep in range(args.reps):
        for backend in args.backends.split(","):
            for label, tree in trees:
                pair = [run_child(args, tree, backend, n) for n in sizes]
                m = marginal(*pair)
                runs.append({"tree": label, "backend": backend, "rep": rep, "runs": pair,
                             "marginal": m, "loadavg_before": pair[0]["loadavg_before"],
                             "cpus": args.cpu})
                print(f"rep {rep} {label:>10} {backend:8}: {m['rate'] or 0:>9,.0f} rec/s marginal,"
                      f" {m['records_per_cpu_s'] or 0:>9,.0f} rec/CPU-s (load "
                      f"{pair[0]['loadavg_before']:.1f}, {pair[1]['checkpoints']} checkpoints)",
                      flush=True)
    summary = summarize(runs)
    for s in summary:
        print(f"{s['tree']:>10} {s['backend']:8}: median {s['rate'] or 0:,.0f} rec/s "
              f"({s['reps']} reps), {s['records_per_cpu_s'] or 0:,.0f} rec/CPU-s", flush=True)
    sys.path.insert(0, HERE)
    from jobs import write_results

    write_results(args.results_dir, RESULT, {
        "keys": args.keys, "records": sizes, "interval_ms": args.interval_ms,
        "sink": args.sink, "cpu": args.cpu, "summary": summary, "runs": runs,
        "trees": {label: _commit(tree) for label, tree in trees},
        # the runs pin themselves (--cpu): the script itself runs unpinned; a tree's path is
        # shown as the commit it had checked out
        "command": " ".join([".venv/bin/python", "bench/per_record.py", *(
            _shown(a, trees) for a in (argv if argv is not None else sys.argv[1:]))])})
    if args.write_md:
        subprocess.run([sys.executable, os.path.join(HERE, "write_benchmarks.py"),
                        "--results-dir", args.results_dir], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
