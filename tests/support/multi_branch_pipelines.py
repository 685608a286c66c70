"""Functions of the multi-branch debloating test (importable by slot processes)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from airflow_checkpoint_provider.engine import CheckpointedFunction

#: the steady branch's cost per row (a sleep: the same on a loaded machine): the job's
#: bottleneck, which takes the source's throughput
STEADY_S_PER_ROW = 3e-6


def steady(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The steady branch: every row on (a projection), at a cost."""
    time.sleep(STEADY_S_PER_ROW * batch.num_rows)
    return batch.select(["k", "price", "ts"])


def window_max_per_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The bursty branch's combiner (Nexmark q7's): per batch, one row per 1 s window, its
    highest price. A batch of any size becomes a row or two."""
    ts = batch.column("ts").to_numpy()
    w = ts // 1000
    price = batch.column("price").to_numpy()
    ws = np.unique(w)
    best = []
    for x in ws:
        rows = np.flatnonzero(w == x)
        best.append(int(rows[np.argmax(price[rows])]))
    take = pa.array(best, pa.int64())
    return pa.RecordBatch.from_arrays(
        [pa.array(ws, pa.int64()), batch.column("price").take(take),
         batch.column("ts").take(take)], names=["w", "price", "ts"])


def higher(a: dict, b: dict) -> dict:
    return a if a["price"] >= b["price"] else b



#: how long the window's task takes to start (a function that loads something first)
START_S = 0.5


class SlowStart(CheckpointedFunction):
    """An identity map after the window, in its task, that takes a while to open."""

    def initialize_state(self, ctx) -> None:
        time.sleep(START_S)

    def __call__(self, row: dict) -> dict:
        return row
