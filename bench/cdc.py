"""PostgreSQL CDC source: snapshot rate, change throughput and replication lag under a steady
pgbench write load, end to end into the exactly-once FileSink.

    .venv/bin/python bench/cdc.py [--scale S] [--tps T] [--seconds N]

A private PostgreSQL server (wal_level=logical) is started and stopped here; ``pgbench -i``
fills ``pgbench_accounts`` (100,000 rows per scale unit), ``_tellers`` and ``_branches``
(``pgbench_history`` has no primary key and is not captured). The job: PostgresCdcSource (2
subtasks: the stream + 4 snapshot splits) -> key_by -> pass-through (2) -> FileSink (2), 1 s
checkpoints, local runner. Phase 1 measures the snapshot (rows committed / time); phase 2 runs
``pgbench -R <tps>`` (TPC-B: 3 captured updates per transaction, each a -U/+U pair) and
samples the lag the source reports with every checkpoint. Throughput = changelog records the
source emitted during the load / seconds.

Writes cdc.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)

from jobs import add_results_dir, median, p99, write_results  # noqa: E402

TABLES = ["pgbench_accounts", "pgbench_tellers", "pgbench_branches"]


def source_records(store, job_id: str) -> list[tuple[float, int, list[dict]]]:
    """Per completed checkpoint: trigger time, records the source emitted so far, its lags."""
    out = []
    for c in store.list_checkpoints(job_id):
        if c.status not in ("COMPLETED", "SUBSUMED"):
            continue
        n, lags = 0, []
        for t in c.task_stats or ():
            counts = (t.get("records") or {}).get("cdc")
            if counts:
                n += int(counts[1])
            lags += list((t.get("source_lag") or {}).values())
        out.append((c.trigger_time.timestamp(), n, lags))
    return sorted(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--tps", type=int, default=300)
    ap.add_argument("--seconds", type=int, default=40)
    add_results_dir(ap)
    args = ap.parse_args(argv)

    # slot processes import the pass-through and the key function from tests/
    tests = os.path.join(os.path.dirname(HERE), "tests")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    from cdc_pipelines import PassThrough, table_key
    from pg_server import PostgresServer
    from pipelines import Background

    from airflow_checkpoint_provider.engine import CheckpointConfig, FileSink, Pipeline
    from airflow_checkpoint_provider.engine.connectors.postgres_cdc import PostgresCdcSource

    server = PostgresServer().start()
    root = tempfile.mkdtemp(prefix="bench-cdc-")
    try:
        url = server.create_database()
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(server.port), "PGUSER": "postgres"}
        db = dsn.rsplit("/", 1)[1]
        subprocess.run(["pgbench", "-i", "-q", "-s", str(args.scale), db], env=env, check=True,
                       capture_output=True)
        rows = 100_000 * args.scale + 10 * args.scale + args.scale
        load_before = os.getloadavg()

        p = Pipeline("bench-cdc", max_parallelism=64,
                     checkpoint=CheckpointConfig(interval_ms=1000, directory=os.path.join(root, "ckpt")),
                     metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
        (p.source(PostgresCdcSource(dsn, TABLES, snapshot_splits=4, buckets=256), uid="cdc",
                  parallelism=2)
          .key_by(table_key)
          .process(PassThrough(), uid="pass", parallelism=2)
          .sink(FileSink(os.path.join(root, "out")), uid="out"))
        t0 = time.time()
        bg = Background(p)
        job = bg.wait_running(timeout=300)
        # phase 1: the snapshot, until the source emitted every row
        while True:
            done = source_records(bg.store, job.job_id)
            if done and done[-1][1] >= rows:
                break
            time.sleep(0.5)
        snapshot_s = done[-1][0] - t0
        # phase 2: steady write load
        t_load = time.time()
        bench = subprocess.run(["pgbench", "-n", "-c", "4", "-j", "2", "-R", str(args.tps),
                                "-T", str(args.seconds), db], env=env, check=True,
                               capture_output=True, text=True)
        t_end = time.time()
        time.sleep(5)  # drain
        samples = source_records(bg.store, job.job_id)
        load_after = os.getloadavg()
        bg.request(job.job_id, "CANCEL")
        bg.result()
        during = [s for s in samples if t_load <= s[0] <= t_end]
        before = max((s for s in samples if s[0] <= t_load), key=lambda s: s[0])
        after = max((s for s in samples if s[0] <= t_end + 5), key=lambda s: s[0])
        lag_s = [max(lag["lag_seconds"] for lag in s[2]) for s in during if s[2]]
        lag_b = [max(lag["lag_bytes"] for lag in s[2]) for s in during if s[2]]
        tps = next((float(line.split("=")[1].split()[0]) for line in bench.stdout.splitlines()
                    if line.startswith("tps =")), None)
        result = {
            "command": "bench/cdc.py " + " ".join(argv or sys.argv[1:]),
            "scale": args.scale, "snapshot_rows": rows,
            "snapshot_rows_per_s": rows / snapshot_s if snapshot_s > 0 else None,
            "snapshot_s": snapshot_s, "target_tps": args.tps, "pgbench_tps": tps,
            "load_seconds": t_end - t_load,
            "changes_per_s": (after[1] - before[1]) / (after[0] - before[0]),
            "lag_seconds_median": median(lag_s), "lag_seconds_p99": p99(lag_s),
            "lag_seconds_max": max(lag_s, default=None),
            "lag_bytes_median": median(lag_b), "lag_bytes_max": max(lag_b, default=None),
            "checkpoints_sampled": len(during),
            "load_average_before": load_before, "load_average_after": load_after,
        }
        print(result)
        print("wrote", write_results(args.results_dir, "cdc.json", result))
        return 0
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
