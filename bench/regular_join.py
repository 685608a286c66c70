"""Insert-only regular join: ours (heap, RocksDB) against Flink SQL's regular join on the
same rows, one core (run the whole script under ``taskset -c 0``: the slot processes and
Flink's JVM inherit it).

    taskset -c 0 .venv/bin/python bench/regular_join.py [--orders 200000] [--customers 10000]
        [--reps 2] [--flink-python /work/flink-venv/bin/python]

Rows: ``customers`` ``{id, name}`` (``--customers``) and ``orders`` ``{order_id, cid,
amount}`` (``--orders``, ``cid`` spread over the customers), both insert-only; the inner
join on ``cid = id`` emits one row per order. Measured:

* ``job``: our pipeline -- two generator sources -> ``regular_join`` (primary keys
  ``order_id`` / ``id``) -> discarding sink, parallelism 1, 1 s checkpoints, local runner;
  rows of both inputs / (wall time - start-up);
* ``flink``: bench/regular_join_flink.py under PyFlink 2.x -- the same rows from CSV files,
  the SQL inner join into ``blackhole``, parallelism 1, 1 s checkpoints, hashmap or RocksDB
  state; a warm-up job on a tenth of the orders runs first in the same JVM; rows / the
  measured job's net runtime (deployment and the wait for the final checkpoint of a bounded
  job included), and ``marginal_rows_per_s``: the extra rows over the warm-up job's / the
  extra net runtime (fixed costs cancel).

The operator alone, without the engine around it, is a component benchmark:
tools/microbench/regular_join_operator.py (results before issue 53 have its figures as
``operator_heap`` / ``operator_rocksdb``; the section shows them when present).

Results: bench/results/regular_join.json; BENCHMARKS.md's section is rendered by
bench/regular_join_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import cloudpickle

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from jobs import add_results_dir, bench_pipeline, median, write_results  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    DiscardSink,
    GeneratorSource,
    Pipeline,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MULT = 2654435761


def order(i: int, customers: int) -> dict:
    return {"order_id": i, "cid": (i * MULT) % customers, "amount": i % 100}


def customer(j: int) -> dict:
    return {"id": j, "name": f"c{j}"}


class Orders(GeneratorSource):
    def __init__(self, n: int, customers: int) -> None:
        super().__init__(n, splits=1)
        self.customers = customers

    def record(self, i: int) -> dict:
        return order(i, self.customers)


class Customers(GeneratorSource):
    def __init__(self, n: int) -> None:
        super().__init__(n, splits=1)

    def record(self, i: int) -> dict:
        return customer(i)


def build(root: str, orders: int, customers: int, backend: str) -> Pipeline:
    p = bench_pipeline("bench-regular-join", root, {"interval_ms": 1_000},
                       max_parallelism=128, state_backend=backend)
    left = p.source(Orders(orders, customers), uid="orders")
    right = p.source(Customers(customers), uid="customers")
    (left.key_by("cid").regular_join(right.key_by("id"), how="inner", uid="rj",
                                     left_primary_key="order_id", right_primary_key="id")
         .sink(DiscardSink(), uid="out"))
    return p


def job_level(orders: int, customers: int, backend: str) -> dict:
    root = tempfile.mkdtemp(prefix="bench-rj-")
    try:
        p = build(root, orders, customers, backend)
        t0 = time.monotonic()
        result = p.run()
        elapsed = time.monotonic() - t0
        if result.status != "FINISHED":
            raise RuntimeError(f"regular join bench ended {result.status}: "
                               f"{result.failure_reason}")
        startup = (result.extra.get("startup_seconds") or [0])[0] or 0
        rows = orders + customers
        return {"rows": rows, "seconds": elapsed, "startup_s": startup,
                "rows_per_s": rows / (elapsed - startup),
                "peak_rss_mb": result.extra.get("peak_rss_mb")}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_csv(directory: str, orders: int, customers: int) -> None:
    for name, rows in (("orders", (order(i, customers) for i in range(orders))),
                       ("customers", (customer(j) for j in range(customers)))):
        os.makedirs(os.path.join(directory, name))
        with open(os.path.join(directory, name, "part-0.csv"), "w") as f:
            f.writelines(",".join(str(v) for v in r.values()) + "\n" for r in rows)


def flink(python: str, csv: str, warmup: str, backend: str, rows: int, warm_rows: int) -> dict:
    cmd = [python, os.path.join(HERE, "regular_join_flink.py"), "--csv", csv,
           "--warmup-csv", warmup, "--backend", backend, "--interval-s", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"flink run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(line[len("RESULT "):])
    out["rows"] = rows
    out["rows_per_s"] = rows / out["net_runtime_s"]
    extra_s = out["net_runtime_s"] - out["warmup_net_runtime_s"]
    out["marginal_rows_per_s"] = (rows - warm_rows) / extra_s if extra_s > 0 else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=200_000)
    ap.add_argument("--customers", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--flink-python", default="/work/flink-venv/bin/python")
    ap.add_argument("--no-flink", action="store_true")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    rows = args.orders + args.customers
    data = tempfile.mkdtemp(prefix="bench-rj-csv-")
    runs = []
    try:
        csv, warm = os.path.join(data, "main"), os.path.join(data, "warmup")
        if not args.no_flink:
            write_csv(csv, args.orders, args.customers)
            write_csv(warm, args.orders // 10, args.customers)
        for rep in range(args.reps):  # interleaved: every figure of a rep, then the next rep
            run: dict = {}
            for backend in ("heap", "rocksdb"):
                run[f"job_{backend}"] = job_level(args.orders, args.customers, backend)
                if not args.no_flink:
                    fb = "hashmap" if backend == "heap" else "rocksdb"
                    run[f"flink_{fb}"] = flink(args.flink_python, csv, warm, fb, rows,
                                               args.orders // 10 + args.customers)
            print(f"rep {rep}: " + ", ".join(f"{k} {v['rows_per_s']:,.0f}"
                                             for k, v in run.items()), flush=True)
            runs.append(run)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    summary = {"orders": args.orders, "customers": args.customers, "reps": args.reps,
               "cpu_affinity": sorted(os.sched_getaffinity(0)),
               "load_average": list(os.getloadavg()),
               "rows_per_s": {k: median([r[k]["rows_per_s"] for r in runs]) for k in runs[0]},
               "flink_marginal_rows_per_s": {
                   k: median([r[k]["marginal_rows_per_s"] for r in runs])
                   for k in runs[0] if k.startswith("flink")}}
    print(json.dumps(summary, indent=1))
    write_results(args.results_dir, "regular_join.json", {"summary": summary, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
