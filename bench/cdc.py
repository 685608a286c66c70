"""PostgreSQL CDC end to end into each sink: snapshot rate, replication lag under a steady
pgbench write load, and changes/s draining a backlog, into the exactly-once FileSink and the
PostgreSQL, Delta and Iceberg upsert sinks.

    .venv/bin/python bench/cdc.py [--sinks file,postgres,delta,iceberg] [--scale S]
                                  [--tps T] [--seconds N] [--backlog TX]

A private PostgreSQL server (wal_level=logical) is started and stopped here. Per sink, a
fresh database gets ``pgbench -i -s S`` and the job captures ``pgbench_accounts``
(100,000 rows per scale unit; key ``aid``): PostgresCdcSource (2 subtasks: the stream + 4
snapshot splits) -> key_by(aid) -> pass-through (2) -> sink (2), 1 s checkpoints, local
runner. The upsert sinks use ``mode="upsert", key=["aid"]`` (PostgreSQL: a table in another
database of the same server; Iceberg: a SQL catalog on SQLite, local warehouse).

1. **Snapshot**: rows into the sink / time from submission to the completed checkpoint that
   holds every row (start-up included).
2. **Steady load**: ``pgbench -R <tps>`` for N seconds (TPC-B: one captured update of an
   account per transaction, a ``-U``/``+U`` pair); the lag the source reports with every
   checkpoint is sampled (its pace depends on the sink: backpressure).
3. **Backlog**: the job stops with a savepoint, ``pgbench -t`` commits TX transactions, the
   job restores the savepoint; changes/s end to end = the backlog's changelog records
   after the last completed checkpoint holding at most a tenth of them / the time from that
   checkpoint's trigger until the sink's table shows the whole backlog (polled every 0.1 s;
   FileSink: until the checkpoint holding it completed). Delta and Iceberg apply an epoch
   when its checkpoint completes, PostgreSQL at the barrier (then ``COMMIT PREPARED``).

At the end the target is compared with the source table (row count and sum of balances).
Writes cdc.json (``runs``: one entry per sink).
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))
sys.path.insert(0, HERE)

from jobs import add_results_dir, median, p99, write_results  # noqa: E402

SINKS = ("file", "postgres", "delta", "iceberg")
COLUMNS = ["aid", "bid", "abalance", "filler"]


def source_records(store, job_id: str) -> list[tuple[float, int, list[dict], float]]:
    """Per completed checkpoint: trigger time, records the source emitted so far, its lags,
    completion time."""
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
        out.append((c.trigger_time.timestamp(), n, lags, c.complete_time.timestamp()))
    return sorted(out)


def _wait_records(store, job_id: str, at_least: int, timeout: float = 900, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = source_records(store, job_id)
        if done and done[-1][1] >= at_least:
            return done
        time.sleep(poll)
    raise TimeoutError(f"the source did not emit {at_least} records within {timeout} s")


def make_sink(kind: str, root: str, server):
    import psycopg

    from airflow_checkpoint_provider.engine import FileSink
    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
    from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

    if kind == "file":
        return FileSink(os.path.join(root, "out")), None
    if kind == "postgres":
        url = server.create_database()
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (aid int PRIMARY KEY, bid int, abalance int, filler text)")
        return PostgresSink(url, "t", COLUMNS, mode="upsert", key=["aid"]), url
    if kind == "delta":
        return DeltaSink(os.path.join(root, "delta"), mode="upsert", key=["aid"]), None
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/wh"}
    return IcebergSink("db.accounts", catalog=catalog, mode="upsert", key=["aid"]), catalog


def target_summary(kind: str, root: str, where) -> tuple[int, int] | None:
    """(rows, sum of abalance) of the sink's table (None for the FileSink's changelog)."""
    if kind == "file":
        return None
    if kind == "postgres":
        import psycopg

        with psycopg.connect(where.replace("+psycopg", "")) as conn:
            n, s = conn.execute("SELECT count(*), coalesce(sum(abalance), 0) FROM t").fetchone()
        return int(n), int(s)
    if kind == "delta":
        from deltalake import DeltaTable

        t = DeltaTable(os.path.join(root, "delta")).to_pyarrow_table(columns=["abalance"])
    else:
        from pyiceberg.catalog import load_catalog

        t = load_catalog("db", **where).load_table("db.accounts").scan(
            selected_fields=("abalance",)).to_arrow()
    import pyarrow.compute as pc

    return t.num_rows, int(pc.sum(t.column("abalance")).as_py() or 0)


def run_one(kind: str, server, args) -> dict:
    import psycopg
    from cdc_pipelines import PassThrough
    from pipelines import Background

    from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline
    from airflow_checkpoint_provider.engine.client import cdc_object_name, drop_cdc_slot
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource

    root = tempfile.mkdtemp(prefix=f"bench-cdc-{kind}-")
    url = server.create_database()
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(server.port), "PGUSER": "postgres"}
    db = dsn.rsplit("/", 1)[1]
    subprocess.run(["pgbench", "-i", "-q", "-s", str(args.scale), db], env=env, check=True,
                   capture_output=True)
    rows = 100_000 * args.scale
    sink, where = make_sink(kind, root, server)
    name = f"bench-cdc-{kind}"

    def pipeline() -> Pipeline:
        p = Pipeline(name, max_parallelism=64,
                     checkpoint=CheckpointConfig(interval_ms=1000, directory=os.path.join(root, "ckpt"),
                                                 savepoint_directory=os.path.join(root, "sp"),
                                                 allowed_savepoint_roots=(root,)),
                     metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
        (p.source(PostgresCdcSource(dsn, ["pgbench_accounts"], snapshot_splits=4, buckets=256),
                  uid="cdc", parallelism=2)
          .key_by("aid")
          .process(PassThrough(), uid="pass", parallelism=2)
          .sink(sink, uid="out", parallelism=2))
        return p

    try:
        load = [os.getloadavg()]
        # 1. the snapshot
        t0 = time.time()
        bg = Background(pipeline())
        job = bg.wait_running(timeout=300)
        done = _wait_records(bg.store, job.job_id, rows)
        snapshot_s = done[-1][0] - t0
        # 2. steady write load
        load.append(os.getloadavg())
        t_load = time.time()
        bench = subprocess.run(["pgbench", "-n", "-c", "4", "-j", "2", "-R", str(args.tps),
                                "-T", str(args.seconds), db], env=env, check=True,
                               capture_output=True, text=True)
        t_end = time.time()
        time.sleep(5)  # drain
        samples = source_records(bg.store, job.job_id)
        during = [s for s in samples if t_load <= s[0] <= t_end]
        before = max((s for s in samples if s[0] <= t_load), key=lambda s: s[0])
        after = max((s for s in samples if s[0] <= t_end + 5), key=lambda s: s[0])
        lag_s = [max(lag["lag_seconds"] for lag in s[2]) for s in during if s[2]]
        lag_b = [max(lag["lag_bytes"] for lag in s[2]) for s in during if s[2]]
        tps = next((float(line.split("=")[1].split()[0]) for line in bench.stdout.splitlines()
                    if line.startswith("tps =")), None)
        # 3. a backlog: stop with a savepoint, write, restore and drain
        req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False}, timeout=300)
        assert req.status == "SUCCEEDED", req.error
        bg.result(timeout=300)
        per_client = max(1, args.backlog // 4)
        subprocess.run(["pgbench", "-n", "-c", "4", "-j", "2", "-t", str(per_client), db],
                       env=env, check=True, capture_output=True)
        backlog = 2 * 4 * per_client  # one account update per transaction: -U and +U
        load.append(os.getloadavg())
        t_restore = time.time()
        bg = Background(pipeline(), restore=req.result["location"])
        job = bg.wait_running(timeout=300)
        done = _wait_records(bg.store, job.job_id, backlog, poll=0.1)
        last = next(s for s in done if s[1] >= backlog)
        # from the last checkpoint holding at most a tenth of the backlog (the first one
        # may already hold more) to the moment the sink's table shows all of it (FileSink:
        # the completion of the checkpoint holding it)
        first = ([s for s in done if s[1] <= backlog // 10][-1:] or done[:1])[0]
        with psycopg.connect(dsn) as conn:
            want = tuple(int(x) for x in conn.execute(
                "SELECT count(*), sum(abalance) FROM pgbench_accounts").fetchone())
        deadline = time.monotonic() + 120
        while True:
            got = target_summary(kind, root, where)
            if got in (None, want) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        t_in_target = last[3] if got is None else time.time()
        # None: the first checkpoint already held the whole backlog (see backlog_s_from_restore)
        drain_rate = ((backlog - first[1]) / (t_in_target - first[0])
                      if first[1] < backlog else None)
        bg.request(job.job_id, "CANCEL")
        bg.result(timeout=300)
        load.append(os.getloadavg())
        result = {
            "sink": kind, "snapshot_rows": rows,
            "snapshot_rows_per_s": rows / snapshot_s if snapshot_s > 0 else None,
            "snapshot_s": snapshot_s, "target_tps": args.tps, "pgbench_tps": tps,
            "load_seconds": t_end - t_load,
            # every record of the load (drained within 5 s) over the load's duration
            "changes_per_s_under_load": (after[1] - before[1]) / (t_end - t_load),
            "lag_seconds_median": median(lag_s), "lag_seconds_p99": p99(lag_s),
            "lag_seconds_max": max(lag_s, default=None),
            "lag_bytes_median": median(lag_b), "lag_bytes_max": max(lag_b, default=None),
            "checkpoints_sampled": len(during),
            "backlog_changes": backlog, "backlog_changes_per_s": drain_rate,
            "backlog_in_target_s": t_in_target - first[0],
            "backlog_emitted_s": last[0] - first[0],
            "backlog_s_from_restore": t_in_target - t_restore,
            "target_caught_up_s_after_checkpoint": None if got is None else t_in_target - last[3],
            "target_matches_source": None if got is None else got == want,
            "target": got, "source": want,
            "load_averages": load,
        }
        print(result, flush=True)
        drop_cdc_slot(dsn, cdc_object_name(name), cdc_object_name(name))
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sinks", default=",".join(SINKS))
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--tps", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--backlog", type=int, default=25_000,
                    help="pgbench transactions written while the job is stopped")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    sinks = args.sinks.split(",")
    if not set(sinks) <= set(SINKS):
        ap.error(f"--sinks: one or more of {', '.join(SINKS)}")

    # slot processes import the pass-through from tests/
    tests = os.path.join(os.path.dirname(HERE), "tests", "support")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    from pg_server import PostgresServer

    server = PostgresServer().start()
    try:
        runs = {kind: run_one(kind, server, args) for kind in sinks}
    finally:
        server.stop()
    result = {"command": "bench/cdc.py " + " ".join(argv or sys.argv[1:]), "scale": args.scale,
              "cpu_count": os.cpu_count(), "runs": runs}
    print("wrote", write_results(args.results_dir, "cdc.json", result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
