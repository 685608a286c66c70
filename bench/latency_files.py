"""The latency files of the backpressure jobs (ours: bench/backpressure.py; Flink's:
bench/backpressure_flink.py, which runs under the Flink venv: this module imports nothing
of the project)."""

from __future__ import annotations

import glob
import json
import os


def read_latencies(directory: str) -> tuple[list[float], float | None]:
    """Every end-to-end latency the sink subtasks wrote to ``<directory>/lat-*.json``, and
    the span from the first record any subtask saw to the last (None when none saw one)."""
    lat: list[float] = []
    first, last = [], []
    for path in glob.glob(os.path.join(directory, "lat-*.json")):
        with open(path) as f:
            d = json.load(f)
        lat.extend(d["latencies"])
        if d["first"]:
            first.append(d["first"])
            last.append(d["last"])
    return lat, (max(last) - min(first)) if first else None
