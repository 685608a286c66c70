"""The typed encoding of state values (issue 35, :mod:`...typed_codec`): values of every
supported type round-trip; what cannot is refused when it is stored, naming the operator,
the state and the type; snapshots written by earlier versions (plain msgpack) restore."""

from __future__ import annotations

import base64
import datetime as dt
import enum
from collections import OrderedDict, defaultdict

import msgpack
import pytest
from budget import scaled
from hypothesis import given, settings
from value_strategies import HASHABLE, VALUES, same

from airflow_checkpoint_provider.engine.errors import StateValueError
from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict
from airflow_checkpoint_provider.engine.state.backend import write_state_file
from airflow_checkpoint_provider.engine.state.descriptors import (
    EntryMapStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_for
from airflow_checkpoint_provider.engine.state.operator_state import OperatorStateStore
from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend
from airflow_checkpoint_provider.engine.typed_codec import (
    UnsupportedValueError,
    check_value,
    pack_key,
    pack_value,
    unpack_key,
    unpack_value,
)

MAXP = 8
ALL = KeyGroupRange(0, MAXP - 1)


@settings(max_examples=scaled(100, 300), deadline=None, database=None)  # tests/support/budget.py
@given(VALUES)
def test_every_supported_value_round_trips_with_its_type(value):
    check_value(value)  # accepted: so it must come back
    assert same(unpack_value(pack_value(value)), value)


@settings(max_examples=scaled(70, 200), deadline=None, database=None)
@given(HASHABLE)
def test_row_keys_round_trip_and_tuples_keep_the_plain_msgpack_bytes(key):
    assert same(unpack_key(pack_key(key)), key)
    plain_tuple = (1, ("a", 2), b"x")
    assert pack_key(plain_tuple) == msgpack.packb(plain_tuple, use_bin_type=True)


class Color(enum.IntEnum):
    RED = 1


class Foo:
    pass


class PytzLike(dt.tzinfo):
    """A tzinfo of its own class (as pytz and dateutil have): not restorable by name."""

    def utcoffset(self, d):
        return dt.timedelta(hours=1)

    def dst(self, d):
        return None


@pytest.mark.parametrize(("value", "named"), [
    (Foo(), "type test_value_contract.Foo"),
    (Color.RED, "type test_value_contract.Color"),
    (defaultdict(int), "type collections.defaultdict"),
    (OrderedDict(), "type collections.OrderedDict"),
    ({"nested": [1, Foo()]}, "type test_value_contract.Foo"),
    (bytearray(b"x"), "type bytearray"),
    (dt.datetime(2024, 1, 1, tzinfo=PytzLike()), "tzinfo of type .*PytzLike"),
])
@pytest.mark.parametrize("backend_cls", [HeapKeyedStateBackend, RocksDBKeyedStateBackend])
def test_a_value_that_cannot_round_trip_is_refused_when_stored(tmp_path, backend_cls, value,
                                                               named):
    kwargs = {"workdir": str(tmp_path / "rocks")} if backend_cls is RocksDBKeyedStateBackend \
        else {}
    backend = backend_cls("dedup", ALL, MAXP, **kwargs)
    backend.set_current_key("k")
    calls = {
        "value": lambda: backend.get_state(ValueStateDescriptor("last")).update(value),
        "list": lambda: backend.get_state(ListStateDescriptor("hist")).add(value),
        "map": lambda: backend.get_state(MapStateDescriptor("seen")).put("u", value),
        "map key": lambda: backend.get_state(MapStateDescriptor("seen")).put(value, 1),
        "entry map": lambda: backend.get_state(EntryMapStateDescriptor("rows")).put(1, value),
        "reducing": lambda: backend.get_state(
            ReducingStateDescriptor("acc", lambda a, b: b)).add(value),
    }
    for what, call in calls.items():
        if what == "map key" and not _hashable(value):
            continue
        with pytest.raises(StateValueError, match=rf"operator 'dedup' state '\w+': cannot "
                                                  rf"store.*{named}") as refused:
            call()
        assert isinstance(refused.value, TypeError), what
    if backend_cls is HeapKeyedStateBackend:
        assert backend.state_size_entries() == 0  # nothing was stored
    backend.close()


def _hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def test_operator_and_broadcast_state_refuse_at_add_and_put():
    store = OperatorStateStore("rules", 0, 1, None)
    with pytest.raises(StateValueError, match=r"operator 'rules' state 'buf': cannot store "
                                              r"a value of type test_value_contract.Foo"):
        store.get_list_state("buf").add(Foo())
    with pytest.raises(StateValueError, match=r"operator 'rules' state 'bc': cannot store a "
                                              r"map key: a value of type .*Color"):
        store.get_broadcast_state("bc").put(Color.RED, 1)


def test_check_value_agrees_with_the_encoder_on_refusals():
    for bad in (Foo(), Color.RED, defaultdict(list), {(1, Foo()): 1}):
        with pytest.raises(UnsupportedValueError):
            check_value(bad)
        with pytest.raises(UnsupportedValueError):
            pack_value(bad)


# -- snapshots written before the typed encoding -----------------------------------------

def _legacy_heap_file(tmp_path, entries_by_state: dict, kinds: dict) -> tuple[list, dict]:
    """A heap snapshot file exactly as the previous code wrote it: per key group
    ``msgpack.packb([kg, {state: [[key, value], ...]}], use_bin_type=True)``."""
    by_kg: dict = {}
    for name, entries in entries_by_state.items():
        for key, value in entries.items():
            by_kg.setdefault(key_group_for(key, MAXP), {}).setdefault(name, []).append(
                [key, value])
    chunks, offsets, pos = [], {}, 0
    for kg in sorted(by_kg):
        chunk = msgpack.packb([kg, by_kg[kg]], use_bin_type=True)
        offsets[str(kg)] = [pos, len(chunk)]
        chunks.append(chunk)
        pos += len(chunk)
    handle, _, _ = write_state_file(str(tmp_path), "legacy", "state", b"".join(chunks),
                                    {"offsets": offsets})
    states = {n: {"kind": k, "serializer": "msgpack"} for n, k in kinds.items()}
    return [keyed_handle_from_dict(handle, location=str(tmp_path))], states


@pytest.mark.parametrize("backend_cls", [HeapKeyedStateBackend, RocksDBKeyedStateBackend])
def test_a_heap_snapshot_of_the_previous_format_restores_as_before(tmp_path, backend_cls):
    entries = {
        "total": {"a": 5, ("t", 1): {"nested": [1, [2]]}},
        "hist": {"a": [1, 2, 3]},
        "seen": {"a": {"x": 1, 2: "two"}},
    }
    handles, states = _legacy_heap_file(tmp_path, entries,
                                        {"total": "value", "hist": "list", "seen": "map"})
    kwargs = {"workdir": str(tmp_path / "rocks")} if backend_cls is RocksDBKeyedStateBackend \
        else {}
    backend = backend_cls("op", ALL, MAXP, **kwargs)
    backend.restore_state(str(tmp_path), handles, states)
    total = backend.get_state(ValueStateDescriptor("total"))
    backend.set_current_key("a")
    assert total.value() == 5
    assert backend.get_state(ListStateDescriptor("hist")).get() == [1, 2, 3]
    assert dict(backend.get_state(MapStateDescriptor("seen")).items()) == {"x": 1, 2: "two"}
    backend.set_current_key(("t", 1))
    assert same(total.value(), {"nested": [1, [2]]})  # lists stayed lists
    backend.close()


def test_a_previous_format_snapshot_with_tuple_map_keys_now_restores(tmp_path):
    """The issue's snapshots: map state with tuple user keys, written as msgpack arrays
    (restoring them failed with ``unhashable type: 'list'``); the keys come back as
    tuples."""
    handles, states = _legacy_heap_file(tmp_path, {"seen": {"k": {(0, 1): 3, (2, 4): 1}}},
                                        {"seen": "map"})
    backend = HeapKeyedStateBackend("dedup", ALL, MAXP)
    backend.restore_state(str(tmp_path), handles, states)
    backend.set_current_key("k")
    seen = backend.get_state(MapStateDescriptor("seen"))
    assert seen.get((0, 1)) == 3 and seen.get((2, 4)) == 1


def test_operator_state_entries_of_the_previous_format_restore():
    old = [{"state": "buf", "mode": "split", "subtask": 0, "value": [1, [2, 3]]},
           {"state": "bc", "mode": "broadcast", "subtask": 0, "value": {"1": "one"}}]
    store = OperatorStateStore("op", 0, 1, old)
    assert store.get_list_state("buf").get() == [1, [2, 3]]
    assert store.get_broadcast_state("bc").items() == [("1", "one")]
    # and the new layout is base64 typed msgpack inside the (JSON) _metadata
    store.get_broadcast_state("bc").put((1, 2), {3})
    entry = next(e for e in store.snapshot() if e["state"] == "bc")
    assert entry["codec"] == 2 and "value" not in entry
    assert unpack_value(base64.b64decode(entry["data"])) == {"1": "one", (1, 2): {3}}


def test_rocksdb_entry_map_rows_of_the_previous_format_are_found_by_tuple_keys(tmp_path):
    """Entry map rows written by the previous code (plain msgpack user keys): a restored
    database is looked up with the same bytes, so ``get((epoch, n))`` finds them."""
    backend = RocksDBKeyedStateBackend("join", ALL, MAXP, workdir=str(tmp_path / "r"))
    rows = backend.get_state(EntryMapStateDescriptor("left"))
    backend.set_current_key("k")
    legacy_row = backend._db_key(b"left\x00") + msgpack.packb((7, 1), use_bin_type=True)
    backend.db.put(legacy_row, msgpack.packb([1, 2], use_bin_type=True))
    assert rows.get((7, 1)) == [1, 2]
    assert rows.keys() == [(7, 1)]
    backend.close()


def test_values_come_back_from_rocksdb_with_their_types_without_a_restore(tmp_path):
    backend = RocksDBKeyedStateBackend("op", ALL, MAXP, workdir=str(tmp_path / "r"))
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v"))
    v.update((1, {2}))
    assert same(v.value(), (1, {2}))
    backend.close()




@pytest.mark.parametrize("chunk", [
    b"\xc1",                                                       # not msgpack
    msgpack.packb([1, {}, 2, 3]),                                  # not a chunk
    msgpack.packb([1, msgpack.ExtType(5, b"\x93\x01")]),           # truncated datetime
    msgpack.packb([1, {"s": {1: msgpack.ExtType(10, msgpack.packb(["|O", b"12345678"]))}},
                   2]),                                            # object dtype: refused
    msgpack.packb([1, {"s": {1: msgpack.ExtType(99, b"")}}, 2]),   # unknown ext code
])
def test_a_malformed_state_chunk_is_corrupt_naming_the_operator(chunk):
    from airflow_checkpoint_provider.engine.errors import CorruptCheckpointError
    from airflow_checkpoint_provider.engine.state.heap import decode_chunk

    with pytest.raises(CorruptCheckpointError, match="operator 'op': a heap state chunk"):
        decode_chunk(chunk, "op")
