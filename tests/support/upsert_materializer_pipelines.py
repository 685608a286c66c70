"""A regular join at parallelism 2 whose rows move between join keys, into a PostgreSQL
upsert sink (importable by slot processes), for tests/integration/engine/connectors/
test_upsert_materializer_postgres.py.

orders (the changelog of changelog_pipelines: every order inserted, updated once -- its user,
the join key, changes for 29 orders in 30 -- and deleted for two in three) LEFT JOIN users
(regular_join_model's users: upserts, key-only deletes, a third of the orders' users never
present) on ``user``, no ``fn``: ``right_fields=("name",)`` pads an order without a user,
so the sink gets every column. An order that changes user is retracted by the join subtask
of its old user and inserted by the one of its new user: the sink's key (``order``) gets
them from two subtasks, in no defined order. ``sink()`` puts an upsert materializer in
front (``materialize=None``); ``materialize=False`` shows what happens without one."""

from __future__ import annotations

import os
import re

from changelog_pipelines import Expand, Faulty, OrderEvents, _pipeline
from regular_join_model import users_source

from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

TABLE_DDL = ('CREATE TABLE t (id bigint, "order" bigint PRIMARY KEY, "user" text, '
             "amount int, version int, name text)")
COLUMNS = ("order", "user", "amount", "name")


def dsn(url: str) -> str:
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def create_target(url: str) -> None:
    import psycopg

    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute(TABLE_DDL)


def target_rows(url: str) -> dict:
    import psycopg

    with psycopg.connect(dsn(url)) as conn:
        return {r[0]: tuple(r) for r in conn.execute(
            'SELECT "order", "user", amount, name FROM t')}


def moving_join_pipeline(root: str, url: str, *, n: int, users: int, faults=None,
                         parallelism: int = 2, materialize: bool | None = None,
                         backend: str = "heap"):
    p = _pipeline(root, "moving-join", 150)
    p.state_backend = backend
    orders = (p.source(OrderEvents(n, splits=4, records_per_second=n / 3), uid="events",
                       parallelism=2)
               .flat_map(Expand(3), uid="expand")
               .key_by("order")
               .process(Faulty(faults), uid="faults", parallelism=2))
    people = p.source(users_source(users), uid="users")
    joined = orders.key_by("user").regular_join(
        people.key_by("user"), how="left", uid="rj", left_primary_key="order",
        right_primary_key="user", right_fields=("name",), parallelism=parallelism)
    joined.key_by("order").sink(PostgresSink(url, "t", mode="upsert", key=["order"]),
                                uid="upsert", parallelism=parallelism,
                                materialize_upserts=materialize)
    return p


def expected_rows(n: int, users: int) -> dict:
    from regular_join_model import expected_join

    out = {}
    for (order, user, amount, name), k in expected_join(n, users).items():
        assert k == 1
        out[order] = (order, user, amount, name)
    return out


def materialize_from_env() -> bool | None:
    """``CKPT_TEST_NO_MATERIALIZER=1``: run without the materializer (to see the test fail)."""
    return False if os.environ.get("CKPT_TEST_NO_MATERIALIZER") == "1" else None


# -- the operators' own counters (dropped retractions, expired rows) in metrics and stats ---
class GhostyOrders:
    """A ``GeneratorSource`` record function: orders ``{"o", "k"}``; every 5th record is a
    ``-D`` of an order never inserted (the join drops it and counts it)."""

    def __call__(self, i: int) -> dict:
        if i % 5 == 4:
            return {"o": -i, "k": i % 7, "_op": "-D"}
        return {"o": i, "k": i % 7}


def counting_join_pipeline(root: str, *, ttl_ms: int = 300):
    from airflow_checkpoint_provider.engine import (
        CheckpointConfig,
        GeneratorSource,
        Pipeline,
        RestartStrategy,
    )
    from airflow_checkpoint_provider.engine.connectors.discard import DiscardSink

    class Orders(GeneratorSource):
        def record(self, i: int) -> dict:
            return GhostyOrders()(i)

    class Customers(GeneratorSource):
        def record(self, i: int) -> dict:
            return {"c": i % 7, "name": f"n{i}"}

    p = Pipeline("counting-join", max_parallelism=64,
                 checkpoint=CheckpointConfig(interval_ms=200,
                                             directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=1, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    orders = p.source(Orders(None, splits=1, records_per_second=200), uid="orders")
    customers = p.source(Customers(7, splits=1), uid="customers")
    (orders.key_by("k")
           .regular_join(customers.key_by("c"), how="left", uid="rj", left_primary_key="o",
                         right_primary_key="c", state_ttl=ttl_ms)
           .sink(DiscardSink(), uid="out"))
    return p
