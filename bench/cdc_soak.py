"""CDC soak (issue 37 "Done when"): writers insert, update and delete across 3 tables for N
minutes while the job is SIGKILLed (driver, then a slot), cut over blue -> green, and
``items_a`` gets one schema change of each handled kind (ADD COLUMN ... DEFAULT, ALTER
COLUMN ... TYPE, DROP COLUMN); at the end every target equals its source table row for row.

    PYTHONPATH=$PWD .venv/bin/python bench/cdc_soak.py [--minutes 10] [--rows 1000]

One private PostgreSQL server (wal_level=logical). Source: ``items_a``, ``items_b``,
``items_c`` (id, v, note). One job: PostgresCdcSource of the 3 tables -> key_by(table:id) ->
pass-through -> per table a projection to (id, v, note) -> an upsert sink: ``items_a`` into
PostgreSQL (another database), ``items_b`` into Delta, ``items_c`` into Iceberg. Timeline
(fractions of the run): 0.15 driver SIGKILL, restart with restore="latest"; 0.3 the schema
changes; 0.5 blue-green cut-over (``ckpt cdc copy-slot`` blue -> green, blue stops with a
savepoint, green starts from it; upsert sinks cannot run fenced, so there is no validation
run); 0.6 a green slot SIGKILLs itself after 500 records. Then the writers stop, the job
catches up, the targets are compared with the sources (every row, every column) and the
job stops with a savepoint. Prints and writes ``cdc_soak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, HERE)

TABLES = ("items_a", "items_b", "items_c")
COLUMNS = ["id", "v", "note"]


def key(record: dict) -> str:
    return f"{record['_table']}:{record['id']}"


def project(record: dict) -> dict:
    """(id, v, note, _op) of a record: the targets keep the original columns."""
    out = {c: record.get(c) for c in COLUMNS}
    if out["v"] is not None:
        out["v"] = int(out["v"])
    out["_op"] = record["_op"]
    return out


def sinks(root: str, target_url: str) -> dict:
    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
    from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

    return {"items_a": PostgresSink(target_url, "t", COLUMNS, mode="upsert", key=["id"]),
            "items_b": DeltaSink(os.path.join(root, "delta"), mode="upsert", key=["id"]),
            "items_c": IcebergSink("db.items", catalog=_catalog(root), mode="upsert", key=["id"])}


def _catalog(root: str) -> dict:
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/wh"}


def build(root: str, url: str, target_url: str, name: str, kill_after: int | None = None):
    from cdc_pipelines import PassThrough

    from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource

    p = Pipeline(name, max_parallelism=64,
                 checkpoint=CheckpointConfig(interval_ms=1000, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "savepoints"),
                                             allowed_savepoint_roots=(root,)),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=20, delay_ms=500),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    rows = (p.source(PostgresCdcSource(url, list(TABLES), snapshot_splits=3, buckets=64),
                     uid="cdc", parallelism=2)
             .key_by(key)
             .process(PassThrough(kill_after, os.path.join(root, f"killed-{name}")), uid="pass",
                      parallelism=2))
    for table, sink in sinks(root, target_url).items():
        (rows.filter(lambda r, t=f"public.{table}": r["_table"] == t, uid=f"only-{table}")
             .map(project, uid=f"project-{table}")
             .key_by("id")
             .sink(sink, uid=f"upsert-{table}", parallelism=1))
    return p


DRIVER = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.path.insert(0, {here!r}); sys.path.insert(0, {tests!r})
from cdc_soak import build
build({root!r}, {url!r}, {target!r}, {name!r}, kill_after={kill_after}).run(restore={restore!r})
"""


def driver(root, url, target, name, restore=None, kill_after=None) -> subprocess.Popen:
    code = DRIVER.format(here=HERE, tests=os.path.join(ROOT, "tests", "support"), root=root, url=url,
                         target=target, name=name, restore=restore, kill_after=kill_after)
    log = open(os.path.join(root, f"{name}.log"), "ab")
    return subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [ROOT, os.environ.get("PYTHONPATH", "")])})


def running_job(store, name, timeout=900.0, *, after=None):
    """The RUNNING job of ``name`` that is not ``after`` (a killed job's row may still say
    RUNNING until it is declared LOST)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [j for j in store.list_jobs(job_name=name)
                if j.status == "RUNNING" and (after is None or j.job_id != after.job_id)]
        if jobs and any(c.status in ("COMPLETED", "SUBSUMED")
                        for c in store.list_checkpoints(jobs[0].job_id)):
            return jobs[0]
        time.sleep(0.5)
    raise RuntimeError(f"job {name} did not reach RUNNING with a checkpoint")


def request(store, job_id, action, timeout=180.0):
    rid = store.submit_control_request(job_id, action, {"drain": False} if "STOP" in action else {})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        req = store.get_control_request(rid)
        if req.status in ("SUCCEEDED", "FAILED"):
            if req.status == "FAILED":
                raise RuntimeError(f"{action}: {req.error}")
            return req.result
        time.sleep(0.2)
    raise RuntimeError(f"{action} not answered")


def source_rows(url: str, table: str) -> dict:
    import psycopg
    from cdc_pipelines import dsn

    with psycopg.connect(dsn(url)) as conn:
        return {i: {"id": i, "v": int(v), "note": n}
                for i, v, n in conn.execute(f"SELECT id, v, note FROM {table}")}


def target_rows(root: str, target_url: str, table: str) -> dict:
    if table == "items_a":
        import psycopg
        from cdc_pipelines import dsn

        with psycopg.connect(dsn(target_url)) as conn:
            rows = [dict(zip(COLUMNS, r, strict=True)) for r in conn.execute("SELECT id, v, note FROM t")]
    elif table == "items_b":
        from deltalake import DeltaTable

        rows = DeltaTable(os.path.join(root, "delta")).to_pyarrow_table(columns=COLUMNS).to_pylist()
    else:
        from pyiceberg.catalog import load_catalog

        rows = (load_catalog("db", **_catalog(root)).load_table("db.items")
                .scan(selected_fields=tuple(COLUMNS)).to_arrow().to_pylist())
    out = {r["id"]: {**r, "v": int(r["v"])} for r in rows}
    assert len(out) == len(rows), f"duplicate keys in the {table} target"
    return out


def compare(url, root, target) -> dict:
    out = {}
    for t in TABLES:
        src, dst = source_rows(url, t), target_rows(root, target, t)
        out[t] = {"source_rows": len(src), "target_rows": len(dst),
                  "missing": len(set(src) - set(dst)), "extra": len(set(dst) - set(src)),
                  "differing": sum(1 for k in set(src) & set(dst) if src[k] != dst[k])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()
    import psycopg
    from cdc_pipelines import dsn
    from pg_server import PostgresServer

    from airflow_checkpoint_provider.engine.client import (
        MetadataStore,
        cdc_object_name,
        copy_cdc_slot,
    )

    os.environ.setdefault("CKPT_HEARTBEAT_TIMEOUT_S", "5")  # a killed driver's job is LOST soon
    root = tempfile.mkdtemp(prefix="cdc-soak-")
    server = PostgresServer().start()
    procs: list = []
    events: list = []
    try:
        url, target = server.create_database(), server.create_database()
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            for t in TABLES:
                conn.execute(f"CREATE TABLE {t} (id bigint PRIMARY KEY, v int, note text)")
                conn.execute(f"INSERT INTO {t} SELECT g, g % 10, 'init' FROM generate_series(1, {args.rows}) g")
        with psycopg.connect(dsn(target), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, v bigint, note text)")
        store = MetadataStore("sqlite:///" + os.path.join(root, "meta.db"))
        seconds = args.minutes * 60
        t0 = time.monotonic()
        stop_file = os.path.join(root, "stop-writers")
        import multiprocessing as mp

        from cdc_pipelines import writer

        ctx = mp.get_context("spawn")
        writers = [ctx.Process(target=writer, args=(dsn(url), seconds, 100 + i, 1_000_000 * (i + 1)),
                               kwargs={"table": t, "stop_file": stop_file})
                   for i, t in enumerate(TABLES)]
        for w in writers:
            w.start()
        d = driver(root, url, target, "soak-blue")
        procs.append(d)
        blue = running_job(store, "soak-blue")
        events.append(("blue running", round(time.monotonic() - t0, 1)))

        def at(fraction):
            while time.monotonic() - t0 < fraction * seconds:
                time.sleep(0.5)

        at(0.15)
        d.send_signal(signal.SIGKILL)
        d.wait(30)
        events.append(("driver SIGKILLed", round(time.monotonic() - t0, 1)))
        time.sleep(float(os.environ.get("CKPT_HEARTBEAT_TIMEOUT_S", "10")) + 1)
        d = driver(root, url, target, "soak-blue", restore="latest")
        procs.append(d)
        blue = running_job(store, "soak-blue", after=blue)
        events.append(("blue restored from latest", round(time.monotonic() - t0, 1)))
        at(0.3)
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            conn.execute("ALTER TABLE items_a ADD COLUMN extra int DEFAULT 7")
            time.sleep(2)
            conn.execute("ALTER TABLE items_a ALTER COLUMN v TYPE bigint")
            time.sleep(2)
            conn.execute("ALTER TABLE items_a DROP COLUMN extra")
        events.append(("schema changes on items_a", round(time.monotonic() - t0, 1)))
        at(0.5)
        copy_cdc_slot(url, cdc_object_name("soak-blue"), cdc_object_name("soak-green"))
        final = request(store, blue.job_id, "STOP_WITH_SAVEPOINT")["location"]
        d.wait(120)
        d = driver(root, url, target, "soak-green", restore=final, kill_after=500)
        procs.append(d)
        green = running_job(store, "soak-green")
        events.append(("cut over to green", round(time.monotonic() - t0, 1)))
        at(1.0)
        open(stop_file, "w").close()
        for w in writers:
            w.join(60)
        events.append(("writers stopped", round(time.monotonic() - t0, 1)))
        deadline = time.monotonic() + 300
        result = compare(url, root, target)
        while time.monotonic() < deadline and any(
                r["missing"] or r["extra"] or r["differing"] for r in result.values()):
            time.sleep(2)
            result = compare(url, root, target)
        green = [j for j in store.list_jobs(job_name="soak-green") if j.status == "RUNNING"][0]
        request(store, green.job_id, "STOP_WITH_SAVEPOINT")
        d.wait(120)
        restarts = {j.job_name: j.job_id for j in store.list_jobs()}
        report = {"minutes": args.minutes, "events": events, "compare": result,
                  "green_killed_slot": os.path.exists(os.path.join(root, "killed-soak-green")),
                  "jobs": restarts}
        print(json.dumps(report, indent=1))
        with open(os.path.join(HERE, "cdc_soak.json"), "w") as f:
            json.dump(report, f, indent=1)
        ok = all(not (r["missing"] or r["extra"] or r["differing"]) for r in result.values())
        sys.exit(0 if ok else 1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


if __name__ == "__main__":
    main()
