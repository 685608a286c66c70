"""The issue-35 reproduction (importable by slot processes): a keyed process function
whose map state has tuple user keys and whose value state holds a tuple, a record path that
carries a tuple field across a process, and one raised exception after a checkpoint
completed."""

from __future__ import annotations

import os

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    RestartStrategy,
)


class TypeChanged(AssertionError):
    pass


class TupleSeen(KeyedProcessFunction):
    """Counts (i % 3, i % 5) per key in map state ``seen``; keeps the last pair in value
    state ``last`` and fails loudly if a restore changed its type. ``fail_marker``: raise
    once (across attempts) after the second completed checkpoint."""

    def __init__(self, fail_marker: str | None = None) -> None:
        self.fail_marker = fail_marker

    def open(self, ctx):
        self.seen = ctx.map_state("seen")
        self.last = ctx.value_state("last")

    def process_element(self, record, ctx):
        i = record["id"]
        last = self.last.value()
        if last is not None and type(last) is not tuple:
            raise TypeChanged(f"value state 'last' came back as {type(last).__name__}")
        for k in self.seen.keys():
            if type(k) is not tuple:
                raise TypeChanged(f"map key came back as {type(k).__name__}")
        user_key = (i % 3, i % 5)
        count = self.seen.get(user_key, 0) + 1
        self.seen.put(user_key, count)
        self.last.update((i, str(i)))
        return {"id": i, "key": ctx.current_key, "count": count, "pair": (i, user_key)}

    def notify_checkpoint_complete(self, checkpoint_id):
        if self.fail_marker and checkpoint_id >= 2 and not os.path.exists(self.fail_marker):
            with open(self.fail_marker, "w") as f:
                f.write(str(checkpoint_id))
            raise RuntimeError(f"injected failure after checkpoint {checkpoint_id}")


class CheckPair:
    """On the other side of a channel: the tuple field must still be a tuple."""

    def __call__(self, record):
        pair = record["pair"]
        if type(pair) is not tuple or type(pair[1]) is not tuple:
            raise TypeChanged(f"record field 'pair' arrived as {pair!r}")
        return {**record, "pair": repr(pair)}


def _pair_as_text(record):
    return {**record, "pair": repr(record["pair"])}


def tuple_seen_pipeline(root: str, *, fail: bool, backend: str = "heap",
                        records: int = 500, check_records: bool = True) -> Pipeline:
    """``check_records``: the map after the process function (another process) checks that
    the tuple field arrived as a tuple; without it the field is a string before it leaves
    (the issue's reproduction exercises the state alone)."""
    p = Pipeline(f"tuple-seen-{backend}", checkpoint=CheckpointConfig(
                     interval_ms=150, directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=100),
                 metadata_url=f"sqlite:///{root}/meta.db", state_backend=backend)
    (p.source(GeneratorSource(records, num_keys=7, records_per_second=400), uid="gen",
              parallelism=1)
      .key_by("key")
      .process(TupleSeen(os.path.join(root, "failed") if fail else None), uid="dedup",
               parallelism=2)
      .map(CheckPair() if check_records else _pair_as_text, uid="check", parallelism=1)
      .sink(FileSink(os.path.join(root, "out")), uid="out", parallelism=1))
    return p
