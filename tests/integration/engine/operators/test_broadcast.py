"""Broadcast state ("rules + events"): the operator's semantics on both state backends
(read-only on the keyed side, read-write with apply_to_keyed_state on the broadcast side,
restore at another parallelism), the graph (a broadcast edge into input 2), the DSL's checks,
and end-to-end jobs against an independent reference (tests/support/broadcast_pipelines.py):
failure-free, exactly once under injected exceptions and SIGKILLed slots (heap, RocksDB,
unaligned checkpoints),
and across a savepoint restored at another parallelism."""

from __future__ import annotations

import shutil

import pytest
from broadcast_pipelines import (
    broadcast_pipeline,
    committed_prices,
    committed_rules,
    expected_prices,
    expected_rules,
)
from operator_harness import BACKENDS, MAXP, open_op
from pipelines import Background, FaultPlan

from airflow_checkpoint_provider.engine import (
    CheckpointedFunction,
    FileSink,
    GeneratorSource,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    Pipeline,
    PipelineDefinitionError,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.plan.graph import BROADCAST
from airflow_checkpoint_provider.engine.state.keygroups import (
    key_group_for,
    key_group_range_for,
)

COUNT = ValueStateDescriptor("count", 0)


class Limits(KeyedBroadcastProcessFunction):
    """Rules set a limit per rule name; events count per key and are flagged above it."""

    def open(self, ctx):
        self.count = ctx.get_state(COUNT)

    def process_broadcast_element(self, rule, ctx):
        if rule.get("reset"):
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.clear())
            return {"reset": True, "key": ctx.current_key}
        ctx.broadcast_state("limits").put(rule["rule"], rule["limit"])

    def process_element(self, event, ctx):
        self.count.update(self.count.value() + 1)
        limit = ctx.broadcast_state("limits").get(event["rule"])
        if event.get("write"):
            ctx.broadcast_state("limits").put("x", 1)
        return {"key": ctx.current_key, "n": self.count.value(), "limit": limit,
                "over": limit is not None and event["amount"] > limit}


def bcast_node(fn=None):
    p = Pipeline("t")
    wm = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="ts")
    events = p.source(GeneratorSource(1), uid="events", watermarks=wm)
    rules = p.source(GeneratorSource(1), uid="rules")
    events.key_by("k").connect(rules.broadcast("limits")).process(fn or Limits(), uid="bc")
    return p.job_graph().nodes[-1]


def event(k, amount, rule="r", ts=1, **extra):
    return {"k": k, "amount": amount, "rule": rule, "ts": ts, **extra}


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_state_is_shared_by_every_key_and_read_only_on_the_keyed_side(backend):
    op = open_op(bcast_node(), backend)
    assert op.process_input(1, [event("a", 5)]) == [
        {"key": "a", "n": 1, "limit": None, "over": False}]
    assert op.process_input(2, [{"rule": "r", "limit": 3}]) == []
    assert op.process_input(1, [event("a", 5), event("b", 2)]) == [
        {"key": "a", "n": 2, "limit": 3, "over": True},
        {"key": "b", "n": 1, "limit": 3, "over": False}]
    with pytest.raises(TypeError, match="read-only in process_element"):
        op.process_input(1, [event("a", 5, write=True)])
    assert op.broadcast_entries() == {"limits": {"r": 3}}
    op.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_to_keyed_state_reaches_every_key_of_the_subtask(backend):
    op = open_op(bcast_node(), backend)
    op.process_input(1, [event(k, 1) for k in ("a", "b", "c", "a")])
    assert op.process_input(2, [{"reset": True}]) == [{"reset": True, "key": None}]
    assert [r["n"] for r in op.process_input(1, [event("a", 1), event("c", 1)])] == [1, 1]
    op.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("new", [1, 3])
def test_every_subtask_gets_the_whole_broadcast_state_at_another_parallelism(
        tmp_path, backend, new):
    """Two old subtasks hold the same broadcast state (fed identically) and their own keys;
    restored at 1 or 3 subtasks, each has every rule and the keyed state of its key groups."""
    keys = [f"k{i}" for i in range(40)]
    spec: dict = {"directory": str(tmp_path), "states": {}, "keyed": [], "operator_state": []}
    for sub in range(2):
        old = open_op(bcast_node(), backend, key_group_range_for(sub, 2, MAXP), None, sub, 2)
        old.process_input(2, [{"rule": "r", "limit": 10}, {"rule": "s", "limit": 20}])
        old.process_input(1, [event(k, 1) for k in keys
                              if key_group_for(k, MAXP) in old.backend.key_groups])
        snap = old.snapshot(1)
        handle, _, _ = snap.keyed.write(str(tmp_path), f"bc-{sub}", True)
        spec["states"].update(snap.states)
        spec["keyed"].append(handle)
        spec["operator_state"] += snap.operator_state
        old.close()
    assert len(spec["operator_state"]) == 2, "one copy per old subtask"
    seen = []
    for sub in range(new):
        op = open_op(bcast_node(), backend, key_group_range_for(sub, new, MAXP), spec, sub, new)
        assert op.broadcast_entries() == {"limits": {"r": 10, "s": 20}}
        mine = [k for k in keys if key_group_for(k, MAXP) in op.backend.key_groups]
        out = op.process_input(1, [event(k, 15, rule="r") for k in mine])
        assert all(r["n"] == 2 and r["limit"] == 10 and r["over"] for r in out)
        seen += mine
        op.close()
    assert sorted(seen) == sorted(keys)


class CheckpointedLimits(Limits, CheckpointedFunction):
    """Limits that also keeps operator state: the events it saw (list state, split on
    rescale), the checkpoints it snapshotted (union list state)."""

    def initialize_state(self, ctx):
        self.seen = ctx.state.get_list_state("seen")
        self.checkpoints = ctx.state.get_union_list_state("checkpoints")
        self.restored = ctx.is_restored

    def snapshot_state(self, checkpoint_id, ctx):
        self.checkpoints.add(f"{ctx.subtask_index}:{checkpoint_id}")

    def process_element(self, event, ctx):
        self.seen.add(event["k"])
        return super().process_element(event, ctx)


@pytest.mark.parametrize("new", [1, 2, 3])
def test_a_checkpointed_broadcast_function_restores_its_operator_state_and_the_broadcast_state(
        tmp_path, new):
    """The function's operator state and the broadcast state are both in the snapshot
    (the broadcast operator used to overwrite the one with the other)."""
    spec: dict = {"directory": str(tmp_path), "states": {}, "keyed": [], "operator_state": []}
    for sub in range(2):
        old = open_op(bcast_node(CheckpointedLimits()), "heap",
                      key_group_range_for(sub, 2, MAXP), None, sub, 2)
        old.process_input(2, [{"rule": "r", "limit": 10}])
        old.process_input(1, [event(f"{sub}-{i}", 1) for i in range(4)])
        snap = old.snapshot(7)
        handle, _, _ = snap.keyed.write(str(tmp_path), f"bc-{sub}", True)
        spec["states"].update(snap.states)
        spec["keyed"].append(handle)
        spec["operator_state"] += snap.operator_state
        old.close()
    seen, restored_rules = [], []
    for sub in range(new):
        fn = CheckpointedLimits()
        op = open_op(bcast_node(fn), "heap", key_group_range_for(sub, new, MAXP), spec, sub, new)
        assert fn.restored
        assert sorted(fn.checkpoints.get()) == ["0:7", "1:7"], "union: every subtask gets all"
        seen += fn.seen.get()
        restored_rules.append(op.broadcast_entries())
        op.close()
    assert sorted(seen) == sorted(f"{s}-{i}" for s in range(2) for i in range(4)), \
        "list state: every item once over the new subtasks"
    assert restored_rules == [{"limits": {"r": 10}}] * new


def test_the_broadcast_input_is_a_broadcast_edge_into_input_2():
    p = Pipeline("t")
    events = p.source(GeneratorSource(1), uid="events", parallelism=2)
    rules = p.source(GeneratorSource(1), uid="rules", parallelism=3)
    (events.key_by("key").connect(rules.broadcast("limits"))
           .process(Limits(), uid="bc", parallelism=4).sink(FileSink("/tmp/unused"), uid="out"))
    g = p.execution_graph()
    v = next(v for v in g.vertices if v.nodes[0].kind == "broadcast_process")
    assert [(e.partitioning, e.input) for e in v.inputs] == [("hash", 1), (BROADCAST, 2)]
    assert v.input_of_channels() == [1, 1, 2, 2, 2]
    rules_vertex = next(x for x in g.vertices if x.nodes[0].uid == "rules")
    assert rules_vertex.outputs[0].partitioning == BROADCAST


class NotBroadcast(KeyedProcessFunction):
    pass


def test_the_dsl_refuses_broadcast_connections_it_cannot_run():
    p = Pipeline("t")
    events = p.source(GeneratorSource(1), uid="events")
    rules = p.source(GeneratorSource(1), uid="rules")
    with pytest.raises(PipelineDefinitionError, match="key the non-broadcast stream"):
        events.connect(rules.broadcast("limits")).process(Limits(), uid="bc")
    with pytest.raises(PipelineDefinitionError, match="KeyedBroadcastProcessFunction"):
        events.key_by("key").connect(rules.broadcast("limits")).process(NotBroadcast(), uid="bc")
    with pytest.raises(PipelineDefinitionError, match="declared twice"):
        rules.broadcast("limits", "limits")
    with pytest.raises(PipelineDefinitionError, match="itself"):
        events.key_by("key").connect(events.broadcast("limits"))


def test_an_undeclared_broadcast_state_says_which_are_declared():
    class Reader(KeyedBroadcastProcessFunction):
        def process_element(self, record, ctx):
            ctx.broadcast_state("other")

    op = open_op(bcast_node(Reader()))
    with pytest.raises(KeyError, match="declared: limits"):
        op.process_input(1, [event("a", 1)])


# -- end to end ---------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_broadcast_and_temporal_join_match_an_independent_reference(workdir):
    result = broadcast_pipeline(str(workdir)).run()
    assert result.status == "FINISHED"
    assert committed_rules(str(workdir)) == expected_rules()
    assert committed_prices(str(workdir)) == expected_prices("left")


FAULTS = [("record", 1_500), ("kill", 3_500), ("record", 5_000)]


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend,unaligned", [("heap", False), ("rocksdb", False),
                                               ("heap", True)])
def test_broadcast_and_temporal_join_are_exactly_once_under_exceptions_and_sigkill(
        workdir, backend, unaligned):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    result = broadcast_pipeline(str(workdir), faults=faults, rate=5_000,
                                state_backend=backend, unaligned=unaligned).run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    assert committed_rules(str(workdir)) == expected_rules()
    assert committed_prices(str(workdir)) == expected_prices("left")


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_and_temporal_join_survive_a_savepoint_restored_at_another_parallelism(
        workdir, tmp_path_factory, backend):
    # slow enough that the stop savepoint lands mid-stream: it waits for the pending checkpoint
    bg = Background(broadcast_pipeline(str(workdir), rate=1_500, state_backend=backend))
    job = bg.wait_running(min_checkpoints=2, timeout=60)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    location = req.result["location"]
    partial = committed_rules(str(workdir))
    assert 0 < sum(partial.values()) < sum(expected_rules().values())
    restored = tmp_path_factory.mktemp("restored")
    for out in ("rules-out", "priced"):
        shutil.copytree(workdir / out, restored / out)
    result = broadcast_pipeline(str(restored), parallelism=3, join_parallelism=3,
                                state_backend=backend).run(restore=location,
                                                           trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == location
    assert committed_rules(str(restored)) == expected_rules()
    assert committed_prices(str(restored)) == expected_prices("left")
