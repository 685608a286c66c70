"""The jobs every benchmark runs, so each scenario measures the same thing.

* ``running_sum``: generator (dict records) -> key_by -> a per-record ``KeyedProcessFunction``
  keeping count and sum in value state -> exactly-once file sink. The per-record path.
* ``aggregate``: generator (Arrow batches) -> key_by -> built-in ``aggregate(count, sum)``
  -> discarding sink. The vectorized path, and the same job as the Structured Streaming
  query (groupBy(key).agg(count, sum), update mode, noop sink).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import cloudpickle

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.client import MetadataStore  # noqa: E402
from airflow_checkpoint_provider.examples.running_sum import RunningSum  # noqa: E402
from bench.report_common import record_conditions  # noqa: E402  (the load at the start)

JOBS = ("running_sum", "aggregate")
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# Slot processes cannot import this directory: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def add_results_dir(parser) -> None:
    parser.add_argument("--results-dir", default=RESULTS,
                        help="where the JSON results go (default bench/results)")


def write_results(directory: str, name: str, data: object) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    record_conditions(directory, name)
    return path


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))] if values else None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def peak_rss(run: dict) -> float | None:
    """Largest peak resident memory of any slot process of a run (MB)."""
    return max((run.get("peak_rss_mb") or {}).values(), default=None)


def bench_pipeline(name: str, root: str, checkpoint: dict, *, restarts: int = 0,
                   **options) -> Pipeline:
    """A pipeline whose checkpoints (``checkpoint``: ``CheckpointConfig`` fields) and
    metadata database are under ``root``; ``restarts`` attempts without delay; ``options``
    go to the ``Pipeline``."""
    return Pipeline(name,
                    checkpoint=CheckpointConfig(directory=os.path.join(root, "ckpt"), **checkpoint),
                    metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=restarts, delay_ms=0),
                    **options)


def build(job: str, root: str, records: int, keys: int, interval_ms: int | None, *,
          state_backend: str = "heap", parallelism: int = 2, fault=None, probe=None,
          batch_size: int = 4096, int_keys: bool = False) -> Pipeline:
    """``fault``: an optional function inserted after the source (failure injection);
    ``probe``: an optional ``map_batches`` function after the aggregation; ``int_keys``:
    int64 keys instead of ``"k<n>"`` strings."""
    p = bench_pipeline(f"bench-{job.replace('_', '-')}", root, {"interval_ms": interval_ms},
                       restarts=3, batch_size=batch_size, state_backend=state_backend)
    if job == "running_sum":
        stream = p.source(GeneratorSource(records, num_keys=keys, seed=1, int_keys=int_keys),
                          uid="gen",
                          parallelism=parallelism)
        if fault is not None:
            stream = stream.map(fault)
        (stream.key_by("key").process(RunningSum(), uid="sum", parallelism=parallelism)
               .sink(FileSink(os.path.join(root, "out")), uid="out"))
    elif job == "aggregate":
        from airflow_checkpoint_provider.engine import DiscardSink

        stream = p.source(GeneratorSource(records, num_keys=keys, seed=1, arrow=True,
                                          int_keys=int_keys), uid="gen",
                          parallelism=parallelism)
        if fault is not None:
            stream = stream.map_batches(fault)
        stream = stream.key_by("key").aggregate(count="count", sum=("sum", "value"), uid="agg",
                                                parallelism=parallelism)
        if probe is not None:
            stream = stream.map_batches(probe)
        stream.sink(DiscardSink(), uid="out")
    else:
        raise ValueError(f"unknown job {job!r}; use one of {JOBS}")
    return p


def run_to_end(p: Pipeline, what: str, runner: str = "local", **runner_opts) -> tuple:
    """Run ``p`` to the end of its input; return ``(result, wall seconds, its completed or
    subsumed checkpoints in id order)``. Raises, naming ``what``, unless it FINISHED."""
    t0 = time.monotonic()
    result = p.run(runner, **runner_opts)
    elapsed = time.monotonic() - t0
    if result.status != "FINISHED":
        raise RuntimeError(f"{what} ended {result.status}: {result.failure_reason}")
    store = MetadataStore(p.metadata_url)
    done = sorted((c for c in store.list_checkpoints(result.job_id)
                   if c.status in ("COMPLETED", "SUBSUMED")), key=lambda c: c.checkpoint_id)
    store.close()
    return result, elapsed, done


def run_job(job: str, root: str | None, records: int, keys: int, interval_ms: int | None,
            runner: str = "local", runner_opts: dict | None = None, **build_opts) -> dict:
    """Run one job to the end; return its throughput and checkpoint figures."""
    own = root is None
    root = root or tempfile.mkdtemp(prefix="bench-")
    try:
        p = build(job, root, records, keys, interval_ms, **build_opts)
        result, elapsed, rows = run_to_end(p, f"bench job {job}", runner, **(runner_opts or {}))
        return {"records": records, "seconds": elapsed, "records_per_s": records / elapsed,
                "checkpoints": result.checkpoints_completed, "restarts": result.restarts,
                "startup_s": (result.extra.get("startup_seconds") or [None])[0],
                # launch of the restarted slots -> every task restored and running
                "startup_after_failure_s": (result.extra.get("startup_seconds") or [None, None])[-1]
                if result.restarts else None,
                "peak_rss_mb": result.extra.get("peak_rss_mb"),
                "durations_ms": [c.duration_ms for c in rows],
                "state_bytes": [c.state_size for c in rows]}
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)
