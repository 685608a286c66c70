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


class StuckInAttemptZero(RunningSum):
    """Attempt 0 only: subtask ``stuck`` loops in user code from its first record on (it
    notes its pid in ``marker`` and then sleeps forever: no cancellation reaches it); with
    ``fail_others`` every other subtask raises on its next record once the marker exists,
    which fails the attempt while the stuck one keeps its process (and its Spark core)."""

    def __init__(self, marker: str, stuck: int = 1, fail_others: bool = True) -> None:
        super().__init__()
        self.marker, self.stuck, self.fail_others = marker, stuck, fail_others

    def open(self, ctx):
        super().open(ctx)
        self.subtask = ctx.subtask_index

    def process_element(self, record, ctx):
        if self.attempt == 0:
            if self.subtask == self.stuck:
                with open(self.marker + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.replace(self.marker + ".tmp", self.marker)
                while True:
                    time.sleep(0.05)
            if self.fail_others and os.path.exists(self.marker):
                raise InjectedFailure(f"subtask {self.subtask}: subtask {self.stuck} is stuck")
        return super().process_element(record, ctx)


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
            StuckInAttemptZero(os.path.join(root, "stuck.pid"), fail_others=fail_others),
            uid="sum",
            parallelism=keyed_parallelism,
        )
        .sink(FileSink(os.path.join(root, "out")), uid="out")
    )
    return p
