"""Example bounded job that fails once, part-way, with no restarts of its own.

For showing (and testing) that an Airflow retry of ``SubmitCheckpointedJobOperator``
resumes from the failed job's latest completed checkpoint instead of recomputing: the first
job to reach record ``CKPT_EXAMPLE_FAIL_AT`` (default 1000) fails (a marker file in
``CKPT_EXAMPLE_DIR`` makes it fail once across jobs); the retry restores and finishes.
``CKPT_EXAMPLE_RECORDS`` (default 2000) records at ``CKPT_EXAMPLE_RATE`` (default 400) per
second, checkpoints every 300 ms.
"""

from __future__ import annotations

import os

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.examples import example_root
from airflow_checkpoint_provider.examples.versioned_sum import RunningSumV1


class FailOnce(RunningSumV1):
    def __init__(self, fail_at: int, marker: str) -> None:
        self.fail_at = fail_at
        self.marker = marker

    def process_element(self, record, ctx):
        if record["id"] == self.fail_at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                raise RuntimeError(f"injected failure at record {self.fail_at}")
        return super().process_element(record, ctx)


def build() -> Pipeline:
    root = example_root()
    os.makedirs(root, exist_ok=True)
    p = Pipeline("flaky-batch",
                 checkpoint=CheckpointConfig(interval_ms=300,
                                             directory=os.path.join(root, "checkpoints")),
                 restart_strategy=RestartStrategy.none())
    (p.source(GeneratorSource(int(os.environ.get("CKPT_EXAMPLE_RECORDS", "2000")), num_keys=20,
                              seed=7, splits=2,
                              records_per_second=float(os.environ.get("CKPT_EXAMPLE_RATE", "400"))),
              uid="generator", parallelism=1)
      .key_by("key")
      .process(FailOnce(int(os.environ.get("CKPT_EXAMPLE_FAIL_AT", "1000")),
                        os.path.join(root, "failed-once")), uid="running-sum", parallelism=1)
      .sink(FileSink(os.path.join(root, "output")), uid="file-sink"))
    return p
