"""engine/vectorized_ops.temporal_table_join against the per-record temporal join it
replaces (``temporal_join(...).process()``): the same rows on random input (versions with
equal times, deletes, probes before and after their versions, late rows), on a versioned
table and on a static table, inner and left; its snapshot restored at other parallelisms
under both state backend settings; the refusal of a per-record savepoint. Operators driven
directly, in process (seconds)."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest
from operator_harness import BACKENDS, MAXP, open_op, restore_spec, steps_for

from airflow_checkpoint_provider.engine import (
    GeneratorSource,
    Pipeline,
    PipelineDefinitionError,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.errors import RestoreError
from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.runtime.operators.vectorized.temporal import (
    TemporalTableJoinOperator,
)
from airflow_checkpoint_provider.engine.state.keygroups import key_group_range_for
from airflow_checkpoint_provider.engine.vectorized_ops import temporal_table_join


def node(vectorized: bool, how: str = "inner", timed: bool = True):
    p = Pipeline("t")
    wm = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="ts")
    probe = p.source(GeneratorSource(1), uid="a", watermarks=wm).key_by("k")
    table = p.source(GeneratorSource(1), uid="b", watermarks=wm if timed else None).key_by("k")
    if vectorized:
        temporal_table_join(probe, table, uid="tj", how=how)
    else:
        probe.temporal_join(table, how=how).process(uid="tj")
    return p.job_graph().nodes[-1]


def script(seed: int, steps: int = 40, timed: bool = True) -> list:
    """Probes and versions of 12 keys, times a little out of order (some late), versions
    sharing a time (the later one wins), deletes; a static table comes first, whole."""
    rnd = random.Random(seed)
    out: list = []
    t, n = 100, 0
    if not timed:
        table = [{"k": rnd.randrange(12), "ts": 0, "v": f"s{i}", "_op": "+I"} for i in range(15)]
        table += [{"k": table[0]["k"], "ts": 0, "v": "gone", "_op": "-D"}]
        out.append(("in", 2, table))
    for _ in range(steps):
        probes = [{"k": rnd.randrange(12), "ts": t + rnd.randint(-15, 30), "p": f"p{n + i}"}
                  for i in range(rnd.randint(0, 12))]
        n += len(probes)
        out.append(("in", 1, probes))
        if timed:
            versions = [{"k": rnd.randrange(12), "ts": t + rnd.choice((-10, 0, 0, 5, 20)),
                         "v": f"v{n}-{i}", "_op": "-D" if rnd.random() < 0.1 else "+U"}
                        for i in range(rnd.randint(0, 6))]
            out.append(("in", 2, versions))
        t += rnd.randint(5, 25)
        out.append(("wm", t - rnd.randint(0, 20)))
    out.append(("wm", MAX_WATERMARK))
    return out


def norm(row: dict) -> tuple:
    """A row without ``_op`` and without nulls (the per-record left join emits a probe alone,
    the vectorized one with null table columns)."""
    return tuple(sorted((k, v) for k, v in row.items() if v is not None and k != "_op"))


def rows_of(out) -> list[dict]:
    rows: list[dict] = []
    for item in out:
        rows.extend(item.to_pylist() if isinstance(item, pa.RecordBatch) else
                    rows_of(item) if isinstance(item, list) else [item])
    return rows


def run_script(op, steps, vectorized: bool) -> Counter:
    got: Counter = Counter()
    for step in steps:
        if step[0] == "in":
            if step[2]:
                rows = step[2]
                out = op.process_input(step[1], pa.RecordBatch.from_pylist(rows) if vectorized
                                       else [dict(r) for r in rows])
                got.update(norm(r) for r in rows_of([out]))
        else:
            got.update(norm(r) for r in rows_of(op.on_watermark(step[1])))
    return got


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("timed", [True, False])
def test_the_vectorized_temporal_join_emits_the_rows_of_the_per_record_one(seed, how, timed):
    steps = script(seed, timed=timed)
    op = open_op(node(True, how, timed))
    assert isinstance(op, TemporalTableJoinOperator)
    vec = run_script(op, steps, True)
    row_op = open_op(node(False, how, timed))
    row = run_script(row_op, steps, False)
    assert sum(row.values()) > 30
    assert vec == row
    assert op.dropped_late == row_op.dropped_late
    if timed:
        assert op.dropped_late > 0, "the script has late rows"
    assert len(op.backend.p_seq) == 0, "every probe fired"
    assert len(op.backend.v_seq) <= 12, "a version per key at most once the watermark passed"
    assert not op.backend.v_del.any(), "a deleted row leaves the state"


@pytest.mark.parametrize("new", [1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timed", [True, False])
def test_the_temporal_join_state_restores_at_another_parallelism(tmp_path, new, backend, timed):
    steps = script(11, steps=50, timed=timed)
    whole = run_script(open_op(node(True, "left", timed), backend), steps, True)
    half = len(steps) // 2
    first = open_op(node(True, "left", timed), backend)
    got = run_script(first, steps[:half], True)
    spec = restore_spec(first, tmp_path)
    assert spec["keyed"], "the snapshot holds state"
    for sub in range(new):
        op = open_op(node(True, "left", timed), backend, key_group_range_for(sub, new, MAXP),
                     spec, sub, new)
        got += run_script(op, steps_for(op, steps[half:]), True)
    assert got == whole


def test_a_per_record_temporal_join_savepoint_is_refused_by_the_vectorized_one(tmp_path):
    row = open_op(node(False))
    run_script(row, script(1, steps=5)[:-1], False)
    spec = restore_spec(row, tmp_path)
    with pytest.raises(RestoreError, match=r"'tj'.*per-record.*temporal_table_join.*new uid"):
        open_op(node(True), restore=spec)
    vec = open_op(node(True))
    run_script(vec, script(1, steps=5)[:-1], True)
    with pytest.raises(RestoreError, match=r"'tj'.*temporal-table-join.vectorized.*"
                                           r"temporal_join"):
        open_op(node(False), restore=restore_spec(vec, tmp_path / "v"))


def test_the_builder_needs_field_keys_and_time_columns():
    p = Pipeline("t")
    wm = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="ts")
    a = p.source(GeneratorSource(1), uid="a", watermarks=wm)
    b = p.source(GeneratorSource(1), uid="b")
    with pytest.raises(PipelineDefinitionError, match="temporal_table_join 'x'.*table input"):
        temporal_table_join(a.key_by("k"), b.key_by(lambda r: r["k"]), uid="x")
    with pytest.raises(PipelineDefinitionError, match="'y'.*probe.*needs event time"):
        temporal_table_join(b.key_by("k"), a.key_by("k"), uid="y")
    with pytest.raises(PipelineDefinitionError, match="'z'.*how='right'"):
        temporal_table_join(a.key_by("k"), b.key_by("k"), uid="z", how="right")
