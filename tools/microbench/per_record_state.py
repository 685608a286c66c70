"""The state access of bench/per_record.py's job alone, on the keyed state backends themselves.

    PYTHONPATH=$PWD .venv/bin/python tools/microbench/per_record_state.py \\
        [--records 450000] [--keys 100000] [--reps 3] [--backends heap,rocksdb] [--cpu 1] \\
        [--interval N] [--tree LABEL=PATH ...]

A maintainer's component benchmark (tools/microbench/README.md): bench/per_record.py runs the
whole job through the public API; this measures only what its ``RunningSum`` does to state.
``--records`` running count + sum updates over ``--keys`` random keys through the backend's
value states, with a snapshot every ``--interval`` records (default: a third of the
records): its synchronous part for ``rocksdb``, the serialization of the capture for
``heap``, and for ``heap-full`` / ``heap-incremental`` (heap with incremental snapshots off
or on) the files a checkpoint writes, so that the two compare fairly. The figure is the CPU
time per record (process time: RocksDB's background threads included).

Every measurement is a fresh interpreter pinned with ``taskset -c CPU``; ``--tree`` (repeatable)
measures the engine checked out at ``PATH`` (a ``git worktree`` of a baseline commit, say),
interleaved with the other trees run by run. Prints one line per run, writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(records: int, keys: int, backend: str, interval: int) -> dict:
    """One run in this process (the engine is the first one on ``sys.path``)."""
    from airflow_checkpoint_provider.engine import ValueStateDescriptor
    from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
    from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_for

    root = tempfile.mkdtemp(prefix="microbench-per-record-state-")
    try:
        if backend.startswith("heap"):
            b = HeapKeyedStateBackend("sum", KeyGroupRange(0, 127), 128,
                                      incremental=backend == "heap-incremental")
        else:
            from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend

            b = RocksDBKeyedStateBackend("sum", KeyGroupRange(0, 127), 128,
                                         workdir=os.path.join(root, "db"))
        total = b.get_state(ValueStateDescriptor("sum", 0))
        count = b.get_state(ValueStateDescriptor("count", 0))
        rnd = random.Random(1)
        ks = [f"k{rnd.randrange(keys)}" for _ in range(records)]
        groups = [key_group_for(k, 128) for k in ks]
        t0 = time.process_time()
        for n, (k, g) in enumerate(zip(ks, groups, strict=True), 1):
            b.set_current_key_in_group(k, g)
            s, c = total.value() + 1, count.value() + 1
            total.update(s)
            count.update(c)
            if n % interval == 0:
                if backend.startswith("heap-"):  # files written as a checkpoint writes them
                    chk = os.path.join(root, f"chk-{n}")
                    os.makedirs(chk)
                    b.snapshot_state(n).write(chk, "sum", False)  # type: ignore[misc]
                    b.notify_complete(n)
                elif backend == "heap":
                    b.serialize_capture(b.capture())  # type: ignore[union-attr]
                else:
                    shutil.rmtree(b.snapshot_sync(n))  # type: ignore[union-attr]
        cpu = time.process_time() - t0
        b.close()
        return {"records": records, "cpu_s": cpu, "us_per_record": cpu / records * 1e6}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=450_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backends", default="heap,rocksdb",
                    help="heap, rocksdb, heap-full, heap-incremental")
    ap.add_argument("--interval", type=int, default=0,
                    help="records between snapshots (default: a third of --records)")
    ap.add_argument("--cpu", default="1", help="taskset -c of every run ('' to not pin)")
    ap.add_argument("--tree", action="append", default=[],
                    help="LABEL=PATH: an engine checkout to measure (repeatable; default: "
                         "this one, labelled 'current')")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # the tree a child run imports
    ap.add_argument("--backend", default="heap", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    interval = args.interval or max(1, args.records // 3)
    if args.child:  # one run: this tree's engine first on the path
        sys.path.insert(0, args.child)
        print(json.dumps(measure(args.records, args.keys, args.backend, interval)), flush=True)
        return 0
    trees = [t.split("=", 1) for t in args.tree] or [["current", ROOT]]
    for rep in range(args.reps):
        for backend in args.backends.split(","):
            for label, tree in trees:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", tree,
                       "--backend", backend, "--records", str(args.records),
                       "--keys", str(args.keys), "--interval", str(interval)]
                if args.cpu:
                    cmd = ["taskset", "-c", str(args.cpu), *cmd]
                load = os.getloadavg()[0]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tree)
                r = json.loads(out.stdout.splitlines()[-1])
                print(f"rep {rep} {label:>10} {backend:16}: {r['us_per_record']:.2f} us CPU per "
                      f"record (state access and snapshots; load {load:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
