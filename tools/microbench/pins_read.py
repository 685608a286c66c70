"""Cost of the held-checkpoint sweep's pins read (once per completed checkpoint): every
active pin (the read before ``pinned_locations``) against the pins of the candidate
locations only, with 1, 100 and 10,000 rows in ``savepoint_pins``, on SQLite and on a
private PostgreSQL (tests/support/pg_server.py). Median of 30 reads.

    PYTHONPATH=$PWD .venv/bin/python tools/microbench/pins_read.py

A maintainer's component benchmark (tools/microbench/README.md): it writes rows with the
metadata store's table model and times two of its queries.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import insert

from airflow_checkpoint_provider.engine.catalog import MetadataStore  # the internal store API
from airflow_checkpoint_provider.engine.catalog.models import SavepointPinRow

sys.path.insert(0, os.path.join(os.getcwd(), "tests", "support"))


def bench(url, n):
    store = MetadataStore(url)
    now = datetime.now(UTC)
    rows = [
        dict(
            location=f"/ckpt/job/other-{i}/chk-{i}",
            holder="h",
            reason=None,
            created_at=now,
            expires_at=now + timedelta(hours=1),
        )
        for i in range(n - 1)
    ]
    rows.append(
        dict(location="/ckpt/job/x/chk-7", holder="h", reason=None, created_at=now, expires_at=None)
    )
    with store.engine.begin() as conn:
        conn.execute(insert(SavepointPinRow), rows)
    cands = ["/ckpt/job/x/chk-7", "/ckpt/job/x/chk-8", "/ckpt/job/x/chk-9"]
    out = {}
    for label, fn in (
        (
            "old: all active pins",
            lambda: {p.location for p in store.list_savepoint_pins(active_at=datetime.now(UTC))},
        ),
        (
            "new: candidates only",
            lambda: store.pinned_locations(cands, active_at=datetime.now(UTC)),
        ),
    ):
        fn()
        ts = []
        for _ in range(30):
            start = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - start)
        out[label] = statistics.median(ts) * 1000
    store.close()
    return out


if __name__ == "__main__":
    from pg_server import PostgresServer

    pg = PostgresServer().start()
    try:
        for n in (1, 100, 10_000):
            d = tempfile.mkdtemp()
            for db, url in (
                ("sqlite", f"sqlite:///{d}/m.db"),
                ("postgresql", pg.create_database()),
            ):
                r = bench(url, n)
                print(
                    f"{db:10s} {n:6d} pins: " + ", ".join(f"{k} {v:.2f} ms" for k, v in r.items()),
                    flush=True,
                )
    finally:
        pg.stop()
