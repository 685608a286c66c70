"""Changes per second into each upsert sink (``mode="upsert"``, key ``key``).

    .venv/bin/python bench/upsert_sinks.py [--records N] [--keys K] [--reps R]

The job: generator (Arrow batches, 2 subtasks) -> ``map_batches`` turning each row into a
change of its key (``-D`` for a tenth of the rows, ``+U`` otherwise) -> ``key_by("key")`` ->
upsert sink (2 subtasks), 1 s checkpoints, local runner. Each checkpoint's changes are
compacted per key and applied in one transaction per subtask (Delta ``MERGE``, Iceberg
delete + append, PostgreSQL ``INSERT ... ON CONFLICT`` / ``DELETE`` in a prepared
transaction). Changes/s = changes / (wall time - start-up of the slots); commit latency as
in bench/sinks.py. The 1-minute load average is recorded before and after each run (the
machine may be shared).

Writes upsert_sinks.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this tree's package, not an installed copy
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))
sys.path.insert(0, HERE)

from changelog_pipelines import changelog_batch  # noqa: E402
from jobs import add_results_dir, median, p99, write_results  # noqa: E402
from sinks import TimedSink, postgres_url, summarize, timed_job  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    GeneratorSource,
)


def make_sink(kind: str, root: str, pg_url: str | None):
    if kind == "delta":
        from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

        return DeltaSink(os.path.join(root, "delta"), mode="upsert", key=["key"])
    if kind == "iceberg":
        from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink

        return IcebergSink("bench.latest", mode="upsert", key=["key"],
                           catalog={"type": "sql", "uri": f"sqlite:///{root}/cat.db",
                                    "warehouse": f"file://{root}/wh"})
    if kind == "postgres":
        import psycopg
        from sqlalchemy.engine import make_url

        from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

        with psycopg.connect(make_url(pg_url).set(drivername="postgresql")
                             .render_as_string(hide_password=False), autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS latest")
            conn.execute("CREATE TABLE latest (id bigint, key text PRIMARY KEY, value bigint)")
        return PostgresSink(pg_url, "latest", ["id", "key", "value"], mode="upsert", key=["key"])
    raise ValueError(kind)


def run(kind: str, records: int, keys: int, pg_url: str | None) -> dict:
    root = tempfile.mkdtemp(prefix=f"bench-upsert-{kind}-")
    try:
        def build(p, log_dir):
            (p.source(GeneratorSource(records, num_keys=keys, seed=3, splits=2, arrow=True),
                      uid="gen", parallelism=2)
              .map_batches(changelog_batch, uid="changes")
              .key_by("key")
              .sink(TimedSink(make_sink(kind, root, pg_url), log_dir), uid="out", parallelism=2))

        load_before = os.getloadavg()[0]
        result, wall, startup, commits = timed_job(f"upsert-{kind}", root, build)
        return {"sink": kind, "changes": records, "keys": keys, "wall_s": round(wall, 3),
                "changes_per_s": round(records / max(1e-9, wall - startup)),
                "commits": len(commits), "commit_ms_p50": median(commits),
                "commit_ms_p99": p99(commits), "checkpoints": result.checkpoints_completed,
                "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--sinks", default="postgres,delta,iceberg")
    add_results_dir(parser)
    args = parser.parse_args(argv)
    kinds = args.sinks.split(",")
    runs = []
    with postgres_url(kinds) as pg_url:
        for rep in range(args.reps):
            for kind in kinds:
                r = run(kind, args.records, args.keys, pg_url)
                r["rep"] = rep
                print(f"{kind:8s} rep {rep}: {r['changes_per_s']:,} changes/s, commit p50 "
                      f"{r['commit_ms_p50']} ms p99 {r['commit_ms_p99']} ms "
                      f"({r['commits']} commits, load {r['load_avg_1m']})", flush=True)
                runs.append(r)
    path = write_results(args.results_dir, "upsert_sinks.json",
                         {"records": args.records, "keys": args.keys, "reps": args.reps,
                          "runs": runs, "summary": summarize(runs, kinds, "changes_per_s"),
                          "cpu_count": os.cpu_count(),
                          "command": "bench/upsert_sinks.py " + " ".join(argv or sys.argv[1:])})
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
