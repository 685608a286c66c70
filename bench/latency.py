"""End-to-end latency: from a record's creation at the source to its result at the sink.

    .venv/bin/python bench/latency.py [--rates 10000,100000] [--seconds 20] [--reps 1]

The source stamps every record with the wall time it was generated (``ts``, epoch seconds)
at a fixed offered rate; the sink takes ``now - ts`` for every row it receives. Both run on
this machine, so the clocks agree. Jobs (parallelism 2, 100,000 keys, checkpoints every 1 s,
so checkpoints happen during the measurement):

* ``aggregate``: Arrow batches -> ``key_by("key").aggregate(count, sum, ts=max(ts))``: each
  output row carries the newest ``ts`` folded into it, so its latency is that of the
  newest record it reflects.
* ``running_sum``: dict records -> a per-record ``KeyedProcessFunction`` that passes ``ts``
  through with the running count and sum.
* ``ss_aggregate`` (``--ss``, default on): Structured Streaming's groupBy(key).agg(count,
  sum) at the same offered rate, 1 s trigger; see :func:`ss_latency` for how its figure is
  made. ``applyInPandasWithState`` is not run: it sustains a few thousand rows/s
  (structured_streaming.json), so at these rates its latency grows without bound.

The first ``--warmup-s`` seconds are dropped. Percentiles are over every row received after
that; with ``--reps`` > 1 the summary holds each percentile's median over the repetitions
(interleaved: every job and rate once per repetition) and the worst repetition's p99.
Writes latency.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import cloudpickle
import numpy as np
import pyarrow as pa
from jobs import add_results_dir, median, write_results  # noqa: E402

from airflow_checkpoint_provider.engine import (  # noqa: E402
    CheckpointConfig,
    DiscardWriter,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
    Sink,
    SinkWriter,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # slots cannot import bench/


class StampedSource(GeneratorSource):
    """The generator's records plus ``ts``, the wall time they were generated (one stamp per
    batch, read just before the batch is built: every record of it exists from then on)."""

    def records(self, ids: np.ndarray) -> list[dict]:
        now = time.time()
        out = super().records(ids)
        for r in out:
            r["ts"] = now
        return out

    def record_batch(self, ids: np.ndarray) -> pa.RecordBatch:
        now = time.time()
        batch = super().record_batch(ids)
        return batch.append_column("ts", pa.array(np.full(len(ids), now)))


class PassTs(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.value_state("count", 0)
        self.sum = ctx.value_state("sum", 0)

    def process_element(self, record, ctx):
        c, s = self.count.value() + 1, self.sum.value() + record["value"]
        self.count.update(c)
        self.sum.update(s)
        return {"key": ctx.current_key, "count": c, "sum": s, "ts": record["ts"]}


class LatencySink(Sink):
    """Keeps ``(ts, now - ts)`` of every row it receives, one .npz per subtask."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, ctx) -> SinkWriter:
        return _LatencyWriter(os.path.join(self.directory, f"{ctx.subtask_index}.npz"))

    def describe(self) -> str:
        return "latency"


class _LatencyWriter(DiscardWriter):
    """Records when each row arrived; nothing to commit."""

    #: dict records stay dicts (no conversion to Arrow for the measurement)
    accepts_arrow = False

    def __init__(self, path: str) -> None:
        self.path, self.ts, self.lat = path, [], []

    def write(self, records) -> None:
        now = time.time()
        ts = (records.column("ts").to_numpy() if isinstance(records, pa.RecordBatch)
              else np.array([r["ts"] for r in records]))
        self.ts.append(ts)
        self.lat.append((now - ts).astype(np.float32))

    def close(self) -> None:
        np.savez(self.path, ts=np.concatenate(self.ts) if self.ts else np.empty(0),
                 lat=np.concatenate(self.lat) if self.lat else np.empty(0, np.float32))


def build(job: str, root: str, rate: int, seconds: float, keys: int) -> Pipeline:
    p = Pipeline(f"latency-{job.replace('_', '-')}", batch_size=8192,
                 checkpoint=CheckpointConfig(interval_ms=1000,
                                             directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))
    records = int(rate * seconds)
    sink = LatencySink(os.path.join(root, "lat"))
    source = StampedSource(records, num_keys=keys, seed=1, arrow=job == "aggregate",
                           records_per_second=rate)
    stream = p.source(source, uid="gen", parallelism=2).key_by("key")
    if job == "aggregate":
        out = stream.aggregate(count="count", sum=("sum", "value"), ts=("max", "ts"), uid="agg",
                               parallelism=2)
    else:
        out = stream.process(PassTs(), uid="sum", parallelism=2)
    out.sink(sink, uid="out")
    return p


def measure(job: str, rate: int, seconds: float, warmup: float, keys: int) -> dict:
    root = tempfile.mkdtemp(prefix="bench-latency-")
    try:
        os.makedirs(os.path.join(root, "lat"))
        p = build(job, root, rate, seconds + warmup, keys)
        t0 = time.monotonic()
        result = p.run()
        if result.status != "FINISHED":
            raise RuntimeError(f"{job} ended {result.status}: {result.failure_reason}")
        files = [np.load(f) for f in glob.glob(os.path.join(root, "lat", "*.npz"))]
        ts = np.concatenate([f["ts"] for f in files])
        lat = np.concatenate([f["lat"] for f in files])
        if not len(lat):
            raise RuntimeError(f"{job}: the job finished but recorded no latency rows")
        # rows of records generated in the first ``warmup`` seconds are dropped; on a machine
        # so loaded that none came after it, all rows are kept and the result says so
        warm = ts >= ts.min() + warmup
        ms = np.sort(lat[warm] if warm.any() else lat) * 1000.0
        pct = {f"p{q}": round(float(np.percentile(ms, q)), 2) for q in (50, 90, 99, 99.9)}
        return {"job": job, "rate": rate, "rows": int(len(ms)), "wall_s": time.monotonic() - t0,
                "warmup_dropped": bool(warm.any()),
                "checkpoints": result.checkpoints_completed, **pct,
                "max": round(float(ms[-1]), 2) if len(ms) else None}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ss_latency(spark, rate: int, seconds: float, keys: int) -> dict:
    """Structured Streaming's latency for the same aggregation at the same offered rate,
    from its own figures: a 1 s processing-time trigger (our checkpoint interval; SS
    checkpoints every micro-batch) fed one trigger's worth of rows per batch
    (``rate-micro-batch``). A row waits for the next trigger, uniformly 0..1 s, then for its
    batch to be processed: latency = U(0, 1 s) + that batch's ``triggerExecution``. Estimated
    from the batch durations, not stamped per row (the ``rate`` source hands out rows in
    whole seconds, which would add its own delay)."""
    from structured_streaming import TRIGGER_MS, _aggregation, keyed_rate, ss_measure

    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rate)
              .option("numPartitions", 2).load())
    measured = max(3, int(seconds * 1000 / TRIGGER_MS))
    r = ss_measure(_aggregation(keyed_rate(source, keys, False)), "update", warmup=2,
                   measure=measured, timeout_s=seconds * 10 + 120)
    durations = np.array(r["batch_ms"], dtype=np.float64)
    waits = np.linspace(0.0, TRIGGER_MS, 1000, endpoint=False)
    ms = np.sort((waits[None, :] + durations[:, None]).ravel())
    return {"job": "ss_aggregate", "rate": rate, "batches": len(durations),
            "batch_ms_median": float(np.median(durations)),
            "batch_ms_max": float(durations.max()),
            "sustained_records_per_s": r["sustained_records_per_s"],
            **{f"p{q}": round(float(np.percentile(ms, q)), 2) for q in (50, 90, 99, 99.9)},
            "max": round(float(ms[-1]), 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10000,100000")
    ap.add_argument("--jobs", default="aggregate,running_sum")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per run")
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--ss", action=argparse.BooleanOptionalAction, default=True,
                    help="also Structured Streaming's figure for the aggregation (local[2])")
    add_results_dir(ap)
    args = ap.parse_args(argv)
    jobs = args.jobs.split(",")
    spark = None
    if args.ss:
        from structured_streaming import SS_CONF

        from airflow_checkpoint_provider.engine.client import spark_session

        spark = spark_session("local[2]", "bench-latency-ss", extra_conf=SS_CONF)
        jobs.append("ss_aggregate")
    runs = []
    try:
        for _rep in range(args.reps):
            for rate in (int(r) for r in args.rates.split(",")):
                for job in jobs:
                    if job == "ss_aggregate":
                        r = ss_latency(spark, rate, args.seconds, args.keys)
                    else:
                        r = measure(job, rate, args.seconds, args.warmup_s, args.keys)
                    runs.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        if spark is not None:
            spark.stop()
    medians = []
    for rate in (int(r) for r in args.rates.split(",")):
        for job in jobs:
            rs = [r for r in runs if r["job"] == job and r["rate"] == rate]
            medians.append({"job": job, "rate": rate, "reps": len(rs),
                            **{q: median(r[q] for r in rs)
                               for q in ("p50", "p90", "p99", "p99.9", "max")},
                            "p99_worst": max(r["p99"] for r in rs)})
    write_results(args.results_dir, "latency.json",
                  {"summary": {"keys": args.keys, "seconds": args.seconds, "reps": args.reps,
                               "warmup_s": args.warmup_s, "medians": medians}, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
