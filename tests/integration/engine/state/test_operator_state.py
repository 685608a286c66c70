"""Operator state of user functions: redistribution modes, refusal of a changed mode,
malformed snapshot entries (unit), and a pipeline stopped with savepoints and restored
2 -> 3 -> 1 subtasks with list, union list and broadcast state (integration)."""

import json
import os

import pytest
from pipelines import Background

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    CheckpointedFunction,
    CorruptCheckpointError,
    DiscardSink,
    GeneratorSource,
    Pipeline,
    PipelineDefinitionError,
    RestartStrategy,
    StateMigrationError,
)
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot
from airflow_checkpoint_provider.engine.state.operator_state import (
    OperatorStateStore,
    entry_value,
)


def snapshot_of(parallelism, fill):
    entries = []
    for sub in range(parallelism):
        store = OperatorStateStore("op", sub, parallelism, None)
        fill(store, sub)
        entries += store.snapshot()
    return entries


def fill(store, sub):
    store.get_list_state("split").add_all([f"{sub}-{i}" for i in range(sub + 3)])
    store.get_union_list_state("union").add(sub)
    store.get_broadcast_state("bcast").put("k", "same")


@pytest.mark.parametrize("old,new", [(2, 3), (3, 1), (1, 4)])
def test_each_mode_redistributes_on_rescale(old, new):
    entries = snapshot_of(old, fill)
    everything = [f"{s}-{i}" for s in range(old) for i in range(s + 3)]
    split, unions, bcasts = [], [], []
    for sub in range(new):
        store = OperatorStateStore("op", sub, new, entries)
        assert store.is_restored
        part = store.get_list_state("split").get()
        split.append(part)
        unions.append(store.get_union_list_state("union").get())
        bcasts.append(store.get_broadcast_state("bcast").items())
    assert [i for part in split for i in part] == everything, "split: every item once, in order"
    assert max(map(len, split)) - min(map(len, split)) <= 1, "split evenly"
    assert all(u == list(range(old)) for u in unions), "union: every subtask gets all"
    assert all(b == [("k", "same")] for b in bcasts), "broadcast: the same copy everywhere"


def test_each_subtask_restores_its_own_broadcast_copy():
    """In an unaligned checkpoint the copies differ: subtask 1 processed rule r2 before its
    barrier (in its copy), subtask 0 had r2 still in flight (in its in-flight records, not
    in its copy). Before, every subtask took subtask 0's copy, so subtask 1 lost r2 (the
    chaos cell join-broadcast-temporal/local/rocksdb/unaligned: events of subtask 1 got an
    older rule's threshold)."""
    def fill_diverged(store, sub):
        rules = store.get_broadcast_state("rules")
        rules.put("r1", 1)
        if sub == 1:
            rules.put("r2", 2)

    entries = snapshot_of(2, fill_diverged)
    copies = [dict(OperatorStateStore("op", sub, 2, entries).get_broadcast_state("rules")
                   .items()) for sub in range(2)]
    assert copies == [{"r1": 1}, {"r1": 1, "r2": 2}]
    # more subtasks than before: old subtask i % 2
    assert dict(OperatorStateStore("op", 2, 3, entries).get_broadcast_state("rules")
                .items()) == {"r1": 1}


def test_changing_a_states_mode_is_refused_naming_operator_and_state():
    entries = snapshot_of(2, fill)
    store = OperatorStateStore("op", 0, 2, entries)
    with pytest.raises(StateMigrationError, match=r"operator 'op': state 'split' was "
                                                  r"snapshotted as list state and is now "
                                                  r"declared as union list state"):
        store.get_union_list_state("split")
    store.get_list_state("fresh")
    with pytest.raises(StateMigrationError, match="already registered as list state"):
        store.get_broadcast_state("fresh")


@pytest.mark.parametrize("entry", [
    {"state": "s", "mode": "split", "subtask": 0, "value": {"not": "a list"}},
    {"state": "s", "mode": "sideways", "subtask": 0, "value": []},
    {"state": "s", "mode": "broadcast", "subtask": "0", "value": {}},
])
def test_malformed_snapshot_entries_are_corrupt(entry):
    with pytest.raises(CorruptCheckpointError, match="operator 'op': operator state entry"):
        OperatorStateStore("op", 0, 1, [entry])


def test_a_checkpointed_function_needs_a_uid(tmp_path):
    p = Pipeline("needs-uid", checkpoint=CheckpointConfig(directory=str(tmp_path)))
    p.source(GeneratorSource(10), uid="gen").map(Recorder(str(tmp_path))).sink(
        DiscardSink(), uid="out")
    with pytest.raises(PipelineDefinitionError, match="needs a stable uid"):
        p.execution_graph()


class Recorder(CheckpointedFunction):
    """Sees every record (behind a broadcast edge) and keeps: the ids it saw in list state,
    its subtask index once in union list state, and a count per key in broadcast state.
    Writes what it restored to ``<directory>/restored-<parallelism>-<subtask>.json``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def initialize_state(self, ctx):
        self.ids = ctx.state.get_list_state("ids")
        self.subtasks = ctx.state.get_union_list_state("subtasks")
        self.counts = ctx.state.get_broadcast_state("counts")
        with open(os.path.join(self.directory, f"restored-{ctx.parallelism}-"
                                               f"{ctx.subtask_index}.json"), "w") as f:
            json.dump({"ids": self.ids.get(), "subtasks": self.subtasks.get(),
                       "counts": dict(self.counts.items()), "restored": ctx.is_restored}, f)
        self.subtasks.update([ctx.subtask_index])  # each subtask keeps only its own entry

    def __call__(self, record):
        self.ids.add(record["id"])
        self.counts.put(record["key"], self.counts.get(record["key"], 0) + 1)
        return record


def recorder_pipeline(root: str, parallelism: int, records: int | None) -> Pipeline:
    p = Pipeline("operator-state", checkpoint=CheckpointConfig(
                     interval_ms=200, directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=1, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(records, num_keys=5, seed=2, splits=1, records_per_second=2_000),
              uid="gen")
      .broadcast().map(Recorder(root), uid="rec", parallelism=parallelism)
      .sink(DiscardSink(), uid="out", parallelism=1))
    return p


def saved_state(location: str) -> list[dict]:
    return [{**e, "value": entry_value(e)}
            for sub in load_snapshot(location).operators["rec"]["subtasks"]
            for e in sub["operator_state"]]


def restored(root, parallelism) -> list[dict]:
    out = []
    for sub in range(parallelism):
        with open(os.path.join(root, f"restored-{parallelism}-{sub}.json")) as f:
            out.append(json.load(f))
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_operator_state_across_savepoints_2_3_1(tmp_path):
    root, location = str(tmp_path), None
    for parallelism in (2, 3, 1):
        bg = Background(recorder_pipeline(root, parallelism, None),
                        **({"restore": location} if location else {}))
        job = bg.wait_running(min_checkpoints=2, timeout=120)
        previous = location
        req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
        assert req.status == "SUCCEEDED", req.error
        assert bg.result().status == "STOPPED"
        location = req.result["location"]
        got = restored(root, parallelism)
        if previous is None:
            assert all(not g["restored"] and not g["ids"] for g in got)
            continue
        saved = saved_state(previous)
        by_sub = {e["subtask"]: e["value"] for e in saved if e["state"] == "ids"}
        everything = [i for s in sorted(by_sub) for i in by_sub[s]]
        assert everything, "the savepoint holds list state"
        assert [i for g in got for i in g["ids"]] == everything      # split evenly, in order
        assert max(len(g["ids"]) for g in got) - min(len(g["ids"]) for g in got) <= 1
        union = sorted(i for e in saved if e["state"] == "subtasks" for i in e["value"])
        assert union == list(range(2 if parallelism == 3 else 3)), "one entry per old subtask"
        assert all(sorted(g["subtasks"]) == union for g in got), "union: all to everyone"
        counts = [e["value"] for e in saved if e["state"] == "counts"]
        assert all(c == counts[0] for c in counts), "every old subtask held the same copy"
        assert all(g["counts"] == counts[0] and sum(counts[0].values()) > 0 for g in got)
