import os

from airflow_checkpoint_provider.engine import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.keygroups import key_group_range_for
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend


def backend(tmp_path, i=0, p=1, name="op"):
    return RocksDBKeyedStateBackend(name, key_group_range_for(i, p, 128), 128,
                                    workdir=str(tmp_path / f"w-{name}-{i}-{p}"))


def fill(b, n, start=0, value=lambda i: i):
    v = b.get_state(ValueStateDescriptor("v"))
    for i in range(start, start + n):
        b.set_current_key(f"k{i}")
        v.update(value(i))


def test_state_primitives_are_scoped_to_the_current_key(tmp_path):
    b = backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", 0))
    lst = b.get_state(ListStateDescriptor("l"))
    m = b.get_state(MapStateDescriptor("m"))
    b.set_current_key("a")
    v.update(3)
    lst.add(1)
    lst.add(2)
    m.put("x", {"y": 1})
    b.set_current_key("b")
    assert v.value() == 0 and lst.get() == [] and m.get("x") is None
    b.set_current_key("a")
    assert v.value() == 3 and lst.get() == [1, 2] and m.items() == [("x", {"y": 1})]
    b.close()


def test_incremental_checkpoint_uploads_only_new_sst_files(tmp_path):
    b = backend(tmp_path)
    fill(b, 100_000)
    chk1 = str(tmp_path / "job" / "chk-1")
    handle1, size1, sent1 = b.upload(1, b.snapshot_sync(1), chk1, full=False)
    assert sent1 == size1 > 0
    b.notify_complete(1)
    fill(b, 1000, value=lambda i: -i)      # 1% of the keys change
    chk2 = str(tmp_path / "job" / "chk-2")
    handle2, size2, sent2 = b.upload(2, b.snapshot_sync(2), chk2, full=False)
    assert sent2 < 0.2 * size2, (sent2, size2)
    reused = {f["shared"] for f in handle1["files"] if "shared" in f} & {
        f["shared"] for f in handle2["files"] if "shared" in f}
    assert reused, "the second checkpoint references SSTs of the first"
    # a savepoint is full and self-contained
    sp = str(tmp_path / "sp")
    handle3, size3, sent3 = b.upload(3, b.snapshot_sync(3), sp, full=True)
    assert sent3 == size3 and not any("shared" in f for f in handle3["files"])
    # restore at parallelism 2 keeps only owned key groups, values intact
    restored = {}
    for sub in range(2):
        nb = backend(tmp_path, sub, 2, name=f"r{sub}")
        nb.restore(chk2, [handle2], {"v": {"kind": "value", "serializer": "msgpack"}})
        v = nb.get_state(ValueStateDescriptor("v"))
        for key in nb.keys("v"):
            nb.set_current_key(key)
            assert key not in restored
            restored[key] = v.value()
        nb.close()
    assert len(restored) == 100_000
    assert restored["k5"] == -5 and restored["k5000"] == 5000
    b.close()


def test_uploads_of_an_unconfirmed_checkpoint_are_never_reused(tmp_path):
    b = backend(tmp_path)
    fill(b, 1000)
    h1, _, _ = b.upload(1, b.snapshot_sync(1), str(tmp_path / "j" / "chk-1"), full=False)
    # checkpoint 1 never completes (no notify): checkpoint 2 uploads everything again
    h2, size2, sent2 = b.upload(2, b.snapshot_sync(2), str(tmp_path / "j" / "chk-2"), full=False)
    assert sent2 == size2
    shared1 = {f["shared"] for f in h1["files"] if "shared" in f}
    assert not shared1 & {f["shared"] for f in h2["files"] if "shared" in f}
    b.close()
    assert not os.path.exists(b.workdir)


def test_list_state_append_keeps_the_stored_elements_encoded(tmp_path, monkeypatch):
    """``add``/``add_all`` on RocksDB append to the stored msgpack array without decoding it
    (a decode and re-encode per append made a long list quadratic: q9/q20's waiting bids);
    the bytes are exactly those of the whole list packed, across the array header sizes."""
    from airflow_checkpoint_provider.engine.serialization import packb
    from airflow_checkpoint_provider.engine.state import rocksdb

    decoded = []
    real = rocksdb.unpack_value
    monkeypatch.setattr(rocksdb, "unpack_value", lambda raw: decoded.append(raw) or real(raw))
    b = backend(tmp_path)
    lst = b.get_state(ListStateDescriptor("l"))
    b.set_current_key("a")
    expected: list = []
    values = [1, "two", {"x": [3, None]}, 2.5, b"\x00\x01", -(2**40), [], True]
    for i in range(20):  # fixarray (<= 15) -> array16
        v = values[i % len(values)]
        lst.add(v)
        expected.append(v)
    lst.add_all(list(range(65_536 - 20)))  # array16 -> array32 (65,536 elements)
    expected += list(range(65_536 - 20))
    lst.add_all([{"last": 1}, "x"])
    expected += [{"last": 1}, "x"]
    assert decoded == []  # no append decoded the list
    raw = b.db.get(b._db_key(b"l\x00"))
    assert raw == packb(expected)
    assert lst.get() == expected
    b.set_current_key("b")  # another key: its own list
    lst.add_all([])
    assert lst.get() == []
    lst.add((1, 2))  # a tuple stays a tuple (the typed encoding, issue 35)
    lst.add((3, 4))
    assert lst.get() == [(1, 2), (3, 4)] and all(type(t) is tuple for t in lst.get())
    b.close()
