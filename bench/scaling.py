"""Scaling sheet: throughput by parallelism, cost by number of keys, network bytes per record.

    .venv/bin/python bench/scaling.py [--reps 1] [--records N] [--keys-list 10000,100000,1000000]

On the local runner (one slot process per subtask index), checkpoints every 1 s:

* **Parallelism**: the ``aggregate`` job (string keys, 100,000 keys) and the per-record
  ``running_sum`` job at parallelism 1 and 2: sustained records/s.
* **Standalone cluster** (``--cluster``, default on): the same two jobs at parallelism 2 on
  the Spark runner, against a Spark standalone master and 2 workers started on 127.0.0.1
  (``tests/support/spark_cluster.py``; one executor per worker, so each slot is in its own executor
  JVM's Python worker), stopped by PID afterwards.
* **Keys**: the ``aggregate`` job at parallelism 2 over 10k, 100k and 1M keys (string keys):
  sustained records/s and the largest checkpointed state.
* **Network bytes per record on HASH edges**: the bytes the loopback interface carried during
  the ``aggregate`` job at parallelism 2 (``/proc/net/dev``, so TCP/IP headers and the small
  control traffic are in), divided by the records that crossed between slot processes (each
  source subtask keeps the keys of its own slot in process: (p - 1) / p of the records cross).
  Next to it, the Arrow IPC payload per row of one batch, computed.

Writes scaling.json.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pyarrow as pa
from jobs import add_results_dir, median, run_job, write_results

from airflow_checkpoint_provider.engine import GeneratorSource


def loopback_bytes() -> int | None:
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "lo":
                    return int(rest.split()[0])  # received bytes
    except OSError:
        return None
    return None


def sustained(job: str, records: int, keys: int, parallelism: int, runner: str = "local",
              runner_opts: dict | None = None, **build) -> dict:
    before = loopback_bytes()
    r = run_job(job, None, records, keys, 1000, runner=runner, runner_opts=runner_opts,
                parallelism=parallelism, **build)
    after = loopback_bytes()
    r["sustained_records_per_s"] = r["records"] / (r["seconds"] - (r["startup_s"] or 0))
    r["loopback_bytes"] = None if before is None or after is None else after - before
    return r


def ipc_bytes_per_row(keys: int, int_keys: bool, rows: int = 8192) -> float:
    batch = GeneratorSource(None, num_keys=keys, seed=1, arrow=True, int_keys=int_keys) \
        .record_batch(np.arange(rows, dtype=np.int64))
    sink = pa.BufferOutputStream()  # an Arrow IPC stream (schema + the batch), as on the wire
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().size / rows


def cluster_runs(args) -> list[dict]:
    """Both jobs at parallelism 2 on a standalone master + 2 workers (2 cores, 1 GiB each):
    the cluster at ``--master`` if given, else one started (and stopped) here."""
    import contextlib
    import tempfile

    from airflow_checkpoint_provider.engine.client import spark_session

    with contextlib.ExitStack() as stack:
        master = args.master
        if not master:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "tests", "support"))
            from spark_cluster import StandaloneCluster

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-cluster-"))
            cluster = StandaloneCluster(tmp, memory="2g").start()
            stack.callback(cluster.stop)
            master = cluster.url
        spark = spark_session(master, "bench-scaling",
                              extra_conf={"spark.executor.memory": "1g", "spark.cores.max": "4"})
        stack.callback(spark.stop)
        return [run for rep in range(args.reps) for run in _cluster_rep(spark, args, rep)]


def _cluster_rep(spark, args, rep: int) -> list[dict]:
    out = []
    for job, records in (("aggregate", args.records), ("running_sum", args.running_sum_records)):
        extra = {"batch_size": 8192} if job == "aggregate" else {}
        r = sustained(job, records, 100_000, 2, runner="spark", runner_opts={"spark": spark},
                      **extra)
        # executors of the cluster's workers ran the job (not local mode); the status
        # tracker lists the driver too
        r["master"] = spark.sparkContext.master
        r["cluster_executors"] = len(spark.sparkContext._jsc.sc().statusTracker()
                                     .getExecutorInfos()) - 1
        out.append({"rep": rep, "kind": "cluster", "job": job, "parallelism": 2,
                    "keys": 100_000, **r})
        print(f"{job} p=2 on the standalone cluster: "
              f"{r['sustained_records_per_s']:,.0f} records/s", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--records", type=int, default=4_000_000, help="aggregate job records")
    ap.add_argument("--running-sum-records", type=int, default=400_000)
    ap.add_argument("--keys-list", default="10000,100000,1000000")
    ap.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=True,
                    help="also run on a 2-worker standalone cluster on 127.0.0.1")
    ap.add_argument("--master", default=None,
                    help="spark:// URL of a running standalone cluster for those runs "
                         "(default: start one on 127.0.0.1 for them)")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    keys_list = [int(k) for k in args.keys_list.split(",") if k]
    runs: list[dict] = []
    if args.cluster:
        runs += cluster_runs(args)
    for rep in range(args.reps):
        for job, records in (("aggregate", args.records),
                             ("running_sum", args.running_sum_records)):
            for p in (1, 2):
                extra = {"batch_size": 8192} if job == "aggregate" else {}
                r = sustained(job, records, 100_000, p, **extra)
                runs.append({"rep": rep, "kind": "parallelism", "job": job, "parallelism": p,
                             "keys": 100_000, **r})
                print(f"{job} p={p}: {r['sustained_records_per_s']:,.0f} records/s", flush=True)
        for keys in keys_list:
            r = sustained("aggregate", args.records, keys, 2, batch_size=8192)
            crossing = args.records / 2
            r["bytes_per_crossing_record"] = (r["loopback_bytes"] / crossing
                                             if r["loopback_bytes"] else None)
            runs.append({"rep": rep, "kind": "keys", "job": "aggregate", "parallelism": 2,
                         "keys": keys, **r})
            print(f"aggregate keys={keys}: {r['sustained_records_per_s']:,.0f} records/s, "
                  f"largest state {max(r['state_bytes'] or [0]):,} B, "
                  f"{r['bytes_per_crossing_record'] or 0:.1f} B per crossing record",
                  flush=True)
    summary: dict = {"records": args.records, "running_sum_records": args.running_sum_records,
                     "reps": args.reps, "parallelism": {}, "keys": {},
                     "ipc_bytes_per_row": {"string keys": ipc_bytes_per_row(100_000, False),
                                           "int64 keys": ipc_bytes_per_row(100_000, True)}}
    for job in ("aggregate", "running_sum"):
        for p in (1, 2):
            rs = [r for r in runs if r["kind"] == "parallelism" and r["job"] == job
                  and r["parallelism"] == p]
            summary["parallelism"][f"{job} p={p}"] = median(r["sustained_records_per_s"] for r in rs)
    for job in ("aggregate", "running_sum"):
        rs = [r for r in runs if r["kind"] == "cluster" and r["job"] == job]
        if rs:
            summary["parallelism"][f"{job} p=2, standalone cluster"] = median(
                r["sustained_records_per_s"] for r in rs)
    for keys in keys_list:
        rs = [r for r in runs if r["kind"] == "keys" and r["keys"] == keys]
        summary["keys"][str(keys)] = {
            "records_per_s": median(r["sustained_records_per_s"] for r in rs),
            "largest_state_bytes": max((max(r["state_bytes"] or [0]) for r in rs), default=None),
            "slowest_checkpoint_ms": max((max(r["durations_ms"] or [0]) for r in rs), default=None),
            "bytes_per_crossing_record": median(r["bytes_per_crossing_record"] for r in rs)}
    write_results(args.results_dir, "scaling.json", {"summary": summary, "runs": runs})
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
