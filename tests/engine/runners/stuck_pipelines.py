"""A running-sum job whose first attempt has a subtask stuck in user code (importable by
slot processes and Spark Python workers: this directory is on their ``sys.path``)."""

from __future__ import annotations

import os
import sys
import time

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from pipelines import InjectedFailure, RunningSum  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)


class StuckOnce(RunningSum):
    """The first attempt that reaches a record gets stuck: subtask ``stuck`` notes its pid
    and attempt in ``marker`` and then loops in user code forever (no cancellation reaches
    it); with ``fail_others`` every other subtask of that same attempt raises on its next
    record, which fails the attempt while the stuck one keeps its process (and its Spark
    core). Later attempts run normally. (Not "attempt 0": on a loaded machine attempt 0
    may end in a start-up timeout before any record.)"""

    def __init__(self, marker: str, stuck: int = 1, fail_others: bool = True) -> None:
        super().__init__()
        self.marker, self.stuck, self.fail_others = marker, stuck, fail_others

    def open(self, ctx):
        super().open(ctx)
        self.subtask = ctx.subtask_index

    def _stuck_attempt(self) -> int | None:
        try:
            with open(self.marker) as f:
                return int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def process_element(self, record, ctx):
        if self.subtask == self.stuck and not os.path.exists(self.marker):
            with open(self.marker + ".tmp", "w") as f:
                f.write(f"{os.getpid()} {self.attempt}")
            os.replace(self.marker + ".tmp", self.marker)
            while True:
                time.sleep(0.05)
        if self.fail_others and self._stuck_attempt() == self.attempt:
            raise InjectedFailure(f"subtask {self.subtask}: subtask {self.stuck} is stuck")
        return super().process_element(record, ctx)


def stuck_pid(marker: str) -> int:
    with open(marker) as f:
        return int(f.read().split()[0])


def stuck_pipeline(
    root: str,
    *,
    num_records: int = 5000,
    num_keys: int = 30,
    seed: int = 3,
    fail_others: bool = True,
    restarts: int = 2,
    keyed_parallelism: int = 3,
) -> Pipeline:
    p = Pipeline(
        "stuck",
        max_parallelism=128,
        checkpoint=CheckpointConfig(interval_ms=200, directory=os.path.join(root, "ckpt")),
        restart_strategy=RestartStrategy.fixed_delay(attempts=restarts, delay_ms=0),
        metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
    )
    (
        p.source(
            GeneratorSource(
                num_records, num_keys=num_keys, seed=seed, splits=2, records_per_second=2000
            ),
            uid="gen",
            parallelism=1,
        )
        .key_by("key")
        .process(
            StuckOnce(os.path.join(root, "stuck.pid"), fail_others=fail_others),
            uid="sum",
            parallelism=keyed_parallelism,
        )
        .sink(FileSink(os.path.join(root, "out")), uid="out")
    )
    return p
