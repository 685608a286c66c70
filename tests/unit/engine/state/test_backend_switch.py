"""Switching a keyed operator between the RocksDB and heap backends through a snapshot:
a RocksDB savepoint or (incremental) checkpoint restores into the heap backend with every
per-key state kind, TTL timestamps and timers, at any parallelism; what cannot convert is
refused before anything is loaded."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_checkpoint_provider.engine.errors import RestoreError
from airflow_checkpoint_provider.engine.runtime.operators.timers import TimerService
from airflow_checkpoint_provider.engine.serialization import Serializer
from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict
from airflow_checkpoint_provider.engine.state.descriptors import (
    EntryMapStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.heap.restore import backend_switch_problems
from airflow_checkpoint_provider.engine.state.keygroups import (
    KeyGroupRange,
    key_group_for,
    key_group_range_for,
)
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend
from airflow_checkpoint_provider.engine.state.rocksdb.read import iter_rocksdb_entries
from airflow_checkpoint_provider.engine.state.ttl import ttl_state

pytestmark = pytest.mark.timeout(120)

MAXP = 128
KEYS = [f"k{i}" for i in range(300)] + [("t", i) for i in range(20)] + list(range(40))
HOUR = dt.timedelta(hours=1)
JSONISH = Serializer("upper", lambda v: str(v).upper(), lambda v: v.lower())


def _add(a, b):
    return a + b


def descriptors():
    return [ValueStateDescriptor("v", 0), ListStateDescriptor("l"), MapStateDescriptor("m"),
            ReducingStateDescriptor("r", _add), ValueStateDescriptor("t", 0, ttl=HOUR),
            ListStateDescriptor("tl", ttl=HOUR), MapStateDescriptor("tm", ttl=HOUR),
            EntryMapStateDescriptor("e"), ValueStateDescriptor("s", serializer=JSONISH)]


def open_states(backend):
    """The states of :func:`descriptors` as a function's context opens them (TTL states
    through their TTL wrapper)."""
    return {d.name: ttl_state(backend, d) if d.ttl_ms else backend.get_state(d)
            for d in descriptors()}


def fill(backend, keys, rounds=2, offset=0):
    """Write every kind of state for ``keys`` (``rounds`` updates each) and an event-time
    timer per key."""
    states = open_states(backend)
    timers = TimerService(backend)
    for n in range(rounds):
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            x = i + n + offset
            states["v"].update(x)
            states["l"].add(x)
            states["m"].put(f"u{n}", {"x": x, "key": str(key)})
            states["r"].add(x)
            states["t"].update(x * 2)
            states["tl"].add(x)
            states["tm"].put(n, x)
            states["e"].put(("row", n), [x, "a"])
            states["s"].update(f"s{x}")
            timers.register_event_time_timer(1000 + x)


def read(backend, keys):
    """Every state of every key of ``keys`` the backend owns, through the state API."""
    states = open_states(backend)
    timers = backend.get_state(ListStateDescriptor("_timers.event"))
    out = {}
    for key in keys:
        if key_group_for(key, MAXP) not in backend.key_groups:
            continue
        backend.set_current_key(key)
        out[key] = (states["v"].value(), states["l"].get(), sorted(states["m"].items()),
                    states["r"].get(), states["t"].value(), states["tl"].get(),
                    sorted(states["tm"].items()), sorted(states["e"].items()),
                    states["s"].value(), sorted(timers.get()))
    return out


def rocks(tmp_path, i=0, p=1, incremental=False):
    return RocksDBKeyedStateBackend("op", key_group_range_for(i, p, MAXP), MAXP,
                                    incremental=incremental,
                                    workdir=str(tmp_path / f"w-{i}-{p}-{incremental}"))


def heap(i=0, p=1):
    return HeapKeyedStateBackend("op", key_group_range_for(i, p, MAXP), MAXP)


def snapshot(backend, directory, checkpoint_id=1, full=True):
    snap = backend.snapshot_state(checkpoint_id)
    handle, _, _ = snap.write(str(directory), f"op-{backend.key_groups.start}", full)
    return keyed_handle_from_dict(handle, location=str(directory)), snap.states


def test_a_rocksdb_savepoint_restores_into_heap_with_every_state_kind(tmp_path):
    src = rocks(tmp_path)
    fill(src, KEYS)
    expected = read(src, KEYS)
    handle, states = snapshot(src, tmp_path / "sp")
    src.close()
    dst = heap()
    dst.restore_state(str(tmp_path / "sp"), [handle], states)
    # heap holds exactly what RocksDB stored (before a state is declared again): TTL values
    # as [value, last write ms], a serializer's output as it wrote it
    stored = {(name, key): value for _, name, key, value in
              iter_rocksdb_entries(str(tmp_path / "sp"), handle)}
    assert len(stored) == len(KEYS) * (len(descriptors()) + 1)  # + the timers
    for (name, key), value in stored.items():
        assert dst.tables[name][key_group_for(key, MAXP)][key] == value
    assert all(isinstance(stored[("t", k)], list) and len(stored[("t", k)]) == 2 for k in KEYS)
    assert read(dst, KEYS) == expected
    assert len(expected) == len(KEYS)


def test_timers_restored_from_rocksdb_fire_on_heap(tmp_path):
    src = rocks(tmp_path)
    fill(src, KEYS[:10], rounds=1)
    handle, states = snapshot(src, tmp_path / "sp")
    src.close()
    dst = heap()
    dst.restore_state(str(tmp_path / "sp"), [handle], states)
    timers = TimerService(dst)
    timers.rebuild()
    fired = []
    for ts in timers.due("event", 1000 + 4):
        fired.append((dst.current_key, ts))
    assert fired == [(f"k{i}", 1000 + i) for i in range(5)]


def test_an_incremental_rocksdb_checkpoint_restores_into_heap(tmp_path):
    src = rocks(tmp_path, incremental=True)
    fill(src, KEYS)
    job = tmp_path / "job"
    h1, _ = snapshot(src, job / "chk-1", 1, full=False)
    src.notify_complete(1)
    fill(src, KEYS[:50], rounds=1, offset=1000)  # a few keys change after checkpoint 1
    h2, states = snapshot(src, job / "chk-2", 2, full=False)
    shared = {f.name for f in h1.files if f.shared} & {f.name for f in h2.files if f.shared}
    assert shared, "checkpoint 2 references SSTs of checkpoint 1 under shared/"
    expected = read(src, KEYS)
    src.close()
    dst = heap()
    dst.restore_state(str(job / "chk-2"), [h2], states)
    assert read(dst, KEYS) == expected


@pytest.mark.parametrize("source_p,target_p", [(1, 3), (2, 3), (3, 2)])
def test_restore_into_heap_at_other_parallelism_keeps_exactly_the_owned_key_groups(
        tmp_path, source_p, target_p):
    handles, expected = [], {}
    for i in range(source_p):
        src = rocks(tmp_path, i, source_p)
        fill(src, [k for k in KEYS if key_group_for(k, MAXP) in src.key_groups])
        expected.update(read(src, KEYS))
        handle, states = snapshot(src, tmp_path / "sp")
        handles.append(handle)
        src.close()
    merged: dict = {}
    for i in range(target_p):
        dst = heap(i, target_p)
        # each subtask gets the handles whose key groups meet its own (as assign_restore does)
        mine = [h for h in handles
                if len(dst.key_groups.intersect(KeyGroupRange(*h.key_group_range)))]
        dst.restore_state(str(tmp_path / "sp"), mine, states)
        got = read(dst, KEYS)
        assert all(key_group_for(k, MAXP) in dst.key_groups for k in got)
        assert {kg for t in dst.tables.values() for kg in t} <= set(dst.key_groups)
        merged.update(got)
    assert merged == expected and len(merged) == len(KEYS)


def test_heap_snapshot_still_restores_into_rocksdb(tmp_path):
    src = heap()
    fill(src, KEYS)
    expected = read(src, KEYS)
    handle, states = snapshot(src, tmp_path / "sp")
    dst = rocks(tmp_path, 1, 2)
    dst.restore_state(str(tmp_path / "sp"), [handle], states)
    assert read(dst, KEYS) == {k: v for k, v in expected.items()
                               if key_group_for(k, MAXP) in dst.key_groups}
    dst.close()


def test_entry_map_state_with_its_own_serializer_is_refused_before_anything_loads(tmp_path):
    src = rocks(tmp_path)
    fill(src, KEYS[:20], rounds=1)
    src.get_state(EntryMapStateDescriptor("rows", serializer=JSONISH))
    src.set_current_key("k1")
    src.get_state(EntryMapStateDescriptor("rows", serializer=JSONISH)).put("a", "b")
    handle, states = snapshot(src, tmp_path / "sp")
    src.close()
    dst = heap()
    with pytest.raises(RestoreError, match=r"operator 'op': state 'rows': entry map state .*"
                                           r"restore with state_backend='rocksdb'"):
        dst.restore_state(str(tmp_path / "sp"), [handle], states)
    assert dst.tables == {}, "nothing restored in part"
    # the same state, written by heap, does not move to RocksDB either
    problems = backend_switch_problems(states, ["heap"], "rocksdb")
    assert [name for name, _ in problems] == ["rows"]
    assert backend_switch_problems(states, ["rocksdb"], "rocksdb") == []
    assert backend_switch_problems({"v": {"kind": "value", "serializer": "upper"}},
                                   ["rocksdb"], "heap") == []


def test_an_incremental_heap_backend_restored_from_rocksdb_checkpoints_a_full_chain(tmp_path):
    """heap_incremental=True: the first checkpoint after the switch is a new base holding
    every restored key, so restoring it gives the state back again."""
    src = rocks(tmp_path)
    fill(src, KEYS)
    expected = read(src, KEYS)
    handle, states = snapshot(src, tmp_path / "sp")
    src.close()
    mid = HeapKeyedStateBackend("op", key_group_range_for(0, 1, MAXP), MAXP, incremental=True)
    mid.restore_state(str(tmp_path / "sp"), [handle], states)
    chain, chain_states = snapshot(mid, tmp_path / "job" / "chk-1", 1, full=False)
    assert chain.type == "heap-changelog"
    dst = heap()
    dst.restore_state(str(tmp_path / "job" / "chk-1"), [chain], chain_states)
    assert read(dst, KEYS) == expected


def test_entry_map_state_with_its_own_serializer_does_not_move_from_heap_to_rocksdb(tmp_path):
    src = heap()
    src.set_current_key("k1")
    src.get_state(EntryMapStateDescriptor("rows", serializer=JSONISH)).put("a", "b")
    handle, states = snapshot(src, tmp_path / "sp")
    dst = rocks(tmp_path)
    with pytest.raises(RestoreError, match=r"operator 'op': state 'rows': .*"
                                           r"restore with state_backend='heap'"):
        dst.restore_state(str(tmp_path / "sp"), [handle], states)
    assert list(dst.db.keys()) == [], "nothing restored in part"
    dst.close()
