"""Example job: a keyed running sum over a seeded generator, written exactly once to files.

Run it with ``ckpt run airflow_checkpoint_provider.examples.running_sum:build``. Options come
from environment variables so the same reference works from the CLI, spark-submit and Airflow:
``CKPT_EXAMPLE_DIR`` (root for checkpoints and output, default ``./demo-output``),
``CKPT_EXAMPLE_RECORDS`` (default 200000), ``CKPT_EXAMPLE_KEYS`` (default 1000).
"""

from __future__ import annotations

import os

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
)
from airflow_checkpoint_provider.examples import example_root


class RunningSum(KeyedProcessFunction):
    """Emit ``{"key", "count", "sum"}`` after every record of a key."""

    def open(self, ctx):
        self.sum = ctx.value_state("sum", 0)
        self.count = ctx.value_state("count", 0)

    def process_element(self, record, ctx):
        s = self.sum.value() + record["value"]
        c = self.count.value() + 1
        self.sum.update(s)
        self.count.update(c)
        return {"key": ctx.current_key, "count": c, "sum": s}


def build(root: str | None = None, *, num_records: int | None = None, num_keys: int | None = None,
          interval_ms: int = 500) -> Pipeline:
    root = example_root(root)
    num_records = num_records or int(os.environ.get("CKPT_EXAMPLE_RECORDS", "200000"))
    num_keys = num_keys or int(os.environ.get("CKPT_EXAMPLE_KEYS", "1000"))
    p = Pipeline("running-sum",
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "checkpoints")))
    (p.source(GeneratorSource(num_records, num_keys=num_keys, seed=42), uid="generator", parallelism=2)
      .key_by("key")
      .process(RunningSum(), uid="running-sum", parallelism=2)
      .sink(FileSink(os.path.join(root, "output")), uid="file-sink"))
    return p
