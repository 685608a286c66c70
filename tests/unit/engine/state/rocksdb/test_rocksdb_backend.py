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
    b.write_out()  # the row cache's changes into RocksDB
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


# -- the row cache -------------------------------------------------------------------------
def _restored(tmp_path, handle, name="v"):
    """{key: value} of state ``name`` in a fresh backend restored from ``handle``."""
    r = backend(tmp_path, name="restored")
    r.restore(str(tmp_path / "job" / "chk"), [handle],
              {name: {"kind": "value", "serializer": "msgpack"}})
    state = r.get_state(ValueStateDescriptor(name))
    out = {}
    for key in list(r.keys(name)):
        r.set_current_key(key)
        out[key] = state.value()
    r.close()
    return out


def test_changes_held_in_the_row_cache_are_in_the_checkpoint_of_the_next_barrier(tmp_path):
    """Updates, a re-update and a clear() between two checkpoints reach RocksDB at the
    synchronous part (one write per row), so the checkpoint restores exactly them."""
    b = backend(tmp_path)
    fill(b, 100)
    v = b.get_state(ValueStateDescriptor("v"))
    b.set_current_key("k1")
    v.update(v.value() + 1000)
    v.update(v.value() + 1000)
    b.set_current_key("k2")
    v.clear()
    assert b.db.get(b._db_key(b"v\x00")) is None  # not written through: cached
    b.set_current_key("k1")
    assert v.value() == 2001  # read back from the cache
    handle, _size, _sent = b.upload(1, b.snapshot_sync(1), str(tmp_path / "job" / "chk"),
                                    full=True)
    got = _restored(tmp_path, handle)
    assert got == {f"k{i}": (2001 if i == 1 else i) for i in range(100) if i != 2}
    b.close()


def test_the_row_cache_writes_out_at_capacity_and_reads_stay_correct(tmp_path, monkeypatch):
    from airflow_checkpoint_provider.engine.state import rocksdb

    monkeypatch.setattr(rocksdb, "CACHE_ENTRIES", 16)
    b = backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", 0))
    for _round in range(3):  # more keys than the cache holds, read and written every round
        for i in range(100):
            b.set_current_key(f"k{i}")
            v.update(v.value() + i)
            assert len(b._cache) <= 16
    for i in range(100):
        b.set_current_key(f"k{i}")
        assert v.value() == 3 * i
    assert len(list(b.keys("v"))) == 100  # key iteration sees every row (written out first)
    b.close()


def test_a_value_read_from_the_row_cache_is_a_fresh_copy(tmp_path):
    """The cache keeps bytes, as RocksDB does: mutating what value() returned without
    update() changes nothing stored (the RocksDB backend's semantics, unlike heap)."""
    b = backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v"))
    b.set_current_key("a")
    v.update({"n": 1})
    v.value()["n"] = 99
    assert v.value() == {"n": 1}
    b.close()


def test_row_keys_are_the_layout_s_for_every_kind_of_key_and_a_bad_key_spoils_no_other(tmp_path):
    """The backend packs keys with a packer of its own (one per backend, not one per record):
    its rows are ``<key group><name>\\x00<msgpack(key)>`` as written before, for the key types
    a job keys by, and a key that cannot be packed leaves the next key's row right."""
    import pytest

    from airflow_checkpoint_provider.engine.serialization import packb
    from airflow_checkpoint_provider.engine.state.keygroups import key_group_for

    b = backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", 0))
    keys = ["k1", 7, -3, 2.5, b"\x00raw", ("a", 1), ["b", 2], True, None, "é" * 40]
    for i, key in enumerate(keys):
        b.set_current_key(key)
        v.update(i)
    with pytest.raises(TypeError):  # past the key check (set_current_key refuses it first)
        b.set_current_key_in_group(("a", object()), 3)
    b.set_current_key("k1")
    v.update(100)
    b.write_out()
    for i, key in enumerate(keys):
        key = tuple(key) if isinstance(key, list) else key
        row = key_group_for(key, 128).to_bytes(2, "big") + b"v\x00" + packb(key)
        assert b.db.get(row) is not None, key
        b.set_current_key(key)
        assert v.value() == (100 if key == "k1" else i)
    b.close()


def test_the_working_database_writes_no_write_ahead_log(tmp_path):
    """A restore starts from a snapshot taken after a flush, never from the working files:
    the log would be written and never read (Flink's RocksDB backend disables it too)."""
    b = backend(tmp_path)
    fill(b, 1000)
    b.write_out()
    logs = [f for f in os.listdir(b.db_path) if f.endswith(".log")]
    assert logs and all(os.path.getsize(os.path.join(b.db_path, f)) == 0 for f in logs)
    b.close()
