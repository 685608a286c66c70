"""The job of the columnar snapshot-parts tests (importable by slot processes): keys that
keep coming (``id // KEY_SPAN``, as auctions in Nexmark: the old ones go cold, so most parts
of the aggregate's snapshot are copied from the last one) and distinct values per key."""

from __future__ import annotations

import os
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
from perf_pipelines import generated
from pipelines import FaultPlan

from airflow_checkpoint_provider.engine import (
    FileSink,
    GeneratorSource,
    Pipeline,
    read_committed,
)

#: records per key: key k gets the records k * KEY_SPAN .. (k + 1) * KEY_SPAN - 1 (and a few
#: of every key's records go to key 0, which stays hot)
KEY_SPAN = 16


def _keyed(batch):
    ids = batch.column("id")
    key = pc.divide(ids, KEY_SPAN)
    key = pc.if_else(pc.equal(pc.bit_wise_and(ids, 7), 0), pa.scalar(0, pa.int64()), key)
    return pa.RecordBatch.from_arrays(
        [key, ids, batch.column("value"), pc.bit_wise_and(ids, 255)],
        names=["key", "id", "value", "bucket"])


def growing_keys_pipeline(root: str, *, num_records: int = 12_000, seed: int = 7,
                          rate: float | None = None, faults: FaultPlan | None = None,
                          interval_ms: int = 100, parallelism: int = 2,
                          out: str | None = None) -> Pipeline:
    """generator (Arrow) [-> faults] -> key = id // 16 -> aggregate(count, sum, max,
    count_distinct x 2) -> exactly-once file sink."""
    p, stream = generated("growing-keys", root, num_records=num_records, num_keys=100,
                          seed=seed, rate=rate, faults=faults, interval_ms=interval_ms,
                          parallelism=parallelism, splits=2)
    (stream.map_batches(_keyed, name="keys")
     .key_by("key")
     .aggregate(uid="agg", parallelism=parallelism, count="count", total=("sum", "value"),
                top=("max", "value"), values=("count_distinct", "value"),
                buckets=("count_distinct", "bucket"))
     .sink(FileSink(out or os.path.join(root, "out")), uid="out"))
    return p


def expected_growing(num_records: int, seed: int) -> dict:
    src = GeneratorSource(num_records, num_keys=100, seed=seed)
    acc: dict = defaultdict(lambda: {"count": 0, "total": 0, "top": None, "values": set(),
                                     "buckets": set()})
    for i in range(num_records):
        v = src.record(i)["value"]
        e = acc[0 if i & 7 == 0 else i // KEY_SPAN]
        e["count"] += 1
        e["total"] += v
        e["top"] = v if e["top"] is None else max(e["top"], v)
        e["values"].add(v)
        e["buckets"].add(i & 255)
    return {k: {**e, "values": len(e["values"]), "buckets": len(e["buckets"])}
            for k, e in acc.items()}


def final_growing(out_dir: str) -> dict:
    """Per key, the row of its highest running count; refuses a running count committed
    twice (a batch replayed after a restore would repeat one)."""
    last: dict = {}
    seen: set = set()
    for r in read_committed(out_dir):
        assert (r["key"], r["count"]) not in seen, f"key {r['key']}: count {r['count']} twice"
        seen.add((r["key"], r["count"]))
        if r["key"] not in last or r["count"] > last[r["key"]]["count"]:
            last[r["key"]] = r
    return {k: {n: r[n] for n in ("count", "total", "top", "values", "buckets")}
            for k, r in last.items()}
