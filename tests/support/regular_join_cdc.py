"""PostgreSQL CDC of ``orders`` and ``customers`` -> regular LEFT JOIN -> PostgreSQL upsert
sink (importable by slot processes), a writer process for both tables, and the expected
target (``SELECT ... FROM orders LEFT JOIN customers``)."""

from __future__ import annotations

import os
import random
import re
import time

from cdc_pipelines import PassThrough

from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

COLUMNS = ["order_id", "cid", "amount", "name"]
CUSTOMERS = 60  # ids 0..59; the writers insert and delete them
EXPECTED = ("SELECT o.id, o.cid, o.amount, c.name FROM orders o "
            "LEFT JOIN customers c ON c.id = o.cid")


def dsn(url: str) -> str:
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def create_tables(url: str, orders: int) -> None:
    import psycopg

    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id bigint PRIMARY KEY, name text)")
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, cid bigint, amount int)")
        # the join key of orders (cid) is not its primary key: its -U/-D must carry it
        conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(0, 39) g")
        conn.execute("INSERT INTO orders SELECT g, g %% %s, g %% 100 FROM generate_series(1, %s) g",
                     (CUSTOMERS, orders))


def is_orders(record: dict) -> bool:
    return record["_table"].endswith(".orders")


def is_customers(record: dict) -> bool:
    return record["_table"].endswith(".customers")


def untagged(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "_table"}


def order_with_customer(order: dict | None, customer: dict | None) -> dict:
    assert order is not None  # a left join: every output row has its order
    return {"order_id": order["id"], "cid": order["cid"], "amount": order["amount"],
            "name": customer["name"] if customer else None}


def join_pipeline(root: str, url: str, target_url: str, *, name: str = "cdc-join",
                  kill_after: int | None = None, backend: str = "heap") -> Pipeline:
    p = Pipeline(name, max_parallelism=64,
                 checkpoint=CheckpointConfig(interval_ms=300, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "savepoints"),
                                             allowed_savepoint_roots=(root,)),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=10, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                 state_backend=backend)
    src = p.source(PostgresCdcSource(url, ["orders", "customers"], snapshot_splits=2,
                                     buckets=16), uid="cdc", parallelism=2)
    orders = src.filter(is_orders, uid="orders").map(untagged, uid="orders-rows")
    customers = src.filter(is_customers, uid="customers").map(untagged, uid="customer-rows")
    # parallelism 1: the CDC path on one join subtask (an order whose cid changes reaches the
    # sink retracted then inserted, in order); a parallel join behind the upsert materializer
    # is tested in connectors/test_upsert_materializer_postgres.py
    (orders.key_by("cid")
           .regular_join(customers.key_by("id"), how="left", uid="rj", left_primary_key="id",
                         right_primary_key="id", fn=order_with_customer, parallelism=1)
           .key_by("order_id")
           .process(PassThrough(kill_after, os.path.join(root, "killed")), uid="pass",
                    parallelism=1)
           .sink(PostgresSink(target_url, "t", COLUMNS, mode="upsert", key=["order_id"]),
                 uid="upsert", parallelism=1))
    return p


def writer(url: str, seconds: float, seed: int, start_id: int) -> int:
    """Random transactions on both tables for ``seconds``: orders inserted, updated (amount
    and customer), deleted; customers inserted, renamed, deleted."""
    import psycopg

    rng = random.Random(seed)
    n, next_id = 0, start_id
    deadline = time.monotonic() + seconds
    pick = "(SELECT id FROM {} ORDER BY random() LIMIT 1)"
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        while time.monotonic() < deadline:
            try:
                with conn.transaction():
                    for _ in range(rng.randint(1, 3)):
                        x, c = rng.random(), rng.randrange(CUSTOMERS)
                        if x < 0.3:
                            conn.execute("INSERT INTO orders VALUES (%s, %s, %s)",
                                         (next_id, c, rng.randrange(100)))
                            next_id += 1
                        elif x < 0.55:
                            conn.execute("UPDATE orders SET cid = %s, amount = amount + 1 "
                                         f"WHERE id = {pick.format('orders')}", (c,))
                        elif x < 0.65:
                            conn.execute(f"DELETE FROM orders WHERE id = {pick.format('orders')}")
                        elif x < 0.8:
                            conn.execute("INSERT INTO customers VALUES (%s, %s) ON CONFLICT "
                                         "DO NOTHING", (c, f"c{c}-{seed}-{n}"))
                        elif x < 0.92:
                            conn.execute("UPDATE customers SET name = %s WHERE id = %s",
                                         (f"r{seed}-{n}", c))
                        else:
                            conn.execute("DELETE FROM customers WHERE id = %s", (c,))
            except psycopg.errors.DeadlockDetected:
                continue
            n += 1
            time.sleep(rng.random() * 0.01)
    return n


def rows(url: str, query: str) -> dict:
    import psycopg

    with psycopg.connect(dsn(url)) as conn:
        return {r[0]: tuple(r) for r in conn.execute(query)}
