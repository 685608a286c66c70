"""The vectorized joins (runtime/vector_joins.py) against the per-record ones: the same rows,
late counts and buffered state on random out-of-order input (operators driven directly, both
state backends, string and integer keys, every join type), their snapshots restored at
other parallelisms, what happens when a savepoint of one path is restored into the other,
and end-to-end jobs: row path vs vectorized, exactly once under exceptions and SIGKILL
compared with a failure-free run, and a savepoint restored at another parallelism."""

from __future__ import annotations

import random
import shutil
from collections import Counter

import pyarrow as pa
import pytest
from operator_harness import BACKENDS, MAXP, open_op, steps_for, two_sources
from pipelines import Background, FaultPlan
from vector_join_pipelines import OUTPUTS, committed, normalized, vector_join_pipeline

from airflow_checkpoint_provider.engine import (
    GeneratorSource,
    Pipeline,
    PipelineDefinitionError,
    SlidingWindows,
    TumblingWindows,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.errors import RestoreError
from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.runtime.batches import as_arrow
from airflow_checkpoint_provider.engine.runtime.operators.joins.vectorized import (
    VectorIntervalJoinOperator,
    VectorWindowJoinOperator,
)
from airflow_checkpoint_provider.engine.state.keygroups import (
    key_group_range_for,
)


def interval_node(vectorized: bool, how: str = "inner", lower: int = -20, upper: int = 30):
    p = Pipeline("t")
    a, b = two_sources(p)
    a.key_by("k").interval_join(b.key_by("k"), how=how).between(lower, upper).process(
        uid="ij", vectorized=vectorized)
    return p.job_graph().nodes[-1]


def window_node(vectorized: bool, assigner):
    p = Pipeline("t")
    a, b = two_sources(p)
    a.join(b).where("k").equal_to("k").window(assigner).apply(uid="wj", vectorized=vectorized)
    return p.job_graph().nodes[-1]


def rows_of(out) -> list[dict]:
    """An operator's output (a batch, a list of batches, dicts) as dicts."""
    if isinstance(out, pa.RecordBatch):
        return out.to_pylist()
    rows: list[dict] = []
    for item in out:
        rows.extend(rows_of(item) if isinstance(item, list | pa.RecordBatch) else [item])
    return rows


def script(seed: int, int_keys: bool, steps: int = 30):
    """Random steps: ``("in", input, rows)`` batches out of order by up to 60 ms (some rows
    late), ``("wm", watermark)`` behind the newest time by 0..40 ms."""
    rnd = random.Random(seed)
    out, t, next_id = [], 1_000, 0
    for _ in range(steps):
        for side in (1, 2):
            rows = []
            for _ in range(rnd.randint(0, 25)):
                key = rnd.randrange(6)
                rows.append({"id": next_id, "k": key if int_keys else f"k{key}",
                             "ts": t + rnd.randint(-60, 40),
                             ("va" if side == 1 else "vb"): rnd.randrange(100)})
                next_id += 1
            out.append(("in", side, rows))
        t += rnd.randint(10, 50)
        out.append(("wm", t - rnd.randint(0, 40)))
    out.append(("wm", MAX_WATERMARK))
    return out


def run_script(op, steps, vectorized: bool, check=None) -> Counter:
    got: Counter = Counter()
    for step in steps:
        if step[0] == "in":
            _, side, rows = step
            batch = pa.RecordBatch.from_pylist(rows) if vectorized else rows
            got.update(normalized(r) for r in rows_of(op.process_input(side, batch)))
        else:
            got.update(normalized(r) for r in rows_of(op.on_watermark(step[1])))
        if check is not None:
            check(op)
    return got


def equivalent(row_node, vec_node, backend, steps):
    row_op, vec_op = open_op(row_node, backend), open_op(vec_node, backend)
    trace: list = []
    row = run_script(row_op, steps, False, lambda op: trace.append(
        (op.dropped_late, op.buffered_rows())))
    vec_trace: list = []
    vec = run_script(vec_op, steps, True, lambda op: vec_trace.append(
        (op.dropped_late, op.buffered_rows())))
    row_op.close()
    vec_op.close()
    assert sum(row.values()) > 0
    assert vec == row, "the same output rows"
    assert vec_trace == trace, "the same late rows and buffered rows after every step"


# -- the vectorized operators against the per-record ones -------------------------------------
def test_the_vectorized_flag_picks_the_vectorized_operators():
    assert isinstance(open_op(interval_node(True)), VectorIntervalJoinOperator)
    assert isinstance(open_op(window_node(True, TumblingWindows(10))), VectorWindowJoinOperator)
    assert not isinstance(open_op(interval_node(False)), VectorIntervalJoinOperator)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("int_keys", [False, True])
def test_interval_join_matches_the_row_path(backend, how, int_keys):
    for seed in range(3):
        equivalent(interval_node(False, how), interval_node(True, how), backend,
                   script(seed, int_keys))


@pytest.mark.parametrize("bounds", [(0, 0), (-50, -20), (10, 60)])
def test_interval_join_matches_the_row_path_for_one_sided_and_point_ranges(bounds):
    equivalent(interval_node(False, "full", *bounds), interval_node(True, "full", *bounds),
               "heap", script(7, False))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("assigner", [TumblingWindows(50), SlidingWindows(60, 20)],
                         ids=["tumbling", "sliding"])
@pytest.mark.parametrize("int_keys", [False, True])
def test_window_join_matches_the_row_path(backend, assigner, int_keys):
    for seed in range(3):
        equivalent(window_node(False, assigner), window_node(True, assigner), backend,
                   script(seed, int_keys))


def test_a_window_join_output_has_the_window_bounds_and_left_fields_win():
    op = open_op(window_node(True, TumblingWindows(100)))
    op.process_input(1, as_arrow([{"id": 1, "k": "x", "ts": 10}]))
    op.process_input(2, as_arrow([{"id": 2, "k": "x", "ts": 20, "b": 5}]))
    assert rows_of(op.on_watermark(99)) == [
        {"id": 1, "k": "x", "ts": 10, "b": 5, "window_start": 0, "window_end": 100}]
    assert op.buffered_rows() == 0


def test_as_arrow_keeps_fields_that_only_later_rows_have():
    """Regression: from_pylist took the first row's columns only, so dict rows of mixed
    shapes (the row path's outer-join output) lost fields entering a vectorized operator."""
    rows = [{"a": 1, "k": "x"}, {"b": 2, "k": "y"}]
    assert as_arrow(rows).to_pylist() == [{"a": 1, "k": "x", "b": None},
                                          {"a": None, "k": "y", "b": 2}]


# -- snapshots ------------------------------------------------------------------------------
def _snapshot(op, directory) -> dict:
    snap = op.snapshot(1)
    handles = [snap.keyed.write(str(directory), "op-0", True)[0]] if snap.keyed.write else []
    return {"directory": str(directory), "states": snap.states, "keyed": handles,
            "operator_state": snap.operator_state}


@pytest.mark.parametrize("make", [lambda v: interval_node(v, "full"),
                                  lambda v: window_node(v, SlidingWindows(60, 20))],
                         ids=["interval-full", "window-sliding"])
@pytest.mark.parametrize("new", [1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_vectorized_join_state_restores_at_another_parallelism(tmp_path, make, new, backend):
    """Half the input, a snapshot, the rest into ``new`` restored subtasks (each fed the rows
    of its key groups): the same rows as one uninterrupted run."""
    steps = script(3, False, steps=40)
    half = len(steps) // 2
    whole = run_script(open_op(make(True), backend), steps, True)
    first = open_op(make(True), backend)
    got = run_script(first, steps[:half], True)
    spec = _snapshot(first, tmp_path)
    assert spec["keyed"], "the snapshot holds buffered rows"
    for sub in range(new):
        op = open_op(make(True), backend, key_group_range_for(sub, new, MAXP), spec, sub, new)
        assert op.watermark == first.watermark
        got += run_script(op, steps_for(op, steps[half:]), True)
    assert got == whole


def test_a_row_path_snapshot_restored_into_the_vectorized_join_fails_naming_the_uid(tmp_path):
    row = open_op(interval_node(False, "left"))
    row.process_input(1, [{"id": 1, "k": "x", "ts": 100}])
    spec = _snapshot(row, tmp_path)
    with pytest.raises(RestoreError, match=r"'ij'.*vectorized"):
        open_op(interval_node(True, "left"), restore=spec)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_vectorized_snapshot_restored_into_the_row_path_fails_naming_the_uid(tmp_path,
                                                                               backend):
    vec = open_op(window_node(True, TumblingWindows(50)))
    vec.process_input(1, as_arrow([{"id": 1, "k": "x", "ts": 100}]))
    spec = _snapshot(vec, tmp_path)
    with pytest.raises(RestoreError, match=r"'wj'.*vectorized"):
        open_op(window_node(False, TumblingWindows(50)), backend, restore=spec)


def test_a_vectorized_window_join_refuses_other_windows_on_restore(tmp_path):
    vec = open_op(window_node(True, TumblingWindows(50)))
    vec.process_input(1, as_arrow([{"id": 1, "k": "x", "ts": 100}]))
    spec = _snapshot(vec, tmp_path)
    with pytest.raises(RestoreError, match="re-cut"):
        open_op(window_node(True, TumblingWindows(100)), restore=spec)


# -- the DSL ----------------------------------------------------------------------------------
def test_the_dsl_refuses_vectorized_joins_it_cannot_vectorize():
    p = Pipeline("t")
    a, b = two_sources(p)
    with pytest.raises(PipelineDefinitionError, match="no join function"):
        a.key_by("k").interval_join(b.key_by("k")).between(0, 5).process(
            lambda left, right: left, uid="ij", vectorized=True)
    with pytest.raises(PipelineDefinitionError, match="field-name keys"):
        a.key_by(lambda r: r["k"]).interval_join(b.key_by("k")).between(0, 5).process(
            uid="ij", vectorized=True)
    with pytest.raises(PipelineDefinitionError, match="field-name keys"):
        (a.join(b).where("k").equal_to(lambda r: r["k"]).window(TumblingWindows(10))
         .apply(uid="wj", vectorized=True))
    fn_time = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_fn=lambda r: r["ts"])
    c = p.source(GeneratorSource(1), uid="c", watermarks=fn_time)
    with pytest.raises(PipelineDefinitionError, match="timestamp_field"):
        a.key_by("k").interval_join(c.key_by("k")).between(0, 5).process(
            uid="ij", vectorized=True)


def test_null_keys_fail_with_a_clear_error():
    from airflow_checkpoint_provider.engine.errors import BadRecordError

    op = open_op(interval_node(True))
    with pytest.raises(BadRecordError, match="null in 1 row"):
        op.process_input(1, as_arrow([{"id": 1, "k": None, "ts": 5}, {"id": 2, "k": "x",
                                                                       "ts": 5}]))


# -- end to end -----------------------------------------------------------------------------
def _run(root, **kwargs) -> dict[str, Counter]:
    result = vector_join_pipeline(str(root), **kwargs).run()
    assert result.status == "FINISHED", result.failure_reason
    return {o: committed(str(root), o) for o in OUTPUTS}


#: the end-to-end jobs run on one worker, so the failure-free vectorized run (string keys) is
#: made once and compared with every faulty or restored run, on either backend
JOBS = pytest.mark.xdist_group("vector-joins-jobs")


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory):
    """``clean_run()``: the committed rows of a failure-free vectorized job with string keys
    on the heap backend (run once per session). The reference of the faulty and restored
    runs of both backends: the input and so the output depend neither on the source rate nor
    on the state backend (``test_a_vectorized_job_commits_the_rows_of_the_row_path_job``
    compares the backends' jobs with the row path's; a RocksDB run that differs from the
    heap reference fails either way)."""
    runs: dict[str, dict[str, Counter]] = {}

    def get() -> dict[str, Counter]:
        if "heap" not in runs:
            runs["heap"] = _run(tmp_path_factory.mktemp("clean-heap"), vectorized=True,
                                state_backend="heap")
        return runs["heap"]

    return get


@JOBS
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend,int_keys", [("heap", False), ("rocksdb", True)])
def test_a_vectorized_job_commits_the_rows_of_the_row_path_job(tmp_path, clean_run, backend,
                                                               int_keys):
    row = _run(tmp_path / "row", vectorized=False, state_backend=backend, int_keys=int_keys)
    vec = (_run(tmp_path / "vec", vectorized=True, state_backend=backend, int_keys=int_keys)
           if int_keys else clean_run())
    for out in OUTPUTS:
        assert sum(row[out].values()) > 1_000
        assert vec[out] == row[out], out


FAULTS = [("record", 1_500), ("kill", 3_500), ("record", 5_000)]


@JOBS
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend,unaligned", [("heap", False), ("rocksdb", False),
                                               ("heap", True)])
def test_vectorized_joins_are_exactly_once_under_exceptions_and_sigkill(tmp_path, clean_run,
                                                                        backend, unaligned):
    clean = clean_run()
    faults = FaultPlan(str(tmp_path / "faults"), FAULTS)
    result = vector_join_pipeline(str(tmp_path / "faulty"), vectorized=True,
                                  state_backend=backend, faults=faults, rate=5_000,
                                  unaligned=unaligned).run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    for out in OUTPUTS:
        assert committed(str(tmp_path / "faulty"), out) == clean[out], out


@JOBS
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_vectorized_join_savepoint_restores_at_another_parallelism(tmp_path, clean_run):
    """Stop with a savepoint mid-stream, then a job that runs the vectorized joins again at
    parallelism 3 restores it: the committed rows equal a failure-free run's."""
    clean = clean_run()
    first = tmp_path / "first"
    bg = Background(vector_join_pipeline(str(first), vectorized=True, state_backend="rocksdb",
                                         rate=1_000))
    job = bg.wait_running(min_checkpoints=2, timeout=60)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    location = req.result["location"]
    assert 0 < sum(committed(str(first), "ij").values()) < sum(clean["ij"].values())
    from airflow_checkpoint_provider.engine.state_io.read import read_state_table

    held = read_state_table(location, "tw")  # the state API reads the join's Arrow state
    assert held.num_rows and set(held.column("state").to_pylist()) == {"window-join.vectorized"}
    second = tmp_path / "second"
    for out in OUTPUTS:
        shutil.copytree(first / out, second / out)
    result = vector_join_pipeline(str(second), vectorized=True, state_backend="rocksdb",
                                  parallelism=3, join_parallelism=3).run(
        restore=location, trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == location
    for out in OUTPUTS:
        assert committed(str(second), out) == clean[out], out
