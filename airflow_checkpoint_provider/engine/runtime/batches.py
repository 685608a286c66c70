"""Record batches on the data path: lists of dicts (per-record operators) or Arrow
``RecordBatch`` (vectorized operators, and the wire format between them).

A batch stays Arrow from a vectorized source through key partitioning and the network to
vectorized operators; it becomes a list of dicts only at the entry of an operator that runs
a Python function per record.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import pyarrow as pa

Batch: TypeAlias = list | pa.RecordBatch
#: split_by_channel filters once per channel up to this many channels, else sorts
FILTER_CHANNELS = 4


def as_rows(batch: Batch) -> list[dict]:
    return batch.to_pylist() if isinstance(batch, pa.RecordBatch) else batch


def as_arrow(batch: Batch) -> pa.RecordBatch:
    if isinstance(batch, pa.RecordBatch | pa.Table):
        # a Table only from StreamTask._with_queued, for an operator that accepts_table
        return batch
    if batch:
        first = batch[0].keys()
        if any(r.keys() != first for r in batch):
            # from_pylist takes the columns of the first row only and would drop the fields
            # other rows add (e.g. an outer join's unmatched rows of the other side): the
            # columns are every row's fields, in order of first appearance
            names = list(dict.fromkeys(k for r in batch for k in r))
            return pa.RecordBatch.from_pydict({n: [r.get(n) for r in batch] for n in names})
    return pa.RecordBatch.from_pylist(batch)


def to_record_batch(result: object, producer: str) -> pa.RecordBatch:
    """A user function's Arrow result as one ``RecordBatch``."""
    if isinstance(result, pa.RecordBatch):
        return result
    if isinstance(result, pa.Table):
        batches = result.combine_chunks().to_batches()
        if not batches:
            return pa.RecordBatch.from_pylist([], schema=result.schema)
        return batches[0] if len(batches) == 1 else pa.concat_batches(batches)
    raise TypeError(f"{producer} must return a pyarrow.RecordBatch, got {type(result).__name__}")


def encode_arrow(batch: pa.RecordBatch) -> pa.Buffer:
    """Arrow IPC stream (schema + one batch) of ``batch``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def decode_arrow(payload: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_next_batch()


def split_by_channel(batch: pa.RecordBatch, channel_of_row: np.ndarray,
                     channels: int) -> list[pa.RecordBatch | None]:
    """Rows of ``batch`` grouped by ``channel_of_row`` (one take, then zero-copy slices;
    for up to ``FILTER_CHANNELS`` channels one filter per channel, which needs no sort);
    ``None`` for a channel that gets no rows. Row order within a channel is kept."""
    if channels <= FILTER_CHANNELS:
        out: list[pa.RecordBatch | None] = []
        for c in range(channels):
            mask = channel_of_row == c
            n = int(np.count_nonzero(mask))
            out.append(None if n == 0 else batch if n == len(batch)
                       else batch.filter(pa.array(mask)))
        return out
    order = np.argsort(channel_of_row, kind="stable")
    grouped = batch.take(pa.array(order))
    counts = np.bincount(channel_of_row, minlength=channels)
    out = []
    start = 0
    for c in range(channels):
        n = int(counts[c])
        out.append(grouped.slice(start, n) if n else None)
        start += n
    return out
