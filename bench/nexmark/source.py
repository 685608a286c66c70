"""The Nexmark generator as a replayable source of our engine.

Split ``j`` of ``splits`` yields the event ids ``j, j + splits, j + 2 splits, ...`` (so every
split advances through event time together); its position is how many events it has
emitted, so a restore at any parallelism rewinds exactly.
"""

from __future__ import annotations

import numpy as np

from airflow_checkpoint_provider.engine import (
    Source,
    SourceContext,
    SplitReader,
    StridedSplitReader,
)

from .generator import NexmarkConfig, NexmarkGenerator


class NexmarkSource(Source):
    """Nexmark events ``0..num_events-1`` (``None``: unbounded) as Arrow batches of
    :data:`~.generator.SCHEMA`; ``events_per_second_wall``: a total emission rate limit
    (``None``: as fast as it can)."""

    def __init__(self, num_events: int | None, *, config: NexmarkConfig | None = None,
                 splits: int = 4, events_per_second_wall: float | None = None) -> None:
        if num_events is not None and num_events < 0:
            raise ValueError(f"num_events must be >= 0 (got {num_events})")
        if splits < 1:
            raise ValueError(f"splits must be >= 1 (got {splits})")
        self.num_events = num_events
        self.config = config or NexmarkConfig()
        self.num_splits = splits
        self.rate = events_per_second_wall

    def splits(self) -> list[str]:
        return [f"nexmark-{j}" for j in range(self.num_splits)]

    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        return _Reader(self, int(split_id.rsplit("-", 1)[1]), int(position or 0))

    def describe(self) -> str:
        return f"nexmark(seed={self.config.seed})"


class _Reader(StridedSplitReader):
    def __init__(self, source: NexmarkSource, split: int, emitted: int) -> None:
        self.gen = NexmarkGenerator(source.config)  # before the rate clock starts
        super().__init__(split, source.num_splits, emitted, source.num_events, source.rate)

    def records(self, ids: np.ndarray):
        return self.gen.batch(ids)
