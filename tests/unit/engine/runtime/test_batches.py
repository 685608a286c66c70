"""Partitioning an Arrow batch over channels: every row once, in order within a channel."""

import numpy as np
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.runtime.batches import split_by_channel


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 9])
def test_split_by_channel_gives_each_channel_its_rows_in_order(channels):
    rng = np.random.default_rng(channels)
    channel_of_row = rng.integers(0, channels, 1000)
    channel_of_row[channel_of_row == channels - 1] = 0  # one channel gets nothing
    batch = pa.RecordBatch.from_pydict({"i": np.arange(1000), "s": [f"r{i}" for i in range(1000)]})
    parts = split_by_channel(batch, channel_of_row, channels)
    assert len(parts) == channels
    for c, part in enumerate(parts):
        expected = np.flatnonzero(channel_of_row == c)
        if not len(expected):
            assert part is None
        else:
            assert part.column("i").to_pylist() == expected.tolist()
            assert part.column("s").to_pylist() == [f"r{i}" for i in expected]
