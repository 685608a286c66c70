"""Checkpoint cost of the per-record state backends, measured on a job.

    .venv/bin/python bench/state_backends.py [--keys 10000,100000,1000000] [--reps 3]

For each key count and backend (heap, RocksDB full, RocksDB incremental) one job, parallelism
1, local runner: a source writes every key once (the fill), then 5 rounds that each update
1% of the keys; a per-record ``KeyedProcessFunction`` keeps ``{"count", "sum"}`` in value
state. The source starts a round only once a completed checkpoint holds the previous one
(``SplitReader.notify_checkpoint_complete`` hands it the position the checkpoint holds), so
each round is in exactly one checkpoint. Recorded per checkpoint, from the metadata DB
(``checkpoints.task_stats`` of the keyed task): the synchronous part (ms, the task is blocked:
the heap backend's copy-on-write capture, RocksDB's flush and checkpoint), the asynchronous
part (ms, the serialization and the write to local disk, or the SST upload), the full state
size and the bytes written for the checkpoint. Writes state_backends.json (in bench/results
unless --results-dir); the first checkpoint is the fill's (full), the next ones the rounds'.

The same figures on the backends alone, without a job around them, are a component
benchmark: tools/microbench/state_backends.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

import cloudpickle
from jobs import add_results_dir, bench_pipeline, run_to_end, write_results

from airflow_checkpoint_provider.engine import (
    DiscardSink,
    KeyedProcessFunction,
    Source,
    SplitReader,
)

ROUNDS = 5
#: one key in STEP is updated per round (1%)
STEP = 100
BACKENDS = {"heap": {"state_backend": "heap"},
            "rocksdb-full": {"state_backend": "rocksdb", "incremental": False},
            "rocksdb-incremental": {"state_backend": "rocksdb", "incremental": True}}

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # slots cannot import bench/


def phase_ends(keys: int) -> list[int]:
    """Records emitted at the end of the fill and of each round."""
    ends = [keys]
    for n in range(1, ROUNDS + 1):
        ends.append(ends[-1] + len(range(n, keys, STEP)))
    return ends


class RoundsReader(SplitReader):
    """Fill, then ``ROUNDS`` rounds, each once the previous one is in a completed checkpoint.
    Appends ``{"checkpoint_id", "position"}`` of every completed checkpoint to ``log``."""

    def __init__(self, keys: int, log: str) -> None:
        self.keys, self.log = keys, log
        self.emitted = 0
        self.round = 0
        self.durable = 0  # the position of the newest completed checkpoint

    def read_batch(self, max_records: int):
        if self.emitted < self.keys:  # the fill
            end = min(self.keys, self.emitted + max_records)
            batch = [{"key": f"key-{i}", "i": i} for i in range(self.emitted, end)]
        elif self.durable < self.emitted:
            return []  # the last phase is not in a completed checkpoint yet
        elif self.round == ROUNDS:
            return None
        else:  # one round in one batch (the pipeline's batch size holds it)
            self.round += 1
            batch = [{"key": f"key-{i}", "i": i} for i in range(self.round, self.keys, STEP)]
        self.emitted += len(batch)
        return batch

    def position(self) -> object:
        return self.emitted

    def notify_checkpoint_complete(self, checkpoint_id: int, position: object) -> None:
        self.durable = max(self.durable, int(position or 0))
        with open(self.log, "a") as f:
            f.write(json.dumps({"checkpoint_id": checkpoint_id, "position": position}) + "\n")


class RoundsSource(Source):
    def __init__(self, keys: int, log: str) -> None:
        self.keys, self.log = keys, log

    def splits(self):
        return ["rounds"]

    def open_split(self, split_id, position, ctx):
        if position:
            raise ValueError("the state-backend benchmark's source does not restore")
        return RoundsReader(self.keys, self.log)

    def describe(self) -> str:
        return f"rounds({self.keys} keys)"


class Update(KeyedProcessFunction):
    """Keeps ``{"count", "sum"}`` per key (the state the rounds change); emits nothing."""

    def open(self, ctx):
        self.state = ctx.value_state("agg", None)

    def process_element(self, record, ctx):
        i = record["i"]
        self.state.update({"count": i, "sum": i * 3})


def measured_checkpoints(done, log: str, keys: int) -> list[dict]:
    """The checkpoint of each phase (the first whose source position is the phase's end) with
    the keyed task's figures: the fill's (earlier checkpoints hold part of it), then each
    round's; a round split over two checkpoints (a barrier inside it) is left out."""
    with open(log) as f:
        positions = {e["checkpoint_id"]: e["position"] for e in map(json.loads, f)}
    by_id = {c.checkpoint_id: c for c in done}
    out = []
    previous_end = 0
    for end in phase_ends(keys):
        ids = sorted(i for i, p in positions.items() if previous_end < p <= end and i in by_id)
        if previous_end == 0:  # the fill: its first complete checkpoint
            ids = [i for i in ids if positions[i] == end]
        if ids and positions[ids[0]] == end:
            keyed = max(by_id[ids[0]].task_stats or [], key=lambda t: t.get("state_size", 0))
            out.append({"checkpoint": ids[0], "sync_ms": keyed["sync_ms"],
                        "async_ms": keyed["async_ms"], "state_size": keyed["state_size"],
                        "uploaded": keyed["checkpointed_size"]})
        else:
            print(f"  phase ending at record {end:,} is split over checkpoints {ids}: left out",
                  flush=True)
        previous_end = end
    return out


def measure(kind: str, keys: int, root: str) -> dict:
    log = os.path.join(root, "completed.jsonl")
    p = bench_pipeline(f"bench-state-{kind}", root, {"interval_ms": 100, "timeout_ms": 600_000},
                       batch_size=max(1024, len(range(1, keys, STEP))), **BACKENDS[kind])
    (p.source(RoundsSource(keys, log), uid="rounds", parallelism=1)
      .key_by("key")
      .process(Update(), uid="update", parallelism=1)
      .sink(DiscardSink(), uid="out"))
    _result, elapsed, done = run_to_end(p, f"state backend benchmark {kind}")
    return {"backend": kind, "keys": keys, "measured": "job", "seconds": elapsed,
            "checkpoints": measured_checkpoints(done, log, keys)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", default="10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=3)
    add_results_dir(ap)
    args = ap.parse_args(argv)
    results = []
    for keys in [int(k) for k in args.keys.split(",")]:
        for rep in range(args.reps):
            for kind in BACKENDS:  # interleaved: every backend once per repetition
                root = tempfile.mkdtemp(prefix="bench-state-")
                try:
                    r = measure(kind, keys, root)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                r["rep"] = rep
                results.append(r)
                later = r["checkpoints"][1:]
                if not later:
                    print(f"{kind:>20} {keys:>8} keys rep {rep}: no round measured", flush=True)
                    continue
                print(f"{kind:>20} {keys:>8} keys rep {rep}: sync p50 "
                      f"{statistics.median(c['sync_ms'] for c in later):7.1f} ms, async p50 "
                      f"{statistics.median(c['async_ms'] for c in later):7.1f} ms, written "
                      f"{statistics.median(c['uploaded'] for c in later) / 1e6:7.2f} MB of "
                      f"{statistics.median(c['state_size'] for c in later) / 1e6:7.2f} MB "
                      f"({r['seconds']:.0f} s)", flush=True)
    write_results(args.results_dir, "state_backends.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
