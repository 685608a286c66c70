"""The Nexmark source of the chaos matrix: bench/nexmark's events, with a cheap start.

bench/nexmark's ``NexmarkGenerator()`` spends ~8 s of CPU building its 10,004 channel URLs
one hash at a time (``_base_urls``: 30,012 scalar numpy calls), and its source builds one
generator per split reader: every slot of every attempt paid that twice before its first
event, which was most of a chaos run's time (a run restarts 1-3 times). Here the URLs are
hashed in one vectorized call (the same hash, the same words: tests/chaos proves the URLs,
channels and events equal bench/nexmark's) and a process builds its generator once per
configuration. The events, splits, positions and rate limit are bench/nexmark's own, so a
run recovers exactly what the bench pipeline would.
"""

from __future__ import annotations

import threading

import numpy as np

from airflow_checkpoint_provider.engine import SourceContext, SplitReader, StridedSplitReader
from bench.nexmark.generator import NexmarkConfig, NexmarkGenerator, _mix
from bench.nexmark.source import NexmarkSource

_A = ord("a")


class FastNexmarkGenerator(NexmarkGenerator):
    """:class:`NexmarkGenerator` whose channel URLs are built in one vectorized pass."""

    def _base_urls(self, n: int) -> list[str]:
        h = _mix(np.arange(3 * n, dtype=np.uint64) + np.uint64(self.config.seed * 131 + 7))
        length = (3 + h % np.uint64(2)).astype(np.int64)
        letters = np.stack(
            [(np.uint64(_A) + (h >> np.uint64(8 + 5 * k)) % np.uint64(26)) for k in range(4)],
            axis=1,
        ).astype(np.uint8)
        underscore = ((h >> np.uint64(60)) % np.uint64(13) == 0).tolist()
        words = []
        for row, size, last in zip(letters.tolist(), length.tolist(), underscore, strict=True):
            word = bytes(row[:size]).decode()
            words.append(word[:-1] + "_" if last else word)
        return [
            "https://www.nexmark.com/" + "/".join(words[3 * i : 3 * i + 3]) + "/item.htm?query=1"
            for i in range(n)
        ]


_GENERATORS: dict[NexmarkConfig, NexmarkGenerator] = {}
_LOCK = threading.Lock()


def generator(config: NexmarkConfig) -> NexmarkGenerator:
    """This process's generator of ``config`` (built once: its ``batch`` is a pure function
    of the event ids, so the split readers of a process share it)."""
    with _LOCK:
        gen = _GENERATORS.get(config)
        if gen is None:
            gen = _GENERATORS[config] = FastNexmarkGenerator(config)
        return gen


class _Reader(StridedSplitReader):
    def __init__(self, source: NexmarkSource, split: int, emitted: int) -> None:
        self.gen = generator(source.config)  # before the rate clock starts
        super().__init__(split, source.num_splits, emitted, source.num_events, source.rate)

    def records(self, ids: np.ndarray):
        return self.gen.batch(ids)


class ChaosNexmarkSource(NexmarkSource):
    """:class:`NexmarkSource` (same splits, positions, events and rate) whose readers share
    this process's :class:`FastNexmarkGenerator`."""

    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        return _Reader(self, int(split_id.rsplit("-", 1)[1]), int(position or 0))
