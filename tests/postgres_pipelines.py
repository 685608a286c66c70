"""PostgreSQL upsert pipelines shared by tests (importable by slot processes)."""

from __future__ import annotations

import os
import time

from pipelines import TEST_RESTARTS, RunningSum

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.postgres import PostgresSink


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
