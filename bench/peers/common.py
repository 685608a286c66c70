"""What every runner of bench/peers shares, importable from any peer's venv (stdlib only; the
Quix Streams and our-engine helpers import those in their own venvs):
the input, the same records as the engine's ``GeneratorSource(n, num_keys=k, seed=1)``
(a test checks it), and how a runner reports its run (one JSON line on stdout)."""

from __future__ import annotations

import argparse
import json
import sys
import time

_MASK = (1 << 64) - 1
SEED = 1


def mix64(x: int) -> int:
    """SplitMix64 finaliser, as engine.connectors.generator.mix64."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def record(i: int, keys: int) -> tuple[str, int]:
    """Record ``i``'s key (``"k<n>"``) and value, as ``GeneratorSource(seed=1).record(i)``."""
    h = mix64(SEED * 0x100000001B3 + i)
    return f"k{h % keys}", (h >> 32) % 100


class Records:
    """The ``n`` records as ``(key, value)`` tuples, generated while iterated (a source's own
    work, as the engine's generator does it), re-iterable."""

    def __init__(self, n: int, keys: int) -> None:
        self.n, self.keys = n, keys

    def __iter__(self):
        keys = self.keys
        for i in range(self.n):
            yield record(i, keys)


def expected_sum(n: int, keys: int) -> int:
    """The sum of all values: the aggregate's check."""
    return sum(record(i, keys)[1] for i in range(n))


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("per_record", "aggregate"), required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--bootstrap", help="Kafka bootstrap servers (Quix Streams)")
    ap.add_argument("--topic", help="the input topic (Quix Streams; the Kafka benchmark)")
    ap.add_argument("--output-topic", help="the output topic (the Kafka benchmark)")
    ap.add_argument("--backend", choices=("heap", "rocksdb"), default="heap",
                    help="our engine's state backend")
    return ap.parse_args(argv)


class Timer:
    """The wall time of the job itself (imports and set-up excluded; the marginal rate
    cancels what is left of start-up)."""

    def __enter__(self) -> Timer:
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.monotonic() - self.t0


def report(args: argparse.Namespace, wall_s: float, outputs: int, ok: bool, **extra) -> None:
    """The runner's one line: the driver reads the last line of stdout."""
    print(json.dumps({"workload": args.workload, "records": args.records, "wall_s": wall_s,
                      "outputs": outputs, "ok": ok, **extra}), flush=True)
    sys.exit(0 if ok else 3)


def quix_application(args: argparse.Namespace, group_prefix: str, seen: dict):
    """Quix Streams' ``Application`` as Quix recommends it: RocksDB state under
    ``--state-dir`` with changelog topics, exactly-once processing, commits every
    ``--interval-ms``; a fresh consumer group (``<group_prefix>-<random>``) from the earliest
    offset. It counts processed messages in ``seen["processed"]`` and stops when the last
    input offset (``--records - 1``) has been processed; ``Application.stop()`` commits the
    last checkpoint. (Imported in Quix Streams' venv only.)"""
    import logging
    import os
    import uuid

    from quixstreams import Application

    last = args.records - 1
    app: Application

    def processed(topic: str, partition: int, offset: int) -> None:
        seen["processed"] += 1
        if offset >= last:
            app.stop()

    app = Application(broker_address=args.bootstrap,
                      consumer_group=f"{group_prefix}-{uuid.uuid4().hex[:12]}",
                      auto_offset_reset="earliest", commit_interval=args.interval_ms / 1000,
                      state_dir=os.path.join(args.state_dir, "state"),
                      processing_guarantee="exactly-once", use_changelog_topics=True,
                      on_message_processed=processed, loglevel=logging.WARNING)
    return app


def ours_pipeline(args: argparse.Namespace, name: str):
    """Our engine's ``Pipeline`` as both our runners set it up: heap state, checkpoints every
    ``--interval-ms`` under ``--state-dir``, a SQLite metadata DB there, no restarts, every
    other setting as a user gets it by default. (Imported in the project's venv only.)"""
    import os

    from airflow_checkpoint_provider.engine import CheckpointConfig, Pipeline, RestartStrategy

    root = args.state_dir
    return Pipeline(name, state_backend=getattr(args, "backend", "heap"),
                    checkpoint=CheckpointConfig(interval_ms=args.interval_ms,
                                                directory=os.path.join(root, "ckpt")),
                    metadata_url="sqlite:///" + os.path.join(root, "meta.db"),
                    restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0))


def run_ours(args: argparse.Namespace, pipeline) -> None:
    """Run ``pipeline`` on the local runner, timed, and report it (its output is checked
    elsewhere: ``outputs=-1``), with the launch-to-running start-up the engine measured."""
    import os
    import shutil

    try:
        with Timer() as t:
            result = pipeline.run("local")
    finally:
        shutil.rmtree(os.path.join(args.state_dir, "ckpt"), ignore_errors=True)
    if result.status != "FINISHED":
        print(f"job ended {result.status}: {result.failure_reason}", file=sys.stderr)
    report(args, t.wall_s, outputs=-1, ok=result.status == "FINISHED",
           startup_s=(result.extra.get("startup_seconds") or [None])[0])
