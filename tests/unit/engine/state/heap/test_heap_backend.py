import pytest

from airflow_checkpoint_provider.engine import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateMigrationError,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_range_for


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


# -- copy-on-write snapshots: capture() (synchronous) + serialize_capture() (asynchronous) --


def _cow_backend():
    b = backend()
    states = (
        b.get_state(ValueStateDescriptor("v")),
        b.get_state(ListStateDescriptor("l")),
        b.get_state(MapStateDescriptor("m")),
        b.get_state(ReducingStateDescriptor("r", lambda a, x: a + x)),
    )
    return b, states


def _dump(b):
    """{state name: {key: value}} of a heap backend, read through its tables."""
    return {
        name: {k: v for t in kgs.values() for k, v in t.items()} for name, kgs in b.tables.items()
    }


def _restored(data, offsets, meta):
    nb = backend()
    for off, n in offsets.values():
        nb.restore_key_group_chunk(data[off : off + n], meta)
    return nb


def _fill(b, states, n):
    v, lst, m, r = states
    for i in range(n):
        b.set_current_key(f"k{i}")
        v.update({"count": i})
        lst.add_all([i, i + 1])
        m.put("a", i)
        m.put("b", [i])
        r.add(i)


def test_capture_serializes_the_state_at_capture_time_while_the_live_state_moves_on():
    b, (v, lst, m, r) = _cow_backend()
    _fill(b, (v, lst, m, r), 50)
    expected = _restored(*b.snapshot())
    cap = b.capture()
    # after the capture: update values, append to lists, put/remove map entries, clear keys,
    # add new keys (twice for some keys: the second change mutates the copy in place)
    for i in range(50):
        b.set_current_key(f"k{i}")
        if i % 5 == 0:
            v.clear(), lst.clear(), m.clear(), r.clear()
            continue
        v.update({"count": -i})
        lst.add(100 + i)
        lst.add_all([200 + i])
        m.put("a", -i)
        m.put("c", i)
        m.remove("b")
        r.add(1000)
        if i % 7 == 0:
            lst.update(["replaced"])
            m.remove("a"), m.remove("c")  # removing the last entry clears the key
    for i in range(50, 60):
        b.set_current_key(f"k{i}")
        v.update({"count": i}), lst.add(i), m.put("new", i), r.add(i)
    data, offsets, meta = b.serialize_capture(cap)
    assert _dump(_restored(data, offsets, meta)) == _dump(expected)
    assert _dump(expected)["l"]["k1"] == [1, 2] and _dump(expected)["m"]["k1"] == {"a": 1, "b": [1]}
    # the live backend has the new values
    b.set_current_key("k0")
    assert v.value() is None and lst.get() == [] and m.is_empty() and r.get() is None
    b.set_current_key("k1")
    assert v.value() == {"count": -1} and lst.get() == [1, 2, 101, 201]
    assert m.items() == [("a", -1), ("c", 1)] and r.get() == 1001
    b.set_current_key("k7")
    assert lst.get() == ["replaced"] and m.is_empty()
    b.set_current_key("k55")
    assert lst.get() == [55] and m.items() == [("new", 55)] and r.get() == 55
    assert not b._live_captures  # serialized: no more copy-on-write until the next capture


def test_overlapping_captures_each_see_their_own_state():
    b, (v, lst, m, r) = _cow_backend()
    b.set_current_key("k")
    lst.add(1), m.put("x", 1)
    first = b.capture()
    lst.add(2), m.put("y", 2)  # copies (shared with the first capture), then owned
    second = b.capture()
    lst.add(3), m.put("z", 3)  # shared with the second capture again: copies once more
    lst.add(4)
    one = _dump(_restored(*b.serialize_capture(first)))
    two = _dump(_restored(*b.serialize_capture(second)))
    assert one["l"] == {"k": [1]} and one["m"] == {"k": {"x": 1}}
    assert two["l"] == {"k": [1, 2]} and two["m"] == {"k": {"x": 1, "y": 2}}
    assert lst.get() == [1, 2, 3, 4] and m.keys() == ["x", "y", "z"]


def test_serialize_capture_in_a_thread_while_the_state_keeps_changing():
    import threading
    import time

    from airflow_checkpoint_provider.engine import Serializer

    calls = [0]

    def yielding_dumps(value):  # a Python-level serializer that lets the task thread run
        calls[0] += 1
        if calls[0] % 50 == 0:
            time.sleep(0)
        return value

    b, states = _cow_backend()
    v, lst, m, r = states
    slow = b.get_state(ListStateDescriptor("s", Serializer("slow", yielding_dumps, list)))
    _fill(b, states, 5000)
    for i in range(5000):
        b.set_current_key(f"k{i}")
        slow.add(i)
    expected = b.snapshot()[0]
    cap = b.capture()
    result, errors = [], []

    def serialize():
        try:
            result.append(b.serialize_capture(cap))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=serialize)
    t.start()
    ops = overlap = 0
    while ops < 300_000:  # keep mutating, adding and removing keys while it serializes
        for i in range(0, 8000, 3):
            b.set_current_key(f"k{(i + ops) % 8000}")
            v.update({"count": ops})
            lst.add(ops)
            slow.add(ops)
            m.put(ops % 4, ops)
            m.remove((ops + 2) % 4)
            if i % 9 == 0:
                lst.clear()
                slow.clear()
                r.clear()
            ops += 1
            if t.is_alive():  # after each change (per pass, a loaded machine saw none)
                overlap = ops
    t.join()
    assert not errors, errors
    assert overlap > 0  # the state did change while the capture was being serialized
    data, offsets, meta = result[0]
    assert data == expected
    assert _restored(data, offsets, meta).tables.keys() == {"v", "l", "m", "r", "s"}


def test_snapshot_bytes_equal_serialized_capture():
    b, states = _cow_backend()
    _fill(b, states, 300)
    b.set_current_key(("tuple", 1))
    states[0].update([1, {"x": b"bytes"}])
    assert b.snapshot() == b.serialize_capture(b.capture())
    empty = backend().capture()
    assert empty.empty and backend().serialize_capture(empty) == (b"", {}, {})


def test_capture_keeps_the_serializer_of_its_time():
    from airflow_checkpoint_provider.engine import Serializer

    json_ser = Serializer("json", lambda v: __import__("json").dumps(v), __import__("json").loads)
    b = backend()
    s = b.get_state(ValueStateDescriptor("j", serializer=json_ser))
    b.set_current_key("a")
    s.update({"n": 1})
    data, offsets, meta = b.snapshot()
    nb = _restored(data, offsets, meta)
    cap = nb.capture()  # "j" restored but not registered yet: values still serialized
    ns = nb.get_state(ValueStateDescriptor("j", serializer=json_ser))
    assert nb.serialize_capture(cap)[0] == data
    nb.set_current_key("a")
    assert ns.value() == {"n": 1}


def test_a_capture_is_serialized_once_and_released_when_dropped():
    b, (v, lst, m, r) = _cow_backend()
    b.set_current_key("a")
    lst.add(1)
    cap = b.capture()
    b.serialize_capture(cap)
    with pytest.raises(RuntimeError, match="already serialized"):
        b.serialize_capture(cap)
    b.capture()  # dropped without being serialized
    import gc

    gc.collect()
    assert not b._live_captures


def test_mutating_what_value_returned_after_a_capture_leaves_the_capture_intact():
    b = HeapKeyedStateBackend("op", KeyGroupRange(0, 127), 128)
    state = b.get_state(ValueStateDescriptor("acc"))
    reducing = b.get_state(ReducingStateDescriptor("r", lambda acc, v: acc.append(v) or acc))
    b.set_current_key("k")
    state.update({"n": 1})
    reducing.add([1])
    cap = b.capture()
    v = state.value()          # the pattern a per-record function writes
    v["n"] += 1
    state.update(v)
    reducing.add(2)            # the reduce function mutates its accumulator in place
    data, offsets, meta = b.serialize_capture(cap)
    fresh = HeapKeyedStateBackend("op", KeyGroupRange(0, 127), 128)
    for off, length in offsets.values():
        fresh.restore_key_group_chunk(data[off:off + length], meta)
    fresh.set_current_key("k")
    assert fresh.get_state(ValueStateDescriptor("acc")).value() == {"n": 1}
    assert fresh.get_state(ReducingStateDescriptor("r", lambda a, c: a)).get() == [1]
    assert state.value() == {"n": 2} and reducing.get() == [1, 2]
