"""Issue 36, item 2, the long run (manual: ``python tests/support/soak_fenced_postgres.py
[MINUTES]``, default 10): a blue-green into two PostgreSQL 2PC sinks at parallelism 3 with
1 s checkpoints, against a server with ``max_prepared_transactions=100``.

Blue (unfenced) publishes into tables ``a`` and ``b``; green restores blue's savepoint and
runs fenced next to it for MINUTES (the old code exhausted the server in ~20 s and took
blue down). The prepared transactions are sampled every second. Then the cut-over: blue
stops with a savepoint, the fenced green is cancelled, green restarts unfenced from blue's
final savepoint and runs the rest of the bounded input. Printed: the prepared-transaction
maximum, blue's and green's restarts, and for each table the rows, duplicates and missing
ids (both must be 0).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))  # tests/support/: the helper modules
TESTS = os.path.dirname(HERE)
# test_prepared_transactions_bounded's pipeline; the repository
sys.path[:0] = [HERE, os.path.join(TESTS, "integration", "engine", "connectors"),
                os.path.dirname(TESTS)]

RATE = 300  # records/s while blue and green overlap


def main(minutes: float) -> int:
    import psycopg
    from pg_server import PostgresServer
    from pipelines import Background
    from test_prepared_transactions_bounded import _pipeline

    from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

    n = int(RATE * (minutes * 60 + 120))
    server = PostgresServer().start()
    root = tempfile.mkdtemp(prefix="soak-fenced-")
    try:
        url = server.create_database()
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            for t in ("a", "b"):
                conn.execute(f"CREATE TABLE {t} (id bigint, key text, total bigint)")

        def build(name: str, rate: float | None):
            return _pipeline(root, url, name=name, num_records=n, rate=rate)

        def prepared() -> int:
            with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
                return conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]

        blue_bg = Background(build("blue", RATE))
        blue = blue_bg.wait_running(min_checkpoints=1, timeout=120)
        sp = blue_bg.request(blue.job_id, "SAVEPOINT")
        assert sp.status == "SUCCEEDED", sp.error
        green_bg = Background(build("green", RATE), restore=sp.result["location"],
                              fence_sinks=True)
        green = green_bg.wait_running(min_checkpoints=1, timeout=120)
        samples, end = [], time.monotonic() + minutes * 60
        while time.monotonic() < end:
            samples.append(prepared())
            time.sleep(1)
        store = blue_bg.store
        blue_rec, green_rec = store.get_job(blue.job_id), store.get_job(green.job_id)
        green_done = len([c for c in store.list_checkpoints(green.job_id)
                          if c.status in ("COMPLETED", "SUBSUMED")])
        print(f"overlap {minutes} min: prepared transactions max {max(samples)} (limit 100), "
              f"blue {blue_rec.status} attempt {blue_rec.attempt}, green {green_rec.status} "
              f"attempt {green_rec.attempt}, green checkpoints {green_done}", flush=True)
        final = blue_bg.request(blue.job_id, "STOP_WITH_SAVEPOINT", timeout=120)
        assert final.status == "SUCCEEDED", final.error
        assert green_bg.request(green.job_id, "CANCEL").status == "SUCCEEDED"
        green_bg.result()
        live = build("green", None).run(restore=final.result["location"])
        print(f"green live {live.status} after {live.restarts} restarts", flush=True)
        ok = live.status == "FINISHED" and max(samples) < 100
        with psycopg.connect(libpq_dsn(url)) as conn:
            for t in ("a", "b"):
                ids = Counter(i for (i,) in conn.execute(f"SELECT id FROM {t}").fetchall())
                dup = sum(c - 1 for c in ids.values() if c > 1)
                missing = sum(1 for i in range(n) if i not in ids)
                print(f"table {t}: {sum(ids.values())} rows of {n} records, {dup} duplicates, "
                      f"{missing} missing", flush=True)
                ok = ok and dup == 0 and missing == 0
        print(f"prepared transactions left: {prepared()}")
        return 0 if ok else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
