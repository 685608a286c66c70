"""Pipelines of the vectorized count_distinct and top-N tests (importable by slot
processes), with their independent references."""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pipelines import TEST_RESTARTS, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    DataStream,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    read_committed,
)


class Faults:
    """``map_batches`` function firing the plan's ("record", id) and ("kill", id) points
    (an exception, or SIGKILL of the slot process) when a batch holds that record id."""

    def __init__(self, faults: FaultPlan) -> None:
        self.faults = faults

    def __call__(self, batch):
        ids = batch.column("id").to_numpy()
        for kind, v in sorted(self.faults.points):
            if kind in ("record", "kill") and np.isin(v, ids):
                self.faults.maybe_fail(kind, int(v), {})
        return batch


def generated(name: str, root: str, *, num_records: int, num_keys: int, seed: int,
              rate: float | None, faults: FaultPlan | None, interval_ms: int,
              parallelism: int, state_backend: str = "heap",
              splits: int = 4) -> tuple[Pipeline, DataStream]:
    """A pipeline under ``root`` and its generator (Arrow batches) [-> faults] stream."""
    p = Pipeline(name, max_parallelism=64, batch_size=256, state_backend=state_backend,
                 checkpoint=CheckpointConfig(interval_ms=interval_ms,
                                             directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "sp")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    stream = p.source(GeneratorSource(num_records, num_keys=num_keys, seed=seed, splits=splits,
                                      records_per_second=rate, arrow=True),
                      uid="gen", parallelism=parallelism)
    if faults is not None:
        stream = stream.map_batches(Faults(faults), name="faults")
    return p, stream


def _with_columns(batch):
    ids = batch.column("id")
    bucket = pc.bit_wise_and(ids, 127)
    tag = pc.binary_join_element_wise("t", pc.cast(pc.bit_wise_and(batch.column("value"), 31),
                                                   pa.string()), "")
    # a filtered distinct count: the bucket where value < 30, else null
    low = pc.if_else(pc.less(batch.column("value"), 30), bucket, pa.scalar(None, pa.int64()))
    return batch.append_column("bucket", bucket).append_column("tag", tag).append_column(
        "low_bucket", low)


def distinct_pipeline(root: str, *, num_records: int = 20_000, num_keys: int = 30,
                      seed: int = 7, rate: float | None = None,
                      faults: FaultPlan | None = None, interval_ms: int = 150,
                      parallelism: int = 2, state_backend: str = "heap",
                      out: str | None = None) -> Pipeline:
    """generator (Arrow) [-> faults] -> key_by(key).aggregate(count, count_distinct x 4)
    -> exactly-once file sink."""
    p, stream = generated("distinct", root, num_records=num_records, num_keys=num_keys,
                          seed=seed, rate=rate, faults=faults, interval_ms=interval_ms,
                          parallelism=parallelism, state_backend=state_backend)
    (stream.map_batches(_with_columns, name="columns")
     .key_by("key")
     .aggregate(uid="distinct", parallelism=parallelism, count="count",
                values=("count_distinct", "value"), buckets=("count_distinct", "bucket"),
                tags=("count_distinct", "tag"), low_buckets=("count_distinct", "low_bucket"))
     .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def expected_distinct(num_records: int, num_keys: int, seed: int) -> dict:
    src = GeneratorSource(num_records, num_keys=num_keys, seed=seed)
    sets: dict = defaultdict(lambda: {"count": 0, "values": set(), "buckets": set(),
                                      "tags": set(), "low_buckets": set()})
    for i in range(num_records):
        r = src.record(i)
        e = sets[r["key"]]
        e["count"] += 1
        e["values"].add(r["value"])
        e["buckets"].add(i & 127)
        e["tags"].add(f"t{r['value'] & 31}")
        if r["value"] < 30:
            e["low_buckets"].add(i & 127)
    return {k: {n: (v if n == "count" else len(v)) for n, v in e.items()}
            for k, e in sets.items()}


def final_distinct(out_dir: str) -> dict:
    """Per key the last committed row (the largest count), after checking that no running
    count was committed twice and that every distinct count only grows."""
    rows: dict = defaultdict(list)
    for r in read_committed(out_dir):
        rows[r["key"]].append(r)
    final = {}
    for key, rs in rows.items():
        counts = [r["count"] for r in rs]
        assert len(counts) == len(set(counts)), f"key {key}: a running count committed twice"
        rs.sort(key=lambda r: r["count"])
        for a, b in zip(rs, rs[1:], strict=False):
            assert all(a[c] <= b[c] for c in ("values", "buckets", "tags", "low_buckets")), key
        final[key] = {c: rs[-1][c] for c in ("count", "values", "buckets", "tags", "low_buckets")}
    return final


def _score(batch):
    # a unique score per record (value, then id): the top rows are the same in every run
    score = pc.add(pc.multiply(batch.column("value"), 1_000_000), batch.column("id"))
    return batch.append_column("score", score)


def topn_pipeline(root: str, *, num_records: int = 20_000, num_keys: int = 30, seed: int = 7,
                  n: int = 5, rate: float | None = None, faults: FaultPlan | None = None,
                  interval_ms: int = 150, parallelism: int = 2, state_backend: str = "heap",
                  out: str | None = None) -> Pipeline:
    """generator (Arrow) [-> faults] -> key_by(key).top_n(n, by=score) -> file sink."""
    p, stream = generated("topn", root, num_records=num_records, num_keys=num_keys,
                          seed=seed, rate=rate, faults=faults, interval_ms=interval_ms,
                          parallelism=parallelism, state_backend=state_backend)
    (stream.map_batches(_score, name="score")
     .key_by("key").top_n(n, by="score", uid="top", parallelism=parallelism)
     .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def expected_topn(num_records: int, num_keys: int, seed: int, n: int = 5) -> dict:
    src = GeneratorSource(num_records, num_keys=num_keys, seed=seed)
    per_key: dict = defaultdict(list)
    for i in range(num_records):
        r = src.record(i)
        per_key[r["key"]].append((r["value"] * 1_000_000 + i, i))
    return {(k, rank): i for k, rows in per_key.items()
            for rank, (_, i) in enumerate(sorted(rows, reverse=True)[:n], start=1)}


def final_topn(out_dir: str) -> dict:
    """(key, rank) -> id of the current row of the committed upsert stream, after checking
    that no (key, rank, row) was committed twice (a row only moves down the ranks, so
    exactly once emits each at most once) and that every emitted row has its score."""
    seen: dict = {}
    best: dict = {}
    for r in read_committed(out_dir):
        k = (r["key"], r["rank_number"], r["id"])
        assert k not in seen, f"{k} committed twice"
        seen[k] = True
        assert r["score"] == r["value"] * 1_000_000 + r["id"]
        at = (r["key"], r["rank_number"])
        if at not in best or r["score"] > best[at][0]:
            best[at] = (r["score"], r["id"])
    return {at: i for at, (_, i) in best.items()}


def session_aggregate_pipeline(root: str, *, num_records: int | None = None,
                               rate: float | None = None, faults: FaultPlan | None = None,
                               parallelism: int = 2, state_backend: str = "heap",
                               out: str | None = None) -> Pipeline:
    """event_time_pipelines' sparse 200-key input -> window(SessionWindows(GAP_MS))
    .aggregate(n=count, total=sum(value)), vectorized; its expected output is
    event_time_pipelines.expected_sessions()."""
    from event_time_pipelines import GAP_MS, N, source, watermarks

    from airflow_checkpoint_provider.engine import SessionWindows

    p = Pipeline("sessions-aggregate", max_parallelism=64, state_backend=state_backend,
                 checkpoint=CheckpointConfig(interval_ms=150, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "sp")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=TEST_RESTARTS, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    stream = p.source(source(num_records or N, num_keys=200, rate=rate, arrow=True), uid="gen",
                      parallelism=parallelism, watermarks=watermarks())
    if faults is not None:
        stream = stream.map_batches(Faults(faults), name="faults")
    (stream.key_by("key").window(SessionWindows(GAP_MS))
     .aggregate(uid="win", parallelism=parallelism, n="count", total=("sum", "value"))
     .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p
