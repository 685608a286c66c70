"""PostgreSQL upsert pipelines shared by tests (importable by slot processes)."""

from __future__ import annotations

import os
import time

from pipelines import TEST_RESTARTS, RunningSum

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

#: the prepared transactions of the connection's database: ``pg_prepared_xacts`` lists the
#: whole server's, other tests' on the same worker's server among them
PREPARED_HERE = "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"


def sql(url: str, statement: str) -> list[tuple]:
    """Run one statement on ``url`` in autocommit mode; its rows (``[]`` without a result)."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


class Total(KeyedProcessFunction):
    """Per key the running total of ``value``: ``{id, key, total}`` per record."""

    def open(self, ctx):
        self.total = ctx.value_state("total", 0)

    def process_element(self, record, ctx):
        t = self.total.value() + record["value"]
        self.total.update(t)
        return {"id": record["id"], "key": ctx.current_key, "total": t}


def totals_pipeline(url: str, *, name: str, checkpoints: str, metadata_db: str,
                    sinks: dict[str, str], parallelism: int, num_records: int | None,
                    num_keys: int, seed: int, rate: float | None, interval_ms: int,
                    restarts: int, delay_ms: int) -> Pipeline:
    """Generated records -> per-key :class:`Total` -> one 2PC :class:`PostgresSink` per
    ``{uid: table}`` of ``sinks`` (columns ``id, key, total``), all at ``parallelism``."""
    p = Pipeline(name, max_parallelism=128,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms, directory=checkpoints),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=restarts,
                                                              delay_ms=delay_ms),
                 metadata_url="sqlite:///" + metadata_db)
    totals = (p.source(GeneratorSource(num_records, num_keys=num_keys, seed=seed,
                                       splits=parallelism, records_per_second=rate),
                       uid="gen", parallelism=parallelism)
              .key_by("key").process(Total(), uid="total", parallelism=parallelism))
    for uid, table in sinks.items():
        totals.sink(PostgresSink(url, table, ["id", "key", "total"]), uid=uid)
    return p


class SlowPrepareSink(PostgresSink):
    """A :class:`PostgresSink` whose pre-commit (the barrier: apply the epoch, PREPARE)
    first sleeps ``delay_s``: every checkpoint stays pending that long at least."""

    def __init__(self, *args, delay_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay_s = delay_s

    def create_writer(self, ctx):
        writer = super().create_writer(ctx)
        pre_commit, delay = writer.pre_commit, self.delay_s

        def slow_pre_commit(checkpoint_id):
            time.sleep(delay)
            return pre_commit(checkpoint_id)

        writer.pre_commit = slow_pre_commit
        return writer


def running_sum_upsert_pipeline(root: str, sink: PostgresSink, *, num_records: int,
                                num_keys: int, rate: float, interval_ms: int = 50,
                                seed: int = 7) -> Pipeline:
    """Per key the running count and sum, upserted into ``sink`` (key ``key``)."""
    p = Pipeline("running-sum-upsert", max_parallelism=64,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(num_records, num_keys=num_keys, seed=seed, splits=2,
                              records_per_second=rate), uid="gen", parallelism=1)
      .key_by("key")
      .process(RunningSum(), uid="sum", parallelism=1)
      .sink(sink, uid="out", parallelism=1))
    return p
