"""The Nexmark source and the engine's generator source share one split reader
(:class:`~airflow_checkpoint_provider.engine.connectors.generator.StridedSplitReader`): every
event once across the splits, positions that rewind exactly, the wall-clock rate limit."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine import GeneratorSource
from airflow_checkpoint_provider.engine.connectors.generator import StridedSplitReader
from bench.nexmark.generator import NexmarkGenerator
from bench.nexmark.source import NexmarkSource


def drain(reader, n=7):
    out = []
    while (b := reader.read_batch(n)) is not None:
        out.append(b)
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("splits", [1, 3])
def test_every_event_once_and_a_restore_rewinds_exactly(splits):
    src = NexmarkSource(50, splits=splits)
    got = []
    for split in src.splits():
        r = src.open_split(split, None, None)
        assert isinstance(r, StridedSplitReader)
        first = r.read_batch(4)
        pos = r.position()
        rest = drain(r)
        again = drain(src.open_split(split, pos, None))  # restored after the first batch
        assert pa.Table.from_batches(rest).equals(pa.Table.from_batches(again))
        got += [first, *rest]
    table = pa.Table.from_batches(got).sort_by("id") if "id" in got[0].schema.names else None
    whole = NexmarkGenerator(src.config).batch(np.arange(50, dtype=np.int64))
    assert sum(len(b) for b in got) == 50
    if table is not None:
        assert table.equals(pa.Table.from_batches([whole]).sort_by("id"))


@pytest.mark.timeout(60)
def test_generator_source_reads_through_the_same_reader():
    src = GeneratorSource(num_records=20, splits=2)
    ids = sorted(r["id"] for s in src.splits() for b in drain(src.open_split(s, None, None), 3)
                 for r in b)
    assert ids == list(range(20))


@pytest.mark.timeout(60)
def test_rate_limit_counts_from_the_reader_open():
    src = NexmarkSource(None, splits=2, events_per_second_wall=200)  # 100/s per split
    t0 = time.monotonic()
    r = src.open_split("nexmark-0", 10, None)
    first = len(r.read_batch(1000))
    assert first <= 1 + (time.monotonic() - t0) * 100  # the clock starts at the open
    time.sleep(0.3)
    n = first + len(r.read_batch(1000))
    assert 30 <= n <= 1 + (time.monotonic() - t0) * 100
    assert r.position() == 10 + n  # how many it emitted, from the restored position
