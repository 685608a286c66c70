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
from airflow_checkpoint_provider.engine.state.descriptors import ValueStateDescriptor
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_for
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend

MAXP = 16
FULL = KeyGroupRange(0, MAXP - 1)
HALVES = (KeyGroupRange(0, 7), KeyGroupRange(8, 15))


class PerKey:
    """Heap or RocksDB: a value state ``total`` per key."""

    def __init__(self, cls, tmp_path):
        self.cls, self.tmp, self.ids = cls, tmp_path, itertools.count()

    def new(self, key_groups):
        if self.cls is RocksDBKeyedStateBackend:
            return self.cls("op", key_groups, MAXP,
                            workdir=str(self.tmp / f"rocks-{next(self.ids)}"))
        return self.cls("op", key_groups, MAXP)

    def add(self, backend, key, value):
        backend.set_current_key(key)
        state = backend.get_state(_descriptor())
        state.update((state.value() or 0) + value)

    def read(self, backend):
        out = {}
        keys = list(backend.keys("total"))
        state = backend.get_state(_descriptor())
        for k in keys:
            backend.set_current_key(k)
            out[k] = state.value()
        return out


def _descriptor():
    return ValueStateDescriptor("total", None)


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


def _fill(kind, backend, n=200):
    expected = {}
    for i in range(n):
        key = f"k{i}"
        kind.add(backend, key, i)
        kind.add(backend, key, 1)
        expected[key] = i + 1
    return expected


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
    expected = _fill(kind, backend)
    snap, handles = _snapshot(backend, tmp_path / "chk-1")
    assert handles, "a backend with state writes a state file"
    assert kind.read(_restored(kind, FULL, tmp_path / "chk-1", handles, snap.states)) == expected


def test_a_restore_keeps_exactly_the_key_groups_of_the_subtask(kind, tmp_path):
    backend = kind.new(FULL)
    expected = _fill(kind, backend)
    snap, handles = _snapshot(backend, tmp_path / "chk-1")
    halves = [kind.read(_restored(kind, kg, tmp_path / "chk-1", handles, snap.states))
              for kg in HALVES]
    for kg, half in zip(HALVES, halves, strict=True):
        assert half and all(key_group_for(k, MAXP) in kg for k in half)
    assert {**halves[0], **halves[1]} == expected and not set(halves[0]) & set(halves[1])


def test_snapshots_of_two_subtasks_merge_when_scaling_in(kind, tmp_path):
    whole = kind.new(FULL)
    expected = _fill(kind, whole)
    handles, states = [], {}
    for i, kg in enumerate(HALVES):  # two subtasks, each with its own key groups
        part = kind.new(kg)
        for key, total in expected.items():
            if key_group_for(key, MAXP) in kg:
                kind.add(part, key, total)
        snap, h = _snapshot(part, tmp_path / "chk-1" / str(i))
        states.update(snap.states)
        handles += [(tmp_path / "chk-1" / str(i), x) for x in h]
    merged = kind.new(FULL)
    for directory, handle in handles:
        merged.restore_state(str(directory), [handle], states)
    assert kind.read(merged) == expected


def test_an_empty_backend_restores_empty(kind, tmp_path):
    snap, handles = _snapshot(kind.new(FULL), tmp_path / "chk-1")
    assert kind.read(_restored(kind, FULL, tmp_path / "chk-1", handles, snap.states)) == {}


def test_the_synchronous_part_is_a_point_in_time_copy(kind, tmp_path):
    backend = kind.new(FULL)
    expected = _fill(kind, backend, n=50)
    snap = backend.snapshot_state(1)
    kind.add(backend, "k0", 1000)           # after the synchronous part: not in checkpoint 1
    kind.add(backend, "late", 5)
    (tmp_path / "chk-1").mkdir()
    handle, _, _ = snap.write(str(tmp_path / "chk-1"), "op-0", True)
    handles = [keyed_handle_from_dict(handle, location=str(tmp_path / "chk-1"))]
    assert kind.read(_restored(kind, FULL, tmp_path / "chk-1", handles, snap.states)) == expected
    assert kind.read(backend)["k0"] == expected["k0"] + 1000  # the live state moved on
