"""``connect(...).process(KeyedCoProcessFunction)`` takes changelogs on both inputs: each
record reaches ``process_element1/2`` with its ``_op`` field (engine/changelog.py) as the
source sent it, through the keyed exchange of a real job (the interval and window joins
refuse changelogs and point to this operator, so it must see the row kinds)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from changelog_pipelines import Expand, OrderEvents, changelog_of

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    KeyedCoProcessFunction,
    Pipeline,
    read_committed,
)
from airflow_checkpoint_provider.engine.changelog import OP_FIELD

N, SEEDS = 600, (3, 4)


class Echo(KeyedCoProcessFunction):
    """Emits what each input received: its row kind, order, version and event id."""

    def _echo(self, record, ctx, side):
        return {"input": side, "op": record.get(OP_FIELD, "(none)"), "order": record["order"],
                "version": record["version"], "id": record["id"], "key": ctx.current_key}

    def process_element1(self, record, ctx):
        return self._echo(record, ctx, 1)

    def process_element2(self, record, ctx):
        return self._echo(record, ctx, 2)


def expected() -> Counter:
    out: Counter = Counter()
    for side, seed in enumerate(SEEDS, start=1):
        src = OrderEvents(N, splits=4)
        for i in range(N):
            for r in changelog_of(src.record(i), seed):
                out[(side, r[OP_FIELD], r["order"], r["version"], i, r["order"])] += 1
    return out


@pytest.mark.timeout(120)
def test_a_co_process_function_sees_the_row_kind_of_both_changelog_inputs(workdir):
    root = str(workdir)
    p = Pipeline("co-changelog", max_parallelism=64,
                 checkpoint=CheckpointConfig(interval_ms=200, directory=os.path.join(root, "ckpt")),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    a, b = (p.source(OrderEvents(N, splits=4), uid=f"events{seed}", parallelism=2)
             .flat_map(Expand(seed), uid=f"expand{seed}") for seed in SEEDS)
    (a.connect(b).key_by("order", "order").process(Echo(), uid="co", parallelism=2)
      .sink(FileSink(os.path.join(root, "out")), uid="out"))
    result = p.run()
    assert result.status == "FINISHED", result.failure_reason
    got = Counter((r["input"], r["op"], r["order"], r["version"], r["id"], r["key"])
                  for r in read_committed(os.path.join(root, "out")))
    want = expected()
    assert {op for _, op, *_ in want} == {"+I", "-U", "+U", "-D"}, "all four kinds are sent"
    assert got == want
