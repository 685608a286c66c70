"""Throughput and commit latency of the exactly-once sinks.

    .venv/bin/python bench/sinks.py [--records N] [--reps R]

Each sink gets the same job: generator (Arrow batches of ``id``, ``key``, ``value``; 2
subtasks) -> sink (2 subtasks), 1 s checkpoints, local runner. Throughput = records /
(wall time - start-up of the slots). Commit latency = how long the sink's ``commit`` (on the
checkpoint's completion) takes per subtask and checkpoint, timed inside the slot processes.
Sinks: ``FileSink`` (JSON lines), ``PostgresSink`` (a private PostgreSQL server started and
stopped here; skipped without its binaries), ``DeltaSink`` and ``IcebergSink`` (SQL catalog on
SQLite, local warehouse). Repetitions are interleaved sink by sink.

Writes sinks.json.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                                "support"))

from jobs import add_results_dir, median, p99, write_results  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.base import Sink  # noqa: E402


class TimedSink(Sink):
    """Delegates to ``sink``; its writers append each commit's duration to ``log_dir``."""

    def __init__(self, sink: Sink, log_dir: str) -> None:
        self.sink, self.log_dir = sink, log_dir

    def create_writer(self, ctx):
        writer = self.sink.create_writer(ctx)
        commit, path = writer.commit, os.path.join(self.log_dir, f"{os.getpid()}-{ctx.subtask_index}.jsonl")

        def timed_commit(transactions):
            t0 = time.perf_counter()
            commit(transactions)
            if transactions:
                with open(path, "a") as f:
                    f.write(json.dumps((time.perf_counter() - t0) * 1000) + "\n")

        writer.commit = timed_commit
        return writer

    def check_restored_transactions(self, transactions, *, location):
        self.sink.check_restored_transactions(transactions, location=location)

    def describe(self) -> str:
        return self.sink.describe()


def make_sink(kind: str, root: str, pg_url: str | None):
    if kind == "file":
        return FileSink(os.path.join(root, "out"))
    if kind == "delta":
        from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

        return DeltaSink(os.path.join(root, "delta"))
    if kind == "iceberg":
        from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink

        return IcebergSink("bench.rows", catalog={"type": "sql", "uri": f"sqlite:///{root}/cat.db",
                                                  "warehouse": f"file://{root}/wh"})
    if kind == "postgres":
        import psycopg
        from sqlalchemy.engine import make_url

        from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

        with psycopg.connect(make_url(pg_url).set(drivername="postgresql")
                             .render_as_string(hide_password=False), autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS rows")
            conn.execute("CREATE TABLE rows (id bigint, key text, value bigint)")
        return PostgresSink(pg_url, "rows", ["id", "key", "value"])
    raise ValueError(kind)


def timed_job(name: str, root: str, build) -> tuple:
    """A fresh pipeline ``name`` under ``root`` (batches of 4096, 1 s checkpoints, no
    restarts, SQLite metadata DB), defined by ``build(pipeline, log_dir)`` (which wraps its
    sink in ``TimedSink(..., log_dir)``) and run; returns ``(result, wall seconds, start-up
    seconds of the slots, commit durations in ms)``."""
    log_dir = os.path.join(root, "commits")
    os.makedirs(log_dir)
    p = Pipeline(name, batch_size=4096,
                 checkpoint=CheckpointConfig(interval_ms=1000, directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    build(p, log_dir)
    t0 = time.perf_counter()
    result = p.run()
    wall = time.perf_counter() - t0
    startup = (result.extra.get("startup_seconds") or [0.0])[0]
    commits = [json.loads(line) for f in glob.glob(os.path.join(log_dir, "*.jsonl"))
               for line in open(f)]
    return result, wall, startup, commits


@contextlib.contextmanager
def postgres_url(kinds: list[str]):
    """The URL of a database on a private PostgreSQL server (stopped on exit) if ``kinds``
    names ``postgres``; without the server binaries it is removed from ``kinds`` (said so)
    and the URL is None."""
    server = None
    if "postgres" in kinds:
        from pg_server import PostgresServer, pg_bin

        if pg_bin() is None:
            print("PostgreSQL binaries not found: skipping PostgresSink")
            kinds.remove("postgres")
        else:
            server = PostgresServer().start()
    try:
        yield server.create_database() if server is not None else None
    finally:
        if server is not None:
            server.stop()


def summarize(runs: list[dict], kinds: list[str], rate: str) -> dict:
    """Per sink: the median of ``rate``, the median commit p50 and the largest p99."""
    return {k: {rate: median([r[rate] for r in runs if r["sink"] == k]),
                "commit_ms_p50": median([r["commit_ms_p50"] for r in runs if r["sink"] == k
                                         and r["commit_ms_p50"] is not None]),
                "commit_ms_p99": max((r["commit_ms_p99"] for r in runs if r["sink"] == k
                                      and r["commit_ms_p99"] is not None), default=None)}
            for k in kinds}


def run(kind: str, records: int, pg_url: str | None) -> dict:
    root = tempfile.mkdtemp(prefix=f"bench-sink-{kind}-")
    try:
        def build(p, log_dir):
            (p.source(GeneratorSource(records, num_keys=1000, seed=3, splits=2, arrow=True),
                      uid="gen", parallelism=2)
              .sink(TimedSink(make_sink(kind, root, pg_url), log_dir), uid="out", parallelism=2))

        result, wall, startup, commits = timed_job(f"sink-{kind}", root, build)
        return {"sink": kind, "records": records, "wall_s": round(wall, 3),
                "rows_per_s": round(records / max(1e-9, wall - startup)),
                "commits": len(commits), "commit_ms_p50": median(commits),
                "commit_ms_p99": p99(commits), "checkpoints": result.checkpoints_completed}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sinks", default="file,postgres,delta,iceberg")
    add_results_dir(parser)
    args = parser.parse_args(argv)
    kinds = args.sinks.split(",")
    runs = []
    with postgres_url(kinds) as pg_url:
        for rep in range(args.reps):
            for kind in kinds:
                r = run(kind, args.records, pg_url)
                r["rep"] = rep
                print(f"{kind:8s} rep {rep}: {r['rows_per_s']:,} rows/s, commit p50 "
                      f"{r['commit_ms_p50']} ms p99 {r['commit_ms_p99']} ms "
                      f"({r['commits']} commits)", flush=True)
                runs.append(r)
    path = write_results(args.results_dir, "sinks.json",
                         {"records": args.records, "reps": args.reps, "runs": runs,
                          "summary": summarize(runs, kinds, "rows_per_s"),
                          "command": "bench/sinks.py " + " ".join(argv or sys.argv[1:])})
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
