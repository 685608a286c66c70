"""Flink 2.x (PyFlink SQL) running the regular join of bench/regular_join.py on the same
rows (CSV files it wrote). Runs under the separate Flink venv, never imports our engine, and
prints one JSON line::

    /work/flink-venv/bin/python bench/regular_join_flink.py --csv DIR [--warmup-csv DIR] \\
        [--backend hashmap|rocksdb] [--interval-s 10]

``DIR`` holds ``orders/`` and ``customers/``. The query is ``SELECT o.order_id, o.cid,
o.amount, c.name FROM orders o JOIN customers c ON o.cid = c.id`` into a ``blackhole`` sink,
parallelism 1, exactly-once checkpoints. With ``--warmup-csv`` the same job first runs on
those files in the same JVM and only the second run is measured (as bench/nexmark/
flink_sql.py): ``net_runtime_s`` is the cluster's net runtime of the measured job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ORDERS = """CREATE TABLE orders (order_id BIGINT, cid BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')"""
CUSTOMERS = """CREATE TABLE customers (id BIGINT, name STRING)
WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')"""
SINK = """CREATE TABLE sink (order_id BIGINT, cid BIGINT, amount INT, name STRING)
WITH ('connector' = 'blackhole')"""
QUERY = ("INSERT INTO sink SELECT o.order_id, o.cid, o.amount, c.name "
         "FROM orders o JOIN customers c ON o.cid = c.id")


def _tables(env, directory: str) -> None:
    env.execute_sql(ORDERS.format(path=os.path.join(directory, "orders")))
    env.execute_sql(CUSTOMERS.format(path=os.path.join(directory, "customers")))


def run(path: str, *, backend: str, interval_s: float, checkpoints: str,
        warmup: str | None) -> dict:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t0 = time.monotonic()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    settings = {
        "parallelism.default": "1",
        "execution.checkpointing.interval": f"{int(interval_s * 1000)} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": "file://" + checkpoints,
        "state.backend.type": backend,
        "state.backend.incremental": "true",
    }
    conf = env.get_config()
    for k, v in settings.items():
        conf.set(k, v)
    env.execute_sql(SINK)
    warm_s = None
    if warmup:
        _tables(env, warmup)
        w = env.execute_sql(QUERY)
        w.wait()
        warm_s = w.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
        env.execute_sql("DROP TABLE orders")
        env.execute_sql("DROP TABLE customers")
    _tables(env, path)
    t1 = time.monotonic()
    result = env.execute_sql(QUERY)
    result.wait()
    t2 = time.monotonic()
    net_ms = result.get_job_client().get_job_execution_result().result().get_net_runtime()
    return {"setup_s": t1 - t0, "job_s": t2 - t1, "net_runtime_s": net_ms / 1000,
            "warmup_net_runtime_s": warm_s, "settings": settings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--warmup-csv")
    ap.add_argument("--backend", default="hashmap", choices=("hashmap", "rocksdb"))
    ap.add_argument("--interval-s", type=float, default=10.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="flink-chk-") as chk:
        out = run(args.csv, backend=args.backend, interval_s=args.interval_s, checkpoints=chk,
                  warmup=args.warmup_csv)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
