"""Property tests of the state value contract (issue 35) at the state backend level: every
state kind (value, list, map, entry map, reducing, timers; operator list, union and
broadcast state) x heap / RocksDB x checkpoint / savepoint / rescale 2 -> 3 / heap ->
RocksDB switch (both ways) / ``ckpt state write`` rewrite. Whatever a state accepted comes back equal
and of the same type (``same``). ``aggregate()`` and window aggregations keep Arrow columns
(their own typed schema) and are covered by their own contract tests.

Each example builds fresh backends in a temporary directory (no job, no processes)."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from budget import scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from value_strategies import HASHABLE, STATE_KEYS, VALUES, same

from airflow_checkpoint_provider.engine.runtime.operators.timers import TIMER_STATES, TimerService
from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata, load_snapshot
from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict
from airflow_checkpoint_provider.engine.state.descriptors import (
    EntryMapStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import key_group_for, key_group_range_for
from airflow_checkpoint_provider.engine.state.operator_state import OperatorStateStore
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend
from airflow_checkpoint_provider.engine.state_io.write import rewrite_savepoint

MAXP = 16
def examples(n: int) -> settings:
    """``n`` examples under ``CKPT_TEST_FULL=1``, a third of them (at least 8) in ``make
    test`` (tests/support/budget.py); no deadline (a loaded machine), no example database on disk."""
    return settings(max_examples=scaled(max(8, n // 3), n), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: per key: what each state kind holds (absent: the key has no such state)
PER_KEY = st.fixed_dictionaries({}, optional={
    "value": VALUES.filter(lambda v: v is not None),
    "list": st.lists(VALUES, min_size=1, max_size=3),
    "map": st.dictionaries(HASHABLE, VALUES, min_size=1, max_size=3),
    "entry_map": st.dictionaries(HASHABLE, VALUES, min_size=1, max_size=3),
    "reducing": st.lists(VALUES.filter(lambda v: v is not None), min_size=1, max_size=3),
    "timers": st.sets(st.integers(-(2**40), 2**40), min_size=1, max_size=3),
})
MODELS = st.dictionaries(STATE_KEYS, PER_KEY, min_size=1, max_size=3)


class States:
    """The states of one backend, one per kind."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.value = backend.get_state(ValueStateDescriptor("value"))
        self.list = backend.get_state(ListStateDescriptor("list"))
        self.map = backend.get_state(MapStateDescriptor("map"))
        self.entry_map = backend.get_state(EntryMapStateDescriptor("entry_map"))
        self.reducing = backend.get_state(ReducingStateDescriptor("reducing", _last))
        self.timers = TimerService(backend)

    def fill(self, key, kinds: dict) -> None:
        self.backend.set_current_key(key)
        if "value" in kinds:
            self.value.update(kinds["value"])
        if "list" in kinds:
            self.list.add(kinds["list"][0])
            self.list.add_all(kinds["list"][1:])
        for uk, v in kinds.get("map", {}).items():
            self.map.put(uk, v)
        for uk, v in kinds.get("entry_map", {}).items():
            self.entry_map.put(uk, v)
        for v in kinds.get("reducing", ()):
            self.reducing.add(v)
        for ts in kinds.get("timers", ()):
            self.timers.register_event_time_timer(ts)

    def read(self) -> dict:
        """The model of everything the backend holds (every key of every state)."""
        backend = self.backend
        names = ("value", "list", "map", "entry_map", "reducing", TIMER_STATES["event"])
        keys = {k for n in names for k in backend.keys(n)}
        out = {}
        for key in keys:
            backend.set_current_key(key)
            kinds: dict = {}
            if (v := self.value.value()) is not None:
                kinds["value"] = v
            if lst := self.list.get():
                kinds["list"] = lst
            if m := dict(self.map.items()):
                kinds["map"] = m
            if m := dict(self.entry_map.items()):
                kinds["entry_map"] = m
            if (r := self.reducing.get()) is not None:
                kinds["reducing"] = r
            out[key] = kinds
        self.timers.rebuild()
        for ts in self.timers.due("event", 2**41):
            out[backend.current_key].setdefault("timers", set()).add(ts)
        return out


def _last(a, b):
    return b


def expected(model: dict) -> dict:
    """What reading back gives: reducing state keeps the last value added."""
    out = {}
    for key, kinds in model.items():
        kinds = dict(kinds)
        if "reducing" in kinds:
            kinds["reducing"] = kinds["reducing"][-1]
        if "timers" in kinds:
            kinds["timers"] = set(kinds["timers"])
        if kinds:
            out[key] = kinds
    return out


def same_model(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)


def new_backend(kind: str, key_groups, tmp: str, n: list):
    n.append(0)
    if kind == "rocksdb":
        return RocksDBKeyedStateBackend("op", key_groups, MAXP,
                                        workdir=os.path.join(tmp, f"rocks-{len(n)}"))
    return HeapKeyedStateBackend("op", key_groups, MAXP)


def snapshot(backend, directory: str, stem: str, full: bool):
    os.makedirs(directory, exist_ok=True)
    snap = backend.snapshot_state(1)
    if snap.write is None:  # no state entries: no state file
        return None, snap.states
    handle, _, _ = snap.write(directory, stem, full)
    return handle, snap.states


def _restore_fresh(kind, key_groups, tmp, n, directory, handles, states) -> States:
    target = new_backend(kind, key_groups, tmp, n)
    target.restore_state(directory, [keyed_handle_from_dict(h, location=directory)
                                     for h in handles], states)
    return States(target)


def _parted(model: dict, parallelism: int) -> list[dict]:
    parts: list[dict] = [{} for _ in range(parallelism)]
    for i in range(parallelism):
        kgr = key_group_range_for(i, parallelism, MAXP)
        parts[i] = {k: v for k, v in model.items() if key_group_for(k, MAXP) in kgr}
    return parts


SCENARIOS = [("heap", "checkpoint", "heap"), ("heap", "savepoint", "heap"),
             ("heap", "rescale", "heap"), ("heap", "checkpoint", "rocksdb"),
             ("rocksdb", "checkpoint", "rocksdb"), ("rocksdb", "savepoint", "rocksdb"),
             ("rocksdb", "rescale", "rocksdb"), ("rocksdb", "savepoint", "heap"),
             ("rocksdb", "rescale", "heap")]


@pytest.mark.parametrize(("source", "scenario", "target"), SCENARIOS)
def test_every_state_kind_comes_back_equal_and_of_the_same_type(source, scenario, target):
    @examples(100 if source == target == "heap" else 20 if scenario == "rescale" else 30)
    @given(MODELS)
    def check(model):
        with tempfile.TemporaryDirectory() as tmp:
            n: list = []
            backends = []
            try:
                parallelism = 2 if scenario == "rescale" else 1
                handles, states = [], {}  # states: every subtask's (timers are lazy)
                for i, part in enumerate(_parted(model, parallelism)):
                    b = new_backend(source, key_group_range_for(i, parallelism, MAXP), tmp, n)
                    backends.append(b)
                    s = States(b)
                    for key, kinds in part.items():
                        s.fill(key, kinds)
                    handle, meta = snapshot(b, os.path.join(tmp, "chk"), f"op-{i}",
                                            full=scenario == "savepoint")
                    states.update(meta)
                    if handle is not None:
                        handles.append(handle)
                new_p = 3 if scenario == "rescale" else 1
                got: dict = {}
                for i in range(new_p):
                    restored = _restore_fresh(target, key_group_range_for(i, new_p, MAXP),
                                              tmp, n, os.path.join(tmp, "chk"), handles,
                                              states)
                    backends.append(restored.backend)
                    part = restored.read()
                    assert not part.keys() & got.keys()
                    got.update(part)
                assert same_model(got, expected(model)), (got, expected(model))
            finally:
                for b in backends:
                    b.close()

    check()


@examples(25)
@given(st.dictionaries(st.integers(-1000, 1000), PER_KEY.filter(
    lambda k: "timers" not in k and "entry_map" not in k), min_size=1, max_size=4))
def test_a_ckpt_state_write_rewrite_keeps_every_copied_value(model):
    """``rewrite_savepoint`` (``ckpt state write``) copies the entries it does not change:
    they are read (``iter_entries``) and written again, with their types."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        backend = HeapKeyedStateBackend("op", key_group_range_for(0, 1, MAXP), MAXP)
        s = States(backend)
        for key, kinds in model.items():
            s.fill(key, kinds)
        handle, states = snapshot(backend, src, "op-0", full=True)
        doc = {"job_id": "j", "job_name": "j", "checkpoint_id": 1, "kind": "SAVEPOINT",
               "timestamp_ms": 0, "operators": {"op": {
                   "kind": "keyed", "parallelism": 1, "max_parallelism": MAXP,
                   "states": states, "subtasks": [{
                       "index": 0, "key_group_range": [0, MAXP - 1], "keyed": handle,
                       "operator_state": []}]}}}
        with open(os.path.join(src, "_metadata"), "wb") as f:
            f.write(encode_metadata(doc))
        dst = rewrite_savepoint(src, os.path.join(tmp, "dst"), uid="op")
        loaded = load_snapshot(dst)
        op = loaded.operators["op"]
        handles = [sub["keyed"] for sub in op["subtasks"] if sub["keyed"]]
        if handle is None:
            assert not handles
            return
        restored = _restore_fresh("heap", key_group_range_for(0, 1, MAXP), tmp, [],
                                  loaded.directory, handles, op["states"])
        assert same_model(restored.read(), expected(model))


@examples(100)
@given(st.lists(st.lists(VALUES, max_size=3), min_size=2, max_size=2),
       st.lists(st.lists(VALUES, max_size=3), min_size=2, max_size=2),
       st.dictionaries(HASHABLE, VALUES, max_size=3))
def test_operator_list_union_and_broadcast_state_survive_a_rescale_2_to_3(split, union,
                                                                           broadcast):
    entries = []
    for i in range(2):
        store = OperatorStateStore("op", i, 2, None)
        store.get_list_state("split").add_all(split[i])
        store.get_union_list_state("union").update(union[i])
        bc = store.get_broadcast_state("bc")
        for k, v in broadcast.items():
            bc.put(k, v)
        entries.extend(store.snapshot())
    entries = json.loads(json.dumps(entries))  # as _metadata keeps them
    restored = [OperatorStateStore("op", i, 3, entries) for i in range(3)]
    assert same([x for s in restored for x in s.get_list_state("split").get()],
                split[0] + split[1])
    for s in restored:
        assert same(s.get_union_list_state("union").get(), union[0] + union[1])
        assert same(dict(s.get_broadcast_state("bc").items()), broadcast)
