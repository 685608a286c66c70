"""Checkpoint cost of the keyed state backends, measured on the backends themselves.

    .venv/bin/python tools/microbench/state_backends.py [--keys 10000,100000,1000000] [--reps 3]

A maintainer's component benchmark (tools/microbench/README.md): the same figures from a job,
through the public API, are bench/state_backends.py's (the BENCHMARKS.md section).

For each key count: fill N keys, take a first checkpoint, then 5 rounds of "update 1% of
the keys, checkpoint" (notifying completion each time, as the coordinator does). Records the
synchronous part (ms), the asynchronous upload (ms), the full state size and the bytes
uploaded per checkpoint, for heap (always full), RocksDB full and RocksDB incremental.
Prints one line per backend, key count and repetition; ``--output`` also writes them as JSON
(the format of bench/state_backends.py's results before issue 53). The heap
backend's synchronous part is the copy-on-write capture; its asynchronous part the msgpack
serialization and the write.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from airflow_checkpoint_provider.engine import ValueStateDescriptor  # noqa: E402
from airflow_checkpoint_provider.engine.fs.storage import LocalFileSystem, sha256  # noqa: E402
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend  # noqa: E402
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange  # noqa: E402
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend  # noqa: E402

ROUNDS = 5


def update(backend, state, keys, start, step):
    for i in range(start, keys, step):
        backend.set_current_key(f"key-{i}")
        state.update({"count": i, "sum": i * 3})


def measure(kind: str, keys: int, root: str) -> dict:
    kg = KeyGroupRange(0, 127)
    if kind == "heap":
        b = HeapKeyedStateBackend("op", kg, 128)
    else:
        b = RocksDBKeyedStateBackend("op", kg, 128, incremental=(kind == "rocksdb-incremental"),
                                     workdir=os.path.join(root, "work"))
    state = b.get_state(ValueStateDescriptor("agg"))
    update(b, state, keys, 0, 1)
    fs = LocalFileSystem()
    out = []
    for n in range(1, ROUNDS + 2):
        if n > 1:
            update(b, state, keys, n, 100)          # 1% of the keys change
        chk = os.path.join(root, "job", f"chk-{n}")
        t0 = time.perf_counter()
        if kind == "heap":
            cap = b.capture()  # synchronous part: shallow copies (copy-on-write)
            t1 = time.perf_counter()
            data, _offsets, _meta = b.serialize_capture(cap)  # asynchronous part
            fs.write_bytes(os.path.join(chk, "op.state"), data)
            sha256(data)
            size = sent = len(data)
        else:
            local = b.snapshot_sync(n)
            t1 = time.perf_counter()
            _handle, size, sent = b.upload(n, local, chk, full=False)
            b.notify_complete(n)
        t2 = time.perf_counter()
        out.append({"checkpoint": n, "sync_ms": (t1 - t0) * 1000, "async_ms": (t2 - t1) * 1000,
                    "state_size": size, "uploaded": sent})
    if kind != "heap":
        b.close()
    return {"backend": kind, "keys": keys, "checkpoints": out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", default="10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--output", help="a JSON file for the results")
    args = ap.parse_args(argv)
    results = []
    for keys in [int(k) for k in args.keys.split(",")]:
        for rep in range(args.reps):
            for kind in ("heap", "rocksdb-full", "rocksdb-incremental"):
                root = tempfile.mkdtemp(prefix="bench-state-")
                try:
                    r = measure(kind, keys, root)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                r["rep"] = rep
                results.append(r)
                later = r["checkpoints"][1:]
                print(f"{kind:>20} {keys:>8} keys rep {rep}: sync p50 "
                      f"{statistics.median(c['sync_ms'] for c in later):7.1f} ms, async p50 "
                      f"{statistics.median(c['async_ms'] for c in later):7.1f} ms, uploaded "
                      f"{statistics.median(c['uploaded'] for c in later) / 1e6:7.2f} MB of "
                      f"{statistics.median(c['state_size'] for c in later) / 1e6:7.2f} MB", flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
