"""Join pipelines run twice, per-record and vectorized (importable by slot processes):
impressions and clicks from two out-of-order Arrow generators (the clicks' fields renamed
so that every output row names both records), joined by an interval join and by a
tumbling and a sliding window join with the default merged output, each written to its own
FileSink. The same pipeline with ``vectorized=True`` must commit the same rows."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
from join_pipelines import BOUND_MS, DISORDER_MS, KEYS, START_MS, STEP_MS
from pipelines import TEST_RESTARTS, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    CheckpointedFunction,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    SlidingWindows,
    TumblingWindows,
    WatermarkStrategy,
    read_committed,
)

N_IMPS, N_CLICKS = 6_000, 3_000
LOWER_MS, UPPER_MS = -50, 150
OUTPUTS = ("ij", "tw", "sw")


def impressions(rate: float | None = None, int_keys: bool = False) -> GeneratorSource:
    return GeneratorSource(N_IMPS, num_keys=KEYS, seed=11, splits=4, records_per_second=rate,
                           event_time_step_ms=STEP_MS, max_disorder_ms=DISORDER_MS,
                           start_ms=START_MS, arrow=True, int_keys=int_keys)


def clicks(rate: float | None = None, int_keys: bool = False) -> GeneratorSource:
    return GeneratorSource(N_CLICKS, num_keys=KEYS, seed=12, splits=4, records_per_second=rate,
                           event_time_step_ms=STEP_MS * N_IMPS / N_CLICKS,
                           max_disorder_ms=DISORDER_MS, start_ms=START_MS, arrow=True,
                           int_keys=int_keys)


def rename_clicks(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``id`` -> ``cid``, ``value`` -> ``cvalue``: the merged rows then carry both ids."""
    return batch.rename_columns([{"id": "cid", "value": "cvalue"}.get(n, n)
                                 for n in batch.schema.names])


class Faults(CheckpointedFunction):
    """A map_batches after the join (chained into the join's task) that fires the seeded
    failure points on the impression ids of the join's output."""

    def __init__(self, faults: FaultPlan | None) -> None:
        self.faults = faults

    def initialize_state(self, ctx):
        self.attempt = ctx.runtime.attempt

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.faults is not None and "id" in batch.schema.names:
            ids = set(batch.column("id").drop_null().to_pylist())
            for kind, point in sorted(self.faults.points):
                if point in ids:
                    self.faults.maybe_fail(kind, point, {"attempt": self.attempt})
        return batch


def vector_join_pipeline(root: str, *, vectorized: bool, name: str = "vjoins",
                         how: str = "full", state_backend: str = "heap",
                         faults: FaultPlan | None = None, rate: float | None = None,
                         parallelism: int = 2, join_parallelism: int = 2,
                         int_keys: bool = False, interval_ms: int = 150,
                         out: str | None = None, **checkpoint_options) -> Pipeline:
    out = out or root
    p = Pipeline(name, max_parallelism=128, state_backend=state_backend,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt"),
                                             **checkpoint_options),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    wm = (WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS, timestamp_field="ts")
          .with_emit_interval(20))
    imps = p.source(impressions(rate, int_keys), uid="imps", parallelism=parallelism,
                    watermarks=wm)
    clks = p.source(clicks(rate / 2 if rate else None, int_keys), uid="clicks",
                    parallelism=parallelism, watermarks=wm).map_batches(rename_clicks,
                                                                        uid="rename")
    (imps.key_by("key").interval_join(clks.key_by("key"), how=how)
         .between(LOWER_MS, UPPER_MS)
         .process(uid="ij", parallelism=join_parallelism, vectorized=vectorized)
         .map_batches(Faults(faults), uid="faults")
         .sink(FileSink(os.path.join(out, "ij")), uid="ij-out"))
    for uid, assigner in (("tw", TumblingWindows(250)), ("sw", SlidingWindows(300, 100))):
        (imps.join(clks).where("key").equal_to("key").window(assigner)
             .apply(uid=uid, parallelism=join_parallelism, vectorized=vectorized)
             .sink(FileSink(os.path.join(out, uid)), uid=f"{uid}-out"))
    return p


def normalized(row: dict) -> tuple:
    """A row as a hashable, order-free tuple of its non-null fields (an outer join's
    unmatched row has the other side's columns null in Arrow, absent in a dict)."""
    return tuple(sorted((k, v) for k, v in row.items() if v is not None))


def committed(out: str, which: str) -> Counter:
    return Counter(normalized(r) for r in read_committed(os.path.join(out, which)))
