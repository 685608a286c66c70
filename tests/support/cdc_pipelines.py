"""Helpers of the PostgreSQL CDC tests and benchmark (importable by slot processes): a CDC
pipeline into a FileSink, a writer process that changes the source table, and the replay of
a changelog into a table image."""

from __future__ import annotations

import os
import random
import re
import time
from collections import defaultdict

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot
from airflow_checkpoint_provider.engine.state.operator_state import entry_value


class PassThrough(KeyedProcessFunction):
    """Keyed exchange before the sink: every change of one key goes through one subtask, in
    order. ``kill_after``: SIGKILL this slot process after that many records (once, marker
    file ``kill_marker``)."""

    def __init__(self, kill_after: int | None = None, kill_marker: str | None = None,
                 delay_s: float = 0.0) -> None:
        self.kill_after, self.kill_marker, self.delay_s = kill_after, kill_marker, delay_s

    def open(self, ctx):
        self.seen = 0

    def process_element(self, record, ctx):
        self.seen += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if (self.kill_after is not None and self.seen >= self.kill_after
                and not os.path.exists(self.kill_marker)):
            open(self.kill_marker, "w").close()
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return record


def dsn(url: str) -> str:
    """The libpq form of a SQLAlchemy ``postgresql+<driver>://`` URL (what psycopg takes)."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def items_database(postgres_server, rows: int, modulo: int):
    """A fresh database with ``items(id, v, note)`` holding ``rows`` rows (``v = id % modulo``);
    yields its URL (a pytest fixture body: ``yield from items_database(...)``), then releases
    what is left in it (``PostgresServer.release``: its replication slots have server-wide
    names). In a test, tests/conftest.py releases it too, after the test's other fixtures."""
    import psycopg

    url = postgres_server.create_database()
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO items SELECT g, g %% %s, 'init' FROM generate_series(1, %s) g",
                     (modulo, rows))
    yield url
    postgres_server.release([url.rsplit("/", 1)[1]])


def fresh_processes(module: str):  # noqa: ANN201 - a multiprocessing context
    """A multiprocessing context for writer processes: never forked from this test process
    (its threads run jobs), but from a server that imported ``module`` once; a spawned
    process imported the engine again each, about 1 CPU second apiece."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([module])  # the first caller's list holds for the process
    return ctx


def start_writers(url: str, seconds: float, seeds: list[int],
                  stop_file: str | None = None) -> list:
    """One :func:`writer` process per seed (ids from ``1,000,000 * (seed + 1)``)."""
    ctx = fresh_processes(__name__)
    procs = [ctx.Process(target=writer, args=(dsn(url), seconds, s, 1_000_000 * (s + 1)),
                         kwargs={"stop_file": stop_file})
             for s in seeds]
    for p in procs:
        p.start()
    return procs


def table_key(record: dict) -> str:
    """``<table>:<first key column>`` of a pgbench changelog record (several tables)."""
    for column in ("aid", "tid", "bid"):
        if column in record:
            return f"{record['_table']}:{record[column]}"
    raise KeyError(f"no pgbench key column in {record}")


def cdc_pipeline(root: str, url: str, *, name: str = "cdc", tables=("items",),
                 source_parallelism: int = 2, parallelism: int = 2, snapshot_splits: int = 3,
                 buckets: int = 64, interval_ms: int = 200, kill_after: int | None = None,
                 out: str | None = None, delay_s: float = 0.0, **source_options) -> Pipeline:
    p = Pipeline(name, max_parallelism=64,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "savepoints"),
                                             allowed_savepoint_roots=(root,)),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=10, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    src = PostgresCdcSource(url, list(tables), snapshot_splits=snapshot_splits, buckets=buckets,
                            **source_options)
    (p.source(src, uid="cdc", parallelism=source_parallelism)
      .key_by("id")
      .process(PassThrough(kill_after, os.path.join(root, "killed"), delay_s), uid="pass",
               parallelism=parallelism)
      .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def stream_lsn(location: str) -> int | None:
    """The stream split's LSN recorded in the CDC source's state (uid ``cdc``) of a snapshot."""
    snap = load_snapshot(location, check_hmac=False).operators["cdc"]
    for sub in snap["subtasks"]:
        for e in sub["operator_state"]:
            for entry in entry_value(e) or []:
                if isinstance(entry, dict) and entry.get("split") == "stream" and entry["position"]:
                    return entry["position"]["lsn"]
    return None


def committed_in_order(directory: str) -> list[dict]:
    """FileSink output in commit order: jobs in the order they wrote, then checkpoint ids
    (every change of one key is in one subtask's file per checkpoint, in emission order)."""
    files = []
    for name in os.listdir(directory):
        m = re.fullmatch(r"part-.*~(.+)~c(\d+)~s(\d+)\.jsonl", name)
        if m:
            files.append((m.group(1), int(m.group(2)), name))
    first = defaultdict(lambda: float("inf"))
    for job, _, name in files:
        first[job] = min(first[job], os.path.getmtime(os.path.join(directory, name)))
    rows = []
    import json

    for _job, _chk, name in sorted(files, key=lambda f: (first[f[0]], f[1], f[2])):
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f)
    return rows


def replay(rows: list[dict], key: str = "id") -> dict:
    """Apply a changelog per key; a retraction must find the row it removes, an insert must
    not find one (an exact changelog, not only an eventually right one)."""
    table: dict = {}
    for r in rows:
        op, k = r["_op"], r[key]
        row = {c: v for c, v in r.items() if not c.startswith("_")}
        if op in ("+I",):
            assert k not in table, f"+I of key {k} that is present: {r}"
            table[k] = row
        elif op == "+U":
            assert k not in table, f"+U of key {k} without its -U: {r}"
            table[k] = row
        elif op in ("-U", "-D"):
            assert k in table, f"{op} of key {k} that is absent: {r}"
            del table[k]
    return table


def source_table(url: str, table: str = "items") -> dict:
    import psycopg

    with psycopg.connect(re.sub(r"^postgresql\+\w+://", "postgresql://", url)) as conn:
        cols = None
        out = {}
        cur = conn.execute(f"SELECT * FROM {table}")
        cols = [d.name for d in cur.description]
        for row in cur:
            rec = dict(zip(cols, row, strict=True))
            out[rec["id"]] = rec
        return out


def writer(url: str, seconds: float, seed: int, start_id: int, table: str = "items",
           stop_file: str | None = None) -> int:
    """Random inserts, updates (some changing the key) and deletes in small transactions for
    ``seconds`` (or until ``stop_file`` exists); returns how many transactions committed."""
    import psycopg

    rng = random.Random(seed)
    n = 0
    next_id = start_id
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        while time.monotonic() < deadline and not (stop_file and os.path.exists(stop_file)):
            try:
                _one_transaction(conn, rng, table, seed, n, next_id)
            except psycopg.errors.DeadlockDetected:
                continue
            next_id += 8
            n += 1
            time.sleep(rng.random() * 0.01)
    return n


def _one_transaction(conn, rng, table, seed, n, next_id) -> None:
    with conn.transaction():
        for _ in range(rng.randint(1, 4)):
            what = rng.random()
            if what < 0.4:
                conn.execute(f"INSERT INTO {table} (id, v, note) VALUES (%s, %s, %s)",
                             (next_id, rng.randint(0, 1000), f"w{seed}"))
                next_id += 1
            elif what < 0.75:
                conn.execute(f"UPDATE {table} SET v = v + 1, note = %s WHERE id = "
                             f"(SELECT id FROM {table} ORDER BY random() LIMIT 1)",
                             (f"u{seed}-{n}",))
            elif what < 0.8:
                conn.execute(f"UPDATE {table} SET id = %s WHERE id = "
                             f"(SELECT id FROM {table} ORDER BY random() LIMIT 1)",
                             (next_id,))
                next_id += 1
            else:
                conn.execute(f"DELETE FROM {table} WHERE id = "
                             f"(SELECT id FROM {table} ORDER BY random() LIMIT 1)")
