"""The upsert materializer (``materialize_upserts``, Flink's ``SinkUpsertMaterializer``) on
its own: rows moving between join keys whose ``-D`` and ``+I`` reach it in either order, fed
to an upsert table (last operation per key wins, as the upsert sinks apply an epoch) give the
final table, where the raw changelog does not; equal rows counted; retractions of unknown
rows; snapshot and restore at another parallelism (heap and RocksDB); where ``sink()`` puts
one by itself; outer-join padding (``left_fields``/``right_fields``)."""

from __future__ import annotations

import random

import pytest

from airflow_checkpoint_provider.engine import GeneratorSource, Pipeline, PipelineDefinitionError
from airflow_checkpoint_provider.engine.connectors.files.sink import FileSink
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
from airflow_checkpoint_provider.engine.runtime.operators.registry import open_operator
from airflow_checkpoint_provider.engine.state.keygroups import (
    KeyGroupRange,
    key_group_for,
    key_group_range_for,
)

MAXP = 128
BACKENDS = ["heap", "rocksdb"]


def materializer_node(key=("order",)):
    p = Pipeline("t")
    p.source(GeneratorSource(1), uid="a").materialize_upserts(key=list(key), uid="m")
    return p.job_graph().nodes[-1]


def open_op(node, backend="heap", key_groups=None, restore=None):
    ctx = RuntimeContext(job_id="j" * 8, job_name="t", operator_uid=node.uid,
                         subtask_index=0, parallelism=1, attempt=0)
    return open_operator(node, ctx, key_groups or KeyGroupRange(0, MAXP - 1), MAXP,
                         {"kind": backend}, restore)


def upsert(table: dict, records: list[dict]) -> None:
    """What an upsert sink does with an epoch: per key, the last record wins."""
    for r in records:
        if r.get("_op", "+I") in ("-D", "-U"):
            table.pop(r["order"], None)
        else:
            table[r["order"]] = {k: v for k, v in r.items() if k != "_op"}


def moves(rng: random.Random, orders: int, steps: int) -> tuple[list[list[dict]], dict]:
    """A join's output when orders move between customers: per join subtask (2), its
    changelog; a move's ``-D`` (old customer) and ``+I`` (new one) on different subtasks
    when the customers' subtasks differ. Returns (per-subtask changelogs, final table)."""
    table: dict = {}
    subtasks: list[list[dict]] = [[], []]
    for _ in range(steps):
        o = rng.randrange(orders)
        old = table.get(o)
        if old is not None and rng.random() < 0.15:
            del table[o]
            subtasks[old["cid"] % 2].append({**old, "_op": "-D"})
            continue
        new = {"order": o, "cid": rng.randrange(6), "amount": rng.randrange(3)}
        if old is not None:
            subtasks[old["cid"] % 2].append({**old, "_op": "-D"})
        subtasks[new["cid"] % 2].append({**new, "_op": "+I"})
        table[o] = new
    return subtasks, table


def arrival(rng: random.Random, subtasks: list[list[dict]]) -> list[list[dict]]:
    """Both subtasks' records in random batches (each subtask's order kept)."""
    i = [0, 0]
    out = []
    while i[0] < len(subtasks[0]) or i[1] < len(subtasks[1]):
        s = rng.randrange(2) if all(i[k] < len(subtasks[k]) for k in (0, 1)) else \
            (0 if i[0] < len(subtasks[0]) else 1)
        n = rng.randint(1, 9)
        out.append(subtasks[s][i[s]:i[s] + n])
        i[s] += n
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_order_moves_give_the_final_upsert_table(backend):
    raw_wrong = 0
    for seed in range(8):
        rng = random.Random(seed)
        subtasks, final = moves(rng, 30, 600)
        batches = arrival(rng, subtasks)
        op = open_op(materializer_node(), backend)
        got: dict = {}
        for batch in batches:
            out = op.process(batch)
            assert all(r["_op"] in ("+U", "-D") for r in out)
            upsert(got, out)
        assert got == final, f"seed {seed}"
        assert op.metrics()["dropped_retractions"] == 0
        raw: dict = {}
        for batch in batches:
            upsert(raw, batch)
        raw_wrong += raw != final
        op.close()
    assert raw_wrong, "the arrival orders never reordered a move: the test shows nothing"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_late_delete_of_a_hidden_row_emits_nothing(backend):
    op = open_op(materializer_node(), backend)
    new = {"order": 1, "cid": 2, "amount": 5}
    old = {"order": 1, "cid": 1, "amount": 5}
    assert op.process([{**old, "_op": "+I"}]) == [{**old, "_op": "+U"}]
    assert op.process([{**new, "_op": "+I"}]) == [{**new, "_op": "+U"}]  # the +I overtook
    assert op.process([{**old, "_op": "-D"}]) == []                          # the late -D
    assert op.process([{**new, "_op": "-D"}]) == [{**new, "_op": "-D"}]
    # equal rows are counted: the second copy keeps the key's row alive
    assert op.process([new, new]) == [{**new, "_op": "+U"}] * 2
    assert op.process([{**new, "_op": "-U"}]) == []
    assert op.process([{**new, "_op": "-D"}]) == [{**new, "_op": "-D"}]
    # the last alive row goes: the one before it comes back
    op.process([old, new])
    assert op.process([{**new, "_op": "-D"}]) == [{**old, "_op": "+U"}]


@pytest.mark.parametrize("backend", BACKENDS)
def test_retractions_of_unknown_rows_are_counted_and_dropped_or_passed_as_a_delete(backend):
    op = open_op(materializer_node(), backend)
    ghost = {"order": 7, "cid": 1, "amount": 1, "_op": "-D"}
    # nothing alive for the key: a delete of it goes on (idempotent; keeps a table written
    # before the materializer existed right)
    assert op.process([ghost]) == [ghost]
    row = {"order": 7, "cid": 2, "amount": 1}
    op.process([row])
    assert op.process([ghost]) == []  # another row is alive: dropped
    assert op.metrics() == {"dropped_retractions": 2}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshot_restores_at_another_parallelism(backend, tmp_path):
    rng = random.Random(5)
    subtasks, final = moves(rng, 40, 400)
    batches = arrival(rng, subtasks)
    half = len(batches) // 2
    op = open_op(materializer_node(), backend)
    got: dict = {}
    for batch in batches[:half]:
        upsert(got, op.process(batch))
    snap = op.snapshot(1)
    handle, _, _ = snap.keyed.write(str(tmp_path), "m-0", True)
    op.close()
    spec = {"directory": str(tmp_path), "states": snap.states, "keyed": [handle],
            "operator_state": snap.operator_state}
    ranges = [key_group_range_for(i, 2, MAXP) for i in range(2)]
    restored = [open_op(materializer_node(), backend, r, spec) for r in ranges]
    for batch in batches[half:]:
        for r in batch:
            sub = 0 if key_group_for(r["order"], MAXP) in ranges[0] else 1
            upsert(got, restored[sub].process([r]))
    assert got == final


def _join_into(sink, *, join_p=2, sink_p=None, **kwargs):
    p = Pipeline("t")
    a = p.source(GeneratorSource(1), uid="a")
    b = p.source(GeneratorSource(1), uid="b")
    joined = a.key_by("k").regular_join(b.key_by("k"), how="left", uid="rj",
                                        parallelism=join_p)
    joined.key_by("order").sink(sink, uid="out", parallelism=sink_p, **kwargs)
    return p


def _kinds(p) -> list[str]:
    return [n.kind for n in p.job_graph().nodes]


def test_sink_adds_a_materializer_in_front_of_an_upsert_sink_of_a_parallel_join():
    upsert_sink = PostgresSink("postgresql://x/y", "t", mode="upsert", key=["order"])
    p = _join_into(upsert_sink)
    nodes = p.job_graph().nodes
    assert _kinds(p)[-2:] == ["upsert_materializer", "sink"]
    assert nodes[-2].uid == "out.upsert-materializer"
    graph = p.execution_graph()  # the materializer is chained with the sink
    assert [n.kind for n in graph.vertices[-1].nodes] == ["upsert_materializer", "sink"]
    # a join at parallelism 1 into a sink at 1: one channel, the order holds
    assert "upsert_materializer" not in _kinds(_join_into(upsert_sink, join_p=1, sink_p=1))
    # ... but not into a sink at 2
    assert "upsert_materializer" in _kinds(_join_into(upsert_sink, join_p=1, sink_p=2))
    # forced off, forced on, not for an appending sink
    assert "upsert_materializer" not in _kinds(_join_into(upsert_sink,
                                                          materialize_upserts=False))
    assert "upsert_materializer" in _kinds(_join_into(upsert_sink, join_p=1, sink_p=1,
                                                      materialize_upserts=True))
    assert "upsert_materializer" not in _kinds(_join_into(FileSink("/tmp/x")))
    with pytest.raises(PipelineDefinitionError, match="'out'.*upsert sinks"):
        _join_into(FileSink("/tmp/x"), materialize_upserts=True)


def test_an_explicit_materializer_is_not_doubled():
    p = Pipeline("t")
    a = p.source(GeneratorSource(1), uid="a")
    b = p.source(GeneratorSource(1), uid="b")
    (a.key_by("k").regular_join(b.key_by("k"), how="inner", uid="rj", parallelism=2)
      .materialize_upserts(key="order", uid="mine")
      .sink(PostgresSink("postgresql://x/y", "t", mode="upsert", key=["order"]), uid="out"))
    assert _kinds(p).count("upsert_materializer") == 1


def test_materializer_key_is_validated():
    p = Pipeline("t")
    a = p.source(GeneratorSource(1), uid="a")
    with pytest.raises(PipelineDefinitionError, match="'m'.*key"):
        a.materialize_upserts(key=["_op"], uid="m")
    with pytest.raises(PipelineDefinitionError, match="'m'.*key"):
        a.materialize_upserts(key=[], uid="m")


def _padded_join(how="full", **kwargs):
    p = Pipeline("t")
    a = p.source(GeneratorSource(1), uid="a")
    b = p.source(GeneratorSource(1), uid="b")
    a.key_by("k").regular_join(b.key_by("k"), how=how, uid="rj", left_primary_key="lid",
                               right_primary_key="rid", **kwargs)
    return p.job_graph().nodes[-1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_outer_rows_alone_are_padded_with_the_declared_fields_of_the_other_side(backend):
    node = _padded_join(left_fields=("lid", "k", "a"), right_fields=["rid", "k", "b"])
    op = open_op(node, backend)
    left = {"lid": 1, "k": 5, "a": "x"}
    right = {"rid": 2, "k": 5, "b": "y"}
    assert op.process_input(1, [left]) == [{"lid": 1, "k": 5, "a": "x", "rid": None,
                                            "b": None, "_op": "+I"}]
    out = op.process_input(2, [right])
    assert out == [{"lid": 1, "k": 5, "a": "x", "rid": None, "b": None, "_op": "-D"},
                   {"lid": 1, "k": 5, "a": "x", "rid": 2, "b": "y", "_op": "+I"}]
    out = op.process_input(1, [{"lid": 1, "k": 5, "_op": "-D"}])  # key-only delete
    assert out[-1] == {"rid": 2, "k": 5, "b": "y", "lid": None, "a": None, "_op": "+I"}
    # the join key of a row alone is its own (a padded field never overwrites a value)
    assert all(r["k"] == 5 for r in out)


def test_padding_fields_are_validated():
    with pytest.raises(PipelineDefinitionError, match="'rj'.*right_fields.*fn="):
        _padded_join(right_fields=("b",), fn=lambda a, b: {})
    with pytest.raises(PipelineDefinitionError, match="'rj'.*left_fields"):
        _padded_join(left_fields=("_op",))
