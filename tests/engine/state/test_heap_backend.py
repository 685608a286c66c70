import pytest

from airflow_checkpoint_provider.engine import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateMigrationError,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import key_group_range_for


def backend(i=0, p=1):
    return HeapKeyedStateBackend("op", key_group_range_for(i, p, 128), 128)


def test_state_is_scoped_to_the_current_key():
    b = backend()
    v = b.get_state(ValueStateDescriptor("v", 0))
    lst = b.get_state(ListStateDescriptor("l"))
    m = b.get_state(MapStateDescriptor("m"))
    r = b.get_state(ReducingStateDescriptor("r", lambda a, x: a + x))
    b.set_current_key("a")
    v.update(1)
    lst.add("x")
    m.put("f", 2)
    r.add(5)
    r.add(6)
    b.set_current_key("b")
    assert v.value() == 0 and lst.get() == [] and m.get("f") is None and r.get() is None
    b.set_current_key("a")
    assert v.value() == 1 and lst.get() == ["x"] and m.items() == [("f", 2)] and r.get() == 11


def test_snapshot_restores_only_owned_key_groups_at_new_parallelism():
    b = backend()
    v = b.get_state(ValueStateDescriptor("v"))
    for i in range(200):
        b.set_current_key(f"k{i}")
        v.update(i)
    data, offsets, meta = b.snapshot()
    restored = {}
    for sub in range(3):
        nb = backend(sub, 3)
        for _kg, (off, n) in offsets.items():
            nb.restore_key_group_chunk(data[off:off + n], meta)
        nv = nb.get_state(ValueStateDescriptor("v"))
        for key in nb.keys("v"):
            nb.set_current_key(key)
            assert key not in restored
            restored[key] = nv.value()
    assert restored == {f"k{i}": i for i in range(200)}


def test_changed_state_kind_fails_naming_operator_and_state():
    b = backend()
    v = b.get_state(ValueStateDescriptor("counts"))
    b.set_current_key("a")
    v.update(1)
    data, offsets, meta = b.snapshot()
    nb = backend()
    for off, n in offsets.values():
        nb.restore_key_group_chunk(data[off:off + n], meta)
    with pytest.raises(StateMigrationError, match="operator 'op': state 'counts'"):
        nb.get_state(ListStateDescriptor("counts"))


def test_snapshot_file_contains_no_pickle():
    b = backend()
    v = b.get_state(ValueStateDescriptor("v"))
    b.set_current_key("a")
    v.update({"nested": [1, 2]})
    data, _, _ = b.snapshot()
    assert b"\x80\x04" not in data and b"\x80\x05" not in data  # pickle protocol headers
