"""The timer service over both per-key backends: order, deletion, state round trip."""

import pytest

from airflow_checkpoint_provider.engine.runtime.operators.timers import (
    EVENT_TIME,
    PROCESSING_TIME,
    TimerService,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange


def backend(kind, tmp_path, kgr=None, name="src"):
    kgr = kgr or KeyGroupRange(0, 127)
    if kind == "heap":
        return HeapKeyedStateBackend("op", kgr, 128)
    from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend

    return RocksDBKeyedStateBackend("op", kgr, 128, workdir=str(tmp_path / f"rocks-{name}-{kgr.start}"))


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_timers_fire_in_order_per_key_once_and_deleted_ones_do_not(kind, tmp_path):
    b = backend(kind, tmp_path)
    ts = TimerService(b)
    for key, t in [("a", 30), ("b", 10), ("a", 20), ("a", 20), ("c", 40)]:
        b.set_current_key(key)
        ts.register_event_time_timer(t)
    b.set_current_key("c")
    ts.delete_event_time_timer(40)
    fired = [(b.current_key, t) for t in ts.due(EVENT_TIME, 35)]
    assert fired == [("b", 10), ("a", 20), ("a", 30)]
    assert list(ts.due(EVENT_TIME, 100)) == []
    b.set_current_key("a")
    ts.register_processing_time_timer(5)
    assert ts.next_processing_time() == 5
    assert [(b.current_key, t) for t in ts.due(PROCESSING_TIME, 5)] == [("a", 5)]
    with pytest.raises(TypeError, match="integer epoch milliseconds"):
        ts.register_event_time_timer(1.5)
    b.close()


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_timers_survive_a_snapshot_and_move_with_their_key_group(kind, tmp_path):
    from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict

    b = backend(kind, tmp_path)
    ts = TimerService(b)
    keys = [f"k{i}" for i in range(40)]
    for i, key in enumerate(keys):
        b.set_current_key(key)
        ts.register_event_time_timer(1000 + i)
    snap = b.snapshot_state(1)
    d = tmp_path / "chk"
    d.mkdir()
    handle = keyed_handle_from_dict(snap.write(str(d), "op-0", True)[0], location=str(d))
    fired = []
    for kgr in (KeyGroupRange(0, 63), KeyGroupRange(64, 127)):
        r = backend(kind, tmp_path, kgr, name="restored")
        r.restore_state(str(d), [handle], snap.states)
        service = TimerService(r)
        service.rebuild()
        fired += [(r.current_key, t) for t in service.due(EVENT_TIME, 10**6)]
        r.close()
    assert sorted(fired) == sorted((k, 1000 + i) for i, k in enumerate(keys))
    b.close()
