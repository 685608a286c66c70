"""Deterministic changelog streams for the retracting aggregate and the upsert sinks
(importable by slot processes), and the oracle that applies them to a dict per key.

The changelog is an ``orders`` table's: generator record ``i`` (split ``j = i % S``, its
``p = i // S``-th record) is step ``p % 3`` of order ``o = (p // 3) * S + j``: step 0 inserts
the order, step 1 updates it (``-U`` old, ``+U`` new: user and amount may change), step 2
deletes it for two orders in three. Every step of an order comes from one split, in order,
so any run, restore and parallelism produce the same changelog per order."""

from __future__ import annotations

import os
from collections import defaultdict

from pipelines import TEST_RESTARTS, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.generator import mix64

USERS = 30


class OrderEvents(GeneratorSource):
    """``{"id": i, "order": o, "step": s}`` (see the module docstring)."""

    def record(self, i: int) -> dict:
        s = self.num_splits
        j, p = i % s, i // s
        return {"id": i, "order": (p // 3) * s + j, "step": p % 3}


def order_row(seed: int, order: int, version: int) -> dict:
    h = mix64(seed * 1_000_003 + order * 7 + version)
    return {"order": order, "user": f"u{h % USERS}", "amount": (h >> 32) % 100,
            "version": version}


def changelog_of(event: dict, seed: int) -> list[dict]:
    """The changelog records of one order event."""
    o, step = event["order"], event["step"]
    if step == 0:
        return [{"_op": "+I", **order_row(seed, o, 0)}]
    if step == 1:
        return [{"_op": "-U", **order_row(seed, o, 0)}, {"_op": "+U", **order_row(seed, o, 1)}]
    if mix64(o) % 3 == 0:
        return []  # this order stays
    return [{"_op": "-D", **order_row(seed, o, 1)}]


class Expand:
    """flat_map: order event -> its changelog records (each carries the event id)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __call__(self, event: dict) -> list[dict]:
        return [{**r, "id": event["id"]} for r in changelog_of(event, self.seed)]


class Faulty(KeyedProcessFunction):
    """Passes records through; fires the fault plan's points (record ids, checkpoints)."""

    def __init__(self, faults: FaultPlan | None) -> None:
        self.faults = faults

    def open(self, ctx):
        self.info = {"attempt": ctx.attempt}

    def process_element(self, record, ctx):
        if self.faults:
            self.faults.maybe_fail("record", record["id"], self.info)
            self.faults.maybe_fail("kill", record["id"], self.info)
        return record

    def snapshot_state(self, checkpoint_id):
        if self.faults:
            self.faults.maybe_fail("snapshot", checkpoint_id, self.info)

    def notify_checkpoint_complete(self, checkpoint_id):
        if self.faults:
            self.faults.maybe_fail("notify", checkpoint_id, self.info)


def _pipeline(root: str, name: str, interval_ms: int | None) -> Pipeline:
    return Pipeline(name, max_parallelism=64,
                    checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                                directory=os.path.join(root, "ckpt")),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                    metadata_url="sqlite:///" + os.path.join(root, "meta.db"))


def orders_pipeline(root: str, sink, *, n: int, seed: int = 3, rate: float | None = None,
                    faults: FaultPlan | None = None, interval_ms: int | None = 150,
                    parallelism: int = 2) -> Pipeline:
    """The orders changelog, keyed by order, into ``sink`` (key ``order``): the fault
    operator is chained with the sink, so a ``notify`` point fires before its commit."""
    p = _pipeline(root, "orders-changelog", interval_ms)
    (p.source(OrderEvents(n, splits=4, records_per_second=rate), uid="events", parallelism=2)
      .flat_map(Expand(seed), uid="expand")
      .key_by("order")
      .process(Faulty(faults), uid="faults", parallelism=parallelism)
      .sink(sink, uid="out", parallelism=parallelism))
    return p


def per_user_pipeline(root: str, sink, *, n: int, seed: int = 3, rate: float | None = None,
                      faults: FaultPlan | None = None, interval_ms: int | None = 150,
                      parallelism: int = 2) -> Pipeline:
    """The orders changelog aggregated per user (count and total amount of the live
    orders: retractions), whose changelog goes into ``sink`` (key ``user``)."""
    p = _pipeline(root, "per-user", interval_ms)
    (p.source(OrderEvents(n, splits=4, records_per_second=rate), uid="events", parallelism=2)
      .flat_map(Expand(seed), uid="expand")
      .key_by("order")
      .process(Faulty(faults), uid="faults", parallelism=2)
      .key_by("user")
      .aggregate(uid="per_user", parallelism=parallelism, orders="count",
                 total=("sum", "amount"))
      .sink(sink, uid="out", parallelism=parallelism))
    return p


def expected_orders(n: int, seed: int = 3, splits: int = 4) -> dict[int, dict]:
    """The oracle: the changelog applied in id order to a dict per order."""
    src, table = OrderEvents(n, splits=splits), {}
    for i in range(n):
        for r in changelog_of(src.record(i), seed):
            row = {k: v for k, v in r.items() if k != "_op"}
            if r["_op"] in ("-U", "-D"):
                table.pop(r["order"], None)
            else:
                table[r["order"]] = {**row, "id": i}
    return table


def expected_per_user(n: int, seed: int = 3) -> dict[str, dict]:
    out: dict[str, dict] = defaultdict(lambda: {"orders": 0, "total": 0})
    for row in expected_orders(n, seed).values():
        out[row["user"]]["orders"] += 1
        out[row["user"]]["total"] += row["amount"]
    return dict(out)


def delete_without_order(record: dict) -> dict:
    """map: a -D record that lacks the sink's key column ``order``."""
    return {"_op": "-D", "user": record["key"]}


def as_update(record: dict) -> dict:
    """map: the record as a changelog ``+U`` row."""
    return {**record, "_op": "+U"}


def changelog_batch(batch):
    """map_batches: generator rows as a changelog keyed by ``key``: ``-D`` where
    ``value < 10`` (a tenth of the rows), else ``+U`` (the benchmark's change stream)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ops = pc.if_else(pc.less(batch.column("value"), 10), pa.scalar("-D"), pa.scalar("+U"))
    return batch.append_column("_op", ops)
