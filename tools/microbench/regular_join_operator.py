"""The regular join operator alone: ``regular_join`` (primary keys ``order_id`` / ``id``) fed
dict batches of 1,024 records in this process (customers first, then orders), heap and
RocksDB state; rows of both inputs per second. The rows and the join are those of
bench/regular_join.py, whose job runs the same operator in a pipeline: the difference is what
the engine around the operator costs.

    taskset -c 0 .venv/bin/python tools/microbench/regular_join_operator.py [--orders 200000]
        [--customers 10000] [--reps 2]

A maintainer's component benchmark (tools/microbench/README.md): it opens the operator with
the runtime's internals. Prints one line per repetition and backend.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from regular_join import build, customer, order  # noqa: E402

from airflow_checkpoint_provider.engine import RuntimeContext  # noqa: E402
from airflow_checkpoint_provider.engine.runtime.operators.registry import open_operator  # noqa: E402
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange  # noqa: E402


def operator_level(orders: int, customers: int, backend: str, batch: int = 1024) -> dict:
    p = build(tempfile.gettempdir(), 1, 1, backend)
    node = next(n for n in p.job_graph().nodes if n.kind == "regular_join")
    ctx = RuntimeContext(job_id="bench", job_name="bench", operator_uid="rj",
                         subtask_index=0, parallelism=1, attempt=0)
    op = open_operator(node, ctx, KeyGroupRange(0, 127), 128, {"kind": backend}, None)
    cust = [customer(j) for j in range(customers)]
    rows = [order(i, customers) for i in range(orders)]
    t0 = time.perf_counter()
    out = 0
    for s in range(0, customers, batch):
        out += len(op.process_input(2, cust[s:s + batch]))
    for s in range(0, orders, batch):
        out += len(op.process_input(1, rows[s:s + batch]))
    seconds = time.perf_counter() - t0
    op.close()
    assert out == orders, out
    return {"rows": orders + customers, "seconds": seconds,
            "rows_per_s": (orders + customers) / seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=200_000)
    ap.add_argument("--customers", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    rates: dict[str, list[float]] = {"heap": [], "rocksdb": []}
    for rep in range(args.reps):  # interleaved: both backends once per repetition
        for backend in rates:
            r = operator_level(args.orders, args.customers, backend)
            rates[backend].append(r["rows_per_s"])
            print(f"rep {rep} {backend}: {r['rows_per_s']:,.0f} rows/s", flush=True)
    for backend, values in rates.items():
        print(f"{backend}: median {statistics.median(values):,.0f} rows/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
