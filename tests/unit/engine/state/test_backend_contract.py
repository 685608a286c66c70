"""One contract for every keyed state backend (heap, RocksDB, the columnar tables of
``aggregate()``): what a snapshot holds, how a restore redistributes it by key group, and
that the synchronous part really is a point-in-time copy."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict
from airflow_checkpoint_provider.engine.state.backend import KeyedStateBackend, PerKeyStateBackend
from airflow_checkpoint_provider.engine.state.columnar import AggregateSpec, AggregateTable
from airflow_checkpoint_provider.engine.state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_for
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend

MAXP = 16
FULL = KeyGroupRange(0, MAXP - 1)
HALVES = (KeyGroupRange(0, 7), KeyGroupRange(8, 15))


class PerKey:
    """Heap or RocksDB: per key, a value state ``total`` (the running sum), a list state
    ``history`` (every value added, in order) and a map state ``seen`` (``v<value>`` ->
    value)."""

    def __init__(self, cls, tmp_path):
        self.cls, self.tmp, self.ids = cls, tmp_path, itertools.count()

    def new(self, key_groups):
        if self.cls is RocksDBKeyedStateBackend:
            return self.cls("op", key_groups, MAXP,
                            workdir=str(self.tmp / f"rocks-{next(self.ids)}"))
        return self.cls("op", key_groups, MAXP)

    def add(self, backend, key, value):
        backend.set_current_key(key)
        total, history, seen = _states(backend)
        total.update((total.value() or 0) + value)
        history.add(value)
        seen.put(f"v{value}", value)

    def read(self, backend):
        total, history, seen = _states(backend)
        out = {}
        # the keys of every state: a key restored into one state only shows up as a mismatch
        for k in {k for name in STATE_NAMES for k in backend.keys(name)}:
            backend.set_current_key(k)
            out[k] = (total.value(), history.get(), dict(seen.items()))
        return out

    @staticmethod
    def model(values):
        return sum(values), list(values), {f"v{v}": v for v in values}


STATE_NAMES = ("total", "history", "seen")


def _states(backend):
    return (backend.get_state(ValueStateDescriptor("total", None)),
            backend.get_state(ListStateDescriptor("history")),
            backend.get_state(MapStateDescriptor("seen")))


class Columnar:
    """``aggregate(sum)``: the running sum per key."""

    spec = AggregateSpec("key", [("total", "sum", "value")])

    def new(self, key_groups):
        return AggregateTable(self.spec, key_groups, MAXP, "op")

    def add(self, backend, key, value):
        backend.update(pa.RecordBatch.from_pydict({"key": [key], "value": [value]}))

    def read(self, backend):
        cols = backend.copy()
        return {k: int(v) for k, v in zip(cols["key"].tolist(), cols["sum:value"].tolist(),
                                          strict=True)}

    @staticmethod
    def model(values):
        return sum(values)


@pytest.fixture(params=["heap", "rocksdb", "columnar"])
def kind(request, tmp_path):
    if request.param == "heap":
        k = PerKey(HeapKeyedStateBackend, tmp_path)
    elif request.param == "rocksdb":
        k = PerKey(RocksDBKeyedStateBackend, tmp_path)
    else:
        k = Columnar()
    made = []
    new = k.new
    k.new = lambda kg: made.append(new(kg)) or made[-1]
    yield k
    for b in made:
        b.close()


def _fill(kind, backend, n=200, key_groups=FULL):
    """Add ``i`` then ``1`` to key ``k<i>`` for the keys in ``key_groups`` (keys ``k0`` to
    ``k199`` fall in all 16 key groups); returns the values added per key."""
    adds = {f"k{i}": [i, 1] for i in range(n) if key_group_for(f"k{i}", MAXP) in key_groups}
    for key, values in adds.items():
        for value in values:
            kind.add(backend, key, value)
    return adds


def _expected(kind, adds, key_groups=FULL):
    """What ``kind.read`` must return for a backend that owns ``key_groups``."""
    return {k: kind.model(v) for k, v in adds.items() if key_group_for(k, MAXP) in key_groups}


def _snapshot(backend, directory, checkpoint_id=1):
    snap = backend.snapshot_state(checkpoint_id)
    if snap.write is None:
        return snap, []
    directory.mkdir(parents=True, exist_ok=True)
    handle, size, written = snap.write(str(directory), "op-0", True)
    assert size > 0 and written > 0
    return snap, [keyed_handle_from_dict(handle, location=str(directory))]


def _restored(kind, key_groups, directory, handles, states):
    backend = kind.new(key_groups)
    backend.restore_state(str(directory), handles, states)
    return backend


def test_every_backend_implements_the_protocol(kind):
    backend = kind.new(FULL)
    assert isinstance(backend, KeyedStateBackend)
    assert isinstance(backend, PerKeyStateBackend) == (not isinstance(kind, Columnar))


def test_a_snapshot_restores_to_the_same_state(kind, tmp_path):
    backend = kind.new(FULL)
    adds = _fill(kind, backend)
    assert len({key_group_for(k, MAXP) for k in adds}) == MAXP
    snap, handles = _snapshot(backend, tmp_path / "chk-1")
    assert handles, "a backend with state writes a state file"
    restored = _restored(kind, FULL, tmp_path / "chk-1", handles, snap.states)
    assert kind.read(restored) == _expected(kind, adds)


def test_a_restore_keeps_exactly_the_key_groups_of_the_subtask(kind, tmp_path):
    backend = kind.new(FULL)
    adds = _fill(kind, backend)
    snap, handles = _snapshot(backend, tmp_path / "chk-1")
    for kg in HALVES:
        expected = _expected(kind, adds, kg)
        assert expected and len(expected) < len(adds)
        assert kind.read(_restored(kind, kg, tmp_path / "chk-1", handles, snap.states)) == expected


def test_snapshots_of_two_subtasks_merge_when_scaling_in(kind, tmp_path):
    adds, handles, states = {}, [], {}
    for i, kg in enumerate(HALVES):  # two subtasks, each with its own key groups
        part = kind.new(kg)
        adds.update(_fill(kind, part, key_groups=kg))
        snap, h = _snapshot(part, tmp_path / "chk-1" / str(i))
        states.update(snap.states)
        handles += [(tmp_path / "chk-1" / str(i), x) for x in h]
    merged = kind.new(FULL)
    for directory, handle in handles:
        merged.restore_state(str(directory), [handle], states)
    assert kind.read(merged) == _expected(kind, adds)


@pytest.mark.parametrize("key_groups", [FULL, HALVES[1]], ids=["same-range", "sub-range"])
def test_restoring_a_snapshot_twice_duplicates_nothing(kind, tmp_path, key_groups):
    """A restore replaces entries (list entries are not appended again, sums not added)."""
    backend = kind.new(FULL)
    adds = _fill(kind, backend)
    snap, handles = _snapshot(backend, tmp_path / "chk-1")
    twice = _restored(kind, key_groups, tmp_path / "chk-1", handles, snap.states)
    twice.restore_state(str(tmp_path / "chk-1"), handles, snap.states)
    assert kind.read(twice) == _expected(kind, adds, key_groups)


def test_an_empty_backend_restores_empty(kind, tmp_path):
    snap, handles = _snapshot(kind.new(FULL), tmp_path / "chk-1")
    assert kind.read(_restored(kind, FULL, tmp_path / "chk-1", handles, snap.states)) == {}


def test_the_synchronous_part_is_a_point_in_time_copy(kind, tmp_path):
    backend = kind.new(FULL)
    adds = _fill(kind, backend, n=50)
    snap = backend.snapshot_state(1)
    kind.add(backend, "k0", 1000)           # after the synchronous part: not in checkpoint 1
    kind.add(backend, "late", 5)
    (tmp_path / "chk-1").mkdir()
    handle, _, _ = snap.write(str(tmp_path / "chk-1"), "op-0", True)
    handles = [keyed_handle_from_dict(handle, location=str(tmp_path / "chk-1"))]
    restored = _restored(kind, FULL, tmp_path / "chk-1", handles, snap.states)
    assert kind.read(restored) == _expected(kind, adds)
    live = {**adds, "k0": [*adds["k0"], 1000], "late": [5]}
    assert kind.read(backend) == _expected(kind, live)  # the live state moved on


@pytest.mark.parametrize("cls", [HeapKeyedStateBackend, RocksDBKeyedStateBackend])
def test_setting_the_key_with_its_precomputed_key_group_scopes_state_as_set_current_key(
        cls, tmp_path):
    per_key = PerKey(cls, tmp_path)
    a, b = per_key.new(FULL), per_key.new(FULL)
    for key, value in (("x", 1), ("y", 2), ("x", 3), (7, 4)):
        per_key.add(a, key, value)
        b.set_current_key_in_group(key, key_group_for(key, MAXP))
        total = b.get_state(ValueStateDescriptor("total"))
        total.update((total.value() or 0) + value)
    for key in ("x", "y", 7):
        for backend in (a, b):
            backend.set_current_key(key)
        assert (a.get_state(ValueStateDescriptor("total")).value()
                == b.get_state(ValueStateDescriptor("total")).value())
        assert b.current_key_group == key_group_for(key, MAXP)
