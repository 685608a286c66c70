"""The regular join of changelogs (``regular_join``) against an independent reference: random
interleaved changelogs of two tables (inserts, updates, upserts, deletes, duplicates,
retractions of unknown rows; with and without primary keys; key-only retractions), every
``how``, heap and RocksDB: the emitted changelog applied to a multiset (never retracting a
row it did not emit) equals pandas' merge of the final tables. Also: outer-join padding
transitions, field collisions, state TTL, savepoint restore at another parallelism."""

from __future__ import annotations

import random

import pytest
from regular_join_model import Materialized, changelog, interleave, reference

from airflow_checkpoint_provider.engine import (
    BadRecordError,
    GeneratorSource,
    Pipeline,
    PipelineDefinitionError,
)
from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
from airflow_checkpoint_provider.engine.runtime.operators.registry import open_operator
from airflow_checkpoint_provider.engine.state.keygroups import (
    KeyGroupRange,
    key_group_for,
    key_group_range_for,
)

MAXP = 128
BACKENDS = ["heap", "rocksdb"]
HOWS = ["inner", "left", "right", "full"]


def join_node(how="inner", left_pk="lid", right_pk="rid", fn=None, ttl=None, lkey="k",
              rkey="k"):
    p = Pipeline("t")
    a = p.source(GeneratorSource(1), uid="a")
    b = p.source(GeneratorSource(1), uid="b")
    a.key_by(lkey).regular_join(b.key_by(rkey), how=how, uid="rj", left_primary_key=left_pk,
                                right_primary_key=right_pk, fn=fn, state_ttl=ttl)
    return p.job_graph().nodes[-1]


def open_op(node, backend="heap", key_groups=None, restore=None, subtask=0, parallelism=1):
    ctx = RuntimeContext(job_id="j" * 8, job_name="t", operator_uid=node.uid,
                         subtask_index=subtask, parallelism=parallelism, attempt=0)
    return open_operator(node, ctx, key_groups or KeyGroupRange(0, MAXP - 1), MAXP,
                         {"kind": backend}, restore)


def snapshot_spec(op, tmp_path, stem="rj-0"):
    snap = op.snapshot(1)
    handle, _, _ = snap.keyed.write(str(tmp_path), stem, True)
    return {"directory": str(tmp_path), "states": snap.states, "keyed": [handle],
            "operator_state": snap.operator_state}


PK_CASES = [("lid", "rid", False), (None, None, False), ("lid", None, True),
            (None, "rid", True)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("left_pk,right_pk,key_only", PK_CASES,
                         ids=["both-pk", "no-pk", "left-pk-key-only", "right-pk-key-only"])
def test_random_changelogs_match_a_pandas_merge_of_the_final_tables(
        backend, how, left_pk, right_pk, key_only):
    for seed in range(6):
        rng = random.Random(hash((seed, how, backend, left_pk, right_pk)) & 0xFFFF)
        left, left_final = changelog(rng, 120, "lid", "a", left_pk is not None,
                                     key_only=key_only and left_pk is not None)
        right, right_final = changelog(rng, 120, "rid", "b", right_pk is not None,
                                       key_only=key_only and right_pk is not None)
        op = open_op(join_node(how, left_pk, right_pk), backend)
        out = Materialized()
        for side, batch in interleave(rng, left, right):
            emitted = op.process_input(side, batch)
            assert all(r["_op"] in ("+I", "-D") for r in emitted)
            out.apply(emitted)
        assert out.rows == reference(left_final, right_final, how), f"seed {seed}"
        ghosts = sum(1 for r in left + right if r.get("lid", r.get("rid", 0)) >= 10_000)
        assert op.dropped_retractions >= ghosts
        op.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_outer_row_is_retracted_when_its_first_match_comes_and_back_when_the_last_goes(
        backend):
    op = open_op(join_node("left"), backend)
    assert op.process_input(1, [{"lid": 1, "k": 7, "a": 0}]) == [
        {"lid": 1, "k": 7, "a": 0, "_op": "+I"}]
    assert op.process_input(2, [{"rid": 5, "k": 7, "b": 1}]) == [
        {"lid": 1, "k": 7, "a": 0, "_op": "-D"},
        {"lid": 1, "k": 7, "a": 0, "rid": 5, "b": 1, "_op": "+I"}]
    # a second match: no padding change
    assert op.process_input(2, [{"rid": 6, "k": 7, "b": 2}]) == [
        {"lid": 1, "k": 7, "a": 0, "rid": 6, "b": 2, "_op": "+I"}]
    # a key-only delete of the right's primary key 5, then 6 (the last match)
    assert op.process_input(2, [{"rid": 5, "k": 7, "_op": "-D"}]) == [
        {"lid": 1, "k": 7, "a": 0, "rid": 5, "b": 1, "_op": "-D"}]
    assert op.process_input(2, [{"rid": 6, "k": 7, "_op": "-D"}]) == [
        {"lid": 1, "k": 7, "a": 0, "rid": 6, "b": 2, "_op": "-D"},
        {"lid": 1, "k": 7, "a": 0, "_op": "+I"}]
    assert op.state_rows() == (1, 0)
    # an upsert of the left's primary key replaces its row (retracted first)
    assert op.process_input(1, [{"lid": 1, "k": 7, "a": 3, "_op": "+U"}]) == [
        {"lid": 1, "k": 7, "a": 0, "_op": "-D"}, {"lid": 1, "k": 7, "a": 3, "_op": "+I"}]
    assert op.process_input(2, [{"rid": 9, "k": 8, "_op": "-D"}]) == []
    assert op.dropped_retractions == 1
    op.close()


def test_a_field_on_both_sides_is_refused_naming_the_join_unless_fn_renames_it():
    op = open_op(join_node("inner"))
    op.process_input(1, [{"lid": 1, "k": 1, "name": "x"}])
    with pytest.raises(BadRecordError, match=r"'rj'.*field 'name' is in both"):
        op.process_input(2, [{"rid": 2, "k": 1, "name": "y"}])
    op = open_op(join_node("left", fn=lambda le, ri: {
        "lid": le and le["lid"], "left_name": le and le["name"],
        "right_name": ri and ri["name"]}))
    op.process_input(1, [{"lid": 1, "k": 1, "name": "x"}])
    assert op.process_input(2, [{"rid": 2, "k": 1, "name": "y"}]) == [
        {"lid": 1, "left_name": "x", "right_name": None, "_op": "-D"},
        {"lid": 1, "left_name": "x", "right_name": "y", "_op": "+I"}]
    # keys of different names: both fields kept
    op = open_op(join_node("inner", lkey="cid", rkey="id", right_pk="id"))
    op.process_input(2, [{"id": 3, "name": "c"}])
    assert op.process_input(1, [{"lid": 1, "cid": 3}]) == [
        {"lid": 1, "cid": 3, "id": 3, "name": "c", "_op": "+I"}]


def test_the_dsl_refuses_regular_joins_it_cannot_run():
    p = Pipeline("t")
    a, b = p.source(GeneratorSource(1), uid="a"), p.source(GeneratorSource(1), uid="b")
    with pytest.raises(PipelineDefinitionError, match="how="):
        a.key_by("k").regular_join(b.key_by("k"), how="outer", uid="rj")
    with pytest.raises(PipelineDefinitionError, match="key the other stream"):
        a.key_by("k").regular_join(b, uid="rj")
    with pytest.raises(PipelineDefinitionError, match="left_primary_key"):
        a.key_by("k").regular_join(b.key_by("k"), uid="rj", left_primary_key=())
    with pytest.raises(PipelineDefinitionError, match="state_ttl"):
        a.key_by("k").regular_join(b.key_by("k"), uid="rj", state_ttl=-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_ttl_drops_rows_not_written_for_that_long(backend, monkeypatch):
    from airflow_checkpoint_provider.engine.runtime.operators.joins import regular as rt

    clock = [1_000_000]
    monkeypatch.setattr(rt, "_now_ms", lambda: clock[0])
    op = open_op(join_node("inner", ttl=10_000), backend)
    op.process_input(1, [{"lid": 1, "k": 1}, {"lid": 2, "k": 2}])
    clock[0] += 6_000
    op.process_input(1, [{"lid": 2, "k": 2, "_op": "+U"}])  # written again: kept longer
    assert op.on_processing_time(clock[0]) == []
    assert op.state_rows() == (2, 0)
    clock[0] += 5_000
    op.on_processing_time(op.next_processing_timer())
    assert op.state_rows() == (1, 0) and op.expired_rows == 1
    assert op.process_input(2, [{"rid": 9, "k": 1}, {"rid": 8, "k": 2}]) == [
        {"lid": 2, "k": 2, "rid": 8, "_op": "+I"}]
    clock[0] += 20_000
    while op.next_processing_timer() is not None and op.next_processing_timer() <= clock[0]:
        op.on_processing_time(clock[0])
    assert op.state_rows() == (0, 0) and op.next_processing_timer() is None
    op.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("new", [1, 3])
def test_state_restores_from_a_savepoint_at_another_parallelism(tmp_path, backend, new):
    """Half the changelog before the snapshot (at parallelism 1), the rest after restoring
    at parallelism ``new``: the same final table as one run."""
    rng = random.Random(7 + new)
    left, left_final = changelog(rng, 300, "lid", "a", True, keys=30, key_only=True)
    right, right_final = changelog(rng, 300, "rid", "b", False, keys=30)
    batches = interleave(rng, left, right)
    half = len(batches) // 2
    node = join_node("full", "lid", None)
    op = open_op(node, backend)
    out = Materialized()
    for side, batch in batches[:half]:
        out.apply(op.process_input(side, batch))
    spec = snapshot_spec(op, tmp_path)
    op.close()
    ops = [open_op(node, backend, key_group_range_for(s, new, MAXP), spec, s, new)
           for s in range(new)]
    for side, batch in batches[half:]:
        for r in batch:
            sub = next(o for o in ops if key_group_for(r["k"], MAXP) in o.backend.key_groups)
            out.apply(sub.process_input(side, [r]))
    assert out.rows == reference(left_final, right_final, "full")
    for o in ops:
        o.close()
