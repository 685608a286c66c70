"""engine/vectorized_ops against the per-record operators they replace: the same rows on
random input with ties, early rows and duplicates (operators driven directly, in process),
their snapshots restored at other parallelisms (each restored subtask fed the rows of its
key groups) under both state backend settings, and the refusal of a per-record savepoint."""

from __future__ import annotations

import random
import sys
from collections import Counter

import pyarrow as pa
import pytest
from operator_harness import BACKENDS, MAXP, open_op, restore_spec, steps_for
from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine import (
    GeneratorSource,
    Pipeline,
    PipelineDefinitionError,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.errors import RestoreError, StateMigrationError
from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.runtime.operators.vectorized.latest import LatestOperator
from airflow_checkpoint_provider.engine.runtime.operators.vectorized.max_join import MaxJoinOperator
from airflow_checkpoint_provider.engine.runtime.operators.vectorized.unique_join import (
    UniqueJoinOperator,
)
from airflow_checkpoint_provider.engine.state.keygroups import key_group_for, key_group_range_for
from airflow_checkpoint_provider.engine.vectorized_ops import (
    latest_by_key,
    max_by_join,
    unique_key_join,
)

ROOT = str(REPO_ROOT)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from bench.nexmark.join_queries import WIN_AUCTION, WinningBid  # noqa: E402

WIN_RIGHT = {"auction": "auction", "bidder": "bidder", "price": "price",
             "date_time": "bid_date_time", "extra": "bid_extra"}


def _sources(p):
    wm = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="date_time")
    return (p.source(GeneratorSource(1), uid="a", watermarks=wm),
            p.source(GeneratorSource(1), uid="b", watermarks=wm))


def win_node(vectorized: bool, by: str = "price"):
    p = Pipeline("t")
    a, b = _sources(p)
    if vectorized:
        max_by_join(a.key_by("id"), b.key_by("auction"), uid="wb", start="date_time",
                    end="expires", right_time="date_time", by=by, right_columns=WIN_RIGHT)
    else:
        a.connect(b).key_by("id", "auction").process(WinningBid(), uid="wb")
    return p.job_graph().nodes[-1]


def latest_node(vectorized: bool):
    p = Pipeline("t")
    s = _sources(p)[0].key_by("k")
    if vectorized:
        latest_by_key(s, by="date_time", uid="lt")
    else:
        s.reduce(lambda a, b: b if b["date_time"] >= a["date_time"] else a, uid="lt")
    return p.job_graph().nodes[-1]


def unique_node():
    p = Pipeline("t")
    a, b = _sources(p)
    unique_key_join(a.key_by("k"), b.key_by("id"), uid="uj")
    return p.job_graph().nodes[-1]


def rows_of(out) -> list[dict]:
    if isinstance(out, pa.RecordBatch | pa.Table):
        return out.to_pylist()
    rows: list[dict] = []
    for item in out:
        rows.extend(rows_of(item) if isinstance(item, list | pa.RecordBatch) else [item])
    return rows


def norm(row: dict) -> tuple:
    return tuple(sorted(row.items()))


def win_script(seed: int, steps: int = 40) -> list:
    """Auctions (unique ids, some after their bids, some never) and bids with many equal
    prices and times, out of order within a batch; watermarks behind the newest time."""
    rnd = random.Random(seed)
    out, t, next_id = [], 1_000, 0
    for _ in range(steps):
        auctions = []
        for _ in range(rnd.randint(0, 3)):
            start = t + rnd.randint(-30, 10)
            auctions.append({**{c: f"{c}{next_id}" for c in WIN_AUCTION}, "id": next_id,
                             "date_time": start, "expires": start + rnd.randint(0, 150),
                             "seller": next_id % 3, "category": next_id % 2,
                             "initial_bid": 1, "reserve": 2})
            next_id += 1
        bids = [{"auction": rnd.randrange(max(1, next_id + 3)), "bidder": rnd.randrange(50),
                 "price": rnd.randrange(4), "date_time": t + rnd.randint(-40, 40),
                 "extra": f"x{rnd.randrange(1000)}"} for _ in range(rnd.randint(0, 30))]
        # bids first: many come before their auction in the same step
        out += [("in", 2, bids), ("in", 1, auctions)]
        t += rnd.randint(5, 40)
        out.append(("wm", t - rnd.randint(20, 60)))
    out.append(("wm", MAX_WATERMARK))
    return out


def run_script(op, steps, vectorized: bool) -> Counter:
    got: Counter = Counter()
    for step in steps:
        if step[0] == "in":
            _, side, rows = step
            if not rows:
                continue
            batch = pa.RecordBatch.from_pylist(rows) if vectorized else rows
            out = op.process_input(side, batch) if side else op.process(batch)
            got.update(norm(r) for r in rows_of(out))
        else:
            got.update(norm(r) for r in rows_of(op.on_watermark(step[1])))
    return got


def restored_run(make, backend, steps, tmp_path, new: int, key_of) -> Counter:
    """Half of ``steps``, a snapshot, the rest into ``new`` restored subtasks."""
    half = len(steps) // 2
    first = open_op(make(), backend)
    got = run_script(first, steps[:half], True)
    spec = restore_spec(first, tmp_path)
    assert spec["keyed"], "the snapshot holds state"
    for sub in range(new):
        op = open_op(make(), backend, key_group_range_for(sub, new, MAXP), spec, sub, new)
        got += run_script(op, steps_for(op, steps[half:], key_of), True)
    return got


# -- max_by_join: the winning bid ------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_max_by_join_emits_the_rows_of_the_per_record_winning_bid(seed, backend):
    steps = win_script(seed)
    op = open_op(win_node(True), backend)
    assert isinstance(op, MaxJoinOperator)
    vec = run_script(op, steps, True)
    row = run_script(open_op(win_node(False), "heap"), steps, False)
    assert sum(row.values()) > 10
    assert vec == row
    assert len(op.backend) == 0, "every auction closed, every waiting bid dropped"


@pytest.mark.parametrize("new", [1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_max_by_join_state_restores_at_another_parallelism(tmp_path, new, backend):
    steps = win_script(7, steps=60)
    whole = run_script(open_op(win_node(True), backend), steps, True)
    got = restored_run(lambda: win_node(True), backend, steps, tmp_path, new,
                       lambda side, r: r["id"] if side == 1 else r["auction"])
    assert got == whole


def test_max_by_join_compacts_closed_auctions_and_keeps_the_result(monkeypatch):
    from airflow_checkpoint_provider.engine.runtime.operators.vectorized.max_join import (
        MaxJoinState,
    )

    monkeypatch.setattr(MaxJoinState, "COMPACT_MIN", 2)
    steps = win_script(5, steps=80)
    op = open_op(win_node(True))
    assert run_script(op, steps, True) == run_script(open_op(win_node(False)), steps, False)


def test_a_winning_bid_co_process_savepoint_is_refused_by_max_by_join(tmp_path):
    row = open_op(win_node(False))
    run_script(row, win_script(1, steps=5)[:-1], False)
    spec = restore_spec(row, tmp_path)
    with pytest.raises(RestoreError, match=r"'wb'.*per-record.*max_by_join.*new uid"):
        open_op(win_node(True), restore=spec)


def test_max_by_join_refuses_another_by_column_on_restore(tmp_path):
    op = open_op(win_node(True))
    run_script(op, win_script(1, steps=5)[:-1], True)
    spec = restore_spec(op, tmp_path)
    with pytest.raises(StateMigrationError, match="'wb'.*by"):
        open_op(win_node(True, by="bidder"), restore=spec)


# -- latest_by_key -----------------------------------------------------------------------------
def latest_script(seed: int, steps: int = 30) -> list:
    rnd = random.Random(seed)
    out = []
    for n in range(steps):
        out.append(("in", 0, [{"k": rnd.randrange(40), "date_time": rnd.randrange(30),
                               "v": f"{n}-{i}"} for i in range(rnd.randint(0, 40))]))
    return out


def _last_per_key(got: list[dict]) -> dict:
    return {r["k"]: r for r in got}


def _emitted(op, steps, vectorized) -> list[dict]:
    rows = []
    for _, _, batch in steps:
        if batch:
            rows += rows_of(op.process(pa.Table.from_pylist(batch) if vectorized else batch))
    return rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_latest_by_key_ends_with_the_reduce_rows_and_emits_a_key_once_per_batch(backend):
    steps = latest_script(3)
    op = open_op(latest_node(True), backend)
    assert isinstance(op, LatestOperator)
    vec = []
    for _, _, batch in steps:
        out = rows_of(op.process(pa.Table.from_pylist(batch))) if batch else []
        assert len({r["k"] for r in out}) == len(out), "a key at most once per batch"
        vec += out
    row = _emitted(open_op(latest_node(False), "heap"), steps, False)
    assert _last_per_key(vec) == _last_per_key(row)
    assert len(vec) < len(row), "only the rows that changed a key's latest"


@pytest.mark.parametrize("new", [1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_latest_by_key_state_restores_at_another_parallelism(tmp_path, new, backend):
    steps = latest_script(9, steps=40)
    whole = _last_per_key(_emitted(open_op(latest_node(True), backend), steps, True))
    half = len(steps) // 2
    first = open_op(latest_node(True), backend)
    got = _emitted(first, steps[:half], True)
    spec = restore_spec(first, tmp_path)
    for sub in range(new):
        op = open_op(latest_node(True), backend, key_group_range_for(sub, new, MAXP), spec,
                     sub, new)
        mine = [(s[0], s[1], [r for r in s[2] if key_group_for(r["k"], MAXP)
                              in op.backend.key_groups]) for s in steps[half:]]
        got += _emitted(op, mine, True)
    assert _last_per_key(got) == whole


def test_a_reduce_savepoint_is_refused_by_latest_by_key(tmp_path):
    row = open_op(latest_node(False))
    _emitted(row, latest_script(1, steps=3), False)
    spec = restore_spec(row, tmp_path)
    with pytest.raises(RestoreError, match=r"'lt'.*per-record.*latest_by_key"):
        open_op(latest_node(True), restore=spec)


# -- unique_key_join ---------------------------------------------------------------------------
def unique_script(seed: int, steps: int = 30) -> list:
    rnd = random.Random(seed)
    out, next_id = [], 0
    for n in range(steps):
        out.append(("in", 1, [{"k": rnd.randrange(next_id + 5), "s": f"{n}-{i}"}
                              for i in range(rnd.randint(0, 20))]))
        table = [{"id": next_id + i, "t": f"t{next_id + i}"} for i in range(rnd.randint(0, 3))]
        if table and rnd.random() < 0.3:  # a repeated id: the first row counts
            table.append({"id": table[0]["id"], "t": "repeat"})
        next_id += len({r["id"] for r in table})
        out.append(("in", 2, table))
    return out


def unique_reference(steps) -> Counter:
    table: dict = {}
    stream = []
    for _, side, rows in steps:
        for r in rows:
            if side == 2:
                table.setdefault(r["id"], r)
            else:
                stream.append(r)
    return Counter(norm({**r, **{k: v for k, v in table[r["k"]].items() if k not in r}})
                   for r in stream if r["k"] in table)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_key_join_emits_each_stream_row_with_its_keys_first_table_row(backend):
    steps = unique_script(4)
    op = open_op(unique_node(), backend)
    assert isinstance(op, UniqueJoinOperator)
    got = run_script(op, steps, True)
    assert sum(got.values()) > 20
    assert got == unique_reference(steps)


@pytest.mark.parametrize("new", [1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_key_join_state_restores_at_another_parallelism(tmp_path, new, backend):
    steps = unique_script(8, steps=40)
    got = restored_run(unique_node, backend, steps, tmp_path, new,
                       lambda side, r: r["k"] if side == 1 else r["id"])
    assert got == unique_reference(steps)


# -- the builders --------------------------------------------------------------------------------
def test_the_builders_need_field_keys():
    p = Pipeline("t")
    a, b = _sources(p)
    with pytest.raises(PipelineDefinitionError, match="max_by_join 'x'.*left input.*key_by"):
        max_by_join(a.key_by(lambda r: r["id"]), b.key_by("auction"), uid="x", start="s",
                    end="e", right_time="t", by="p")
    with pytest.raises(PipelineDefinitionError, match="latest_by_key 'y'.*key_by"):
        latest_by_key(a.key_by(lambda r: r["k"]), by="date_time", uid="y")
    with pytest.raises(PipelineDefinitionError, match="unique_key_join 'z'.*table input"):
        unique_key_join(a.key_by("k"), b.key_by(lambda r: r["id"]), uid="z")


def test_a_max_by_join_savepoint_restored_into_the_co_process_names_its_state(tmp_path):
    vec = open_op(win_node(True))
    run_script(vec, win_script(1, steps=5)[:-1], True)
    spec = restore_spec(vec, tmp_path)
    with pytest.raises(RestoreError, match=r"'wb'.*vectorized \(max-by-join.vectorized\).*"
                                           r"co_process"):
        open_op(win_node(False), restore=spec)


@pytest.mark.parametrize("seed", range(4))
def test_best_per_group_picks_the_rows_of_the_four_key_lexsort(seed):
    """best_per_group (q4's per-key winner: one argsort and linear passes) against
    first_per_group's lexsort on data full of ties in by and time, seqs in and out of order,
    float by with NaN (the fallback)."""
    import numpy as np

    from airflow_checkpoint_provider.engine.runtime.operators.vectorized.common import (
        best_per_group,
        first_per_group,
    )

    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 50, 3000):
        groups = rng.integers(0, max(1, n // 5), n)
        by = rng.integers(0, 4, n)
        time = rng.integers(0, 3, n).astype(np.int64)
        for seq in (np.arange(n), rng.permutation(n)):
            for high in (by, by.astype(np.float64),
                         np.where(rng.random(n) < 0.1, np.nan, by.astype(np.float64))):
                got = best_per_group(groups, high, time, seq)
                want = first_per_group(groups, seq, time, -high)
                assert sorted(got.tolist()) == sorted(want.tolist())
