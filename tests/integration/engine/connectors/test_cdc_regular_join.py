"""End to end: PostgreSQL CDC of two tables changed by concurrent writer processes ->
regular LEFT JOIN (orders keyed by customer, REPLICA IDENTITY FULL; customers by their
primary key, REPLICA IDENTITY DEFAULT: key-only deletes and ``-U`` rows) -> PostgreSQL upsert
sink by order id, with a slot SIGKILLed mid-run (restart from the latest checkpoint); once
the writers stopped and the job caught up, the target equals ``SELECT ... FROM orders LEFT
JOIN customers`` on the source, row for row."""

from __future__ import annotations

import os
import random
import time

import psycopg
import pytest
from cdc_pipelines import fresh_processes
from pipelines import Background
from regular_join_cdc import (
    COLUMNS,
    EXPECTED,
    create_tables,
    dsn,
    join_pipeline,
    rows,
    writer,
)

pytestmark = pytest.mark.slow
ORDERS = 1_500


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_cdc_left_join_into_an_upsert_sink_equals_the_sql_join(postgres_server, tmp_path,
                                                               backend):
    seed = int(os.environ.get("CKPT_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (CKPT_TEST_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    url, target_url = postgres_server.create_database(), postgres_server.create_database()
    create_tables(url, ORDERS)
    with psycopg.connect(dsn(target_url), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (order_id bigint PRIMARY KEY, cid bigint, amount int, "
                     "name text)")
    ctx = fresh_processes("regular_join_cdc")
    writers = [ctx.Process(target=writer, args=(dsn(url), 6.0, s, 1_000_000 * (i + 1)))
               for i, s in enumerate(rng.sample(range(1000), 2))]
    for w in writers:
        w.start()
    root = str(tmp_path)
    bg = Background(join_pipeline(root, url, target_url, name=f"cdc-join-{backend}",
                                  kill_after=rng.randint(300, 1_400),
                                  backend=backend))
    try:
        job = bg.wait_running(timeout=60)
        for w in writers:
            w.join(60)
            assert w.exitcode == 0, "a writer process failed"
        want = rows(url, EXPECTED)
        deadline = time.monotonic() + 60
        while (got := rows(target_url, f"SELECT {', '.join(COLUMNS)} FROM t")) != want:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        missing = {k: v for k, v in want.items() if got.get(k) != v}
        extra = sorted(set(got) - set(want))
        assert not missing and not extra, (
            f"seed {seed}: {len(missing)} rows differ or are missing (e.g. "
            f"{list(missing.items())[:3]} vs {[got.get(k) for k in list(missing)[:3]]}), "
            f"{len(extra)} extra (e.g. {extra[:3]})")
        assert os.path.exists(os.path.join(root, "killed")), "the slot was never killed"
        assert any(v[3] is None for v in want.values()), "no order without a customer"
        req = bg.request(job.job_id, "CANCEL")
        assert req.status == "SUCCEEDED", req.error
        bg.result(60)
    finally:
        for w in writers:
            if w.is_alive():
                w.kill()
