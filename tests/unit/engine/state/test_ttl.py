"""State TTL on both per-key backends: never returns expired values, update types, clean-up
at snapshots, and refusing a TTL change against a snapshot."""

import datetime as dt

import pytest

from airflow_checkpoint_provider.engine import StateMigrationError
from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
from airflow_checkpoint_provider.engine.serialization import Serializer
from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict
from airflow_checkpoint_provider.engine.state import ttl
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

KGR = KeyGroupRange(0, 127)


class Clock:
    def __init__(self):
        self.t = 1_000_000

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(ttl, "now_ms", c)
    return c


def make(kind, tmp_path, name="a"):
    if kind == "heap":
        backend = HeapKeyedStateBackend("op", KGR, 128)
    else:
        from airflow_checkpoint_provider.engine.state.rocksdb import RocksDBKeyedStateBackend

        backend = RocksDBKeyedStateBackend("op", KGR, 128, workdir=str(tmp_path / f"rocks-{name}"))
    ctx = RuntimeContext(job_id="j", job_name="n", operator_uid="op", subtask_index=0,
                         parallelism=1, attempt=0, backend=backend)
    return backend, ctx


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_expired_values_are_never_returned(kind, tmp_path, clock):
    backend, ctx = make(kind, tmp_path)
    value = ctx.value_state("v", default=0, ttl=dt.timedelta(seconds=10))
    items = ctx.list_state("l", ttl=10_000)
    entries = ctx.map_state("m", ttl=10_000)
    total = ctx.reducing_state("r", lambda a, b: a + b, ttl=10_000)
    backend.set_current_key("k")
    value.update(5)
    items.add(1)
    entries.put("x", 1)
    total.add(3)
    clock.t += 6_000
    items.add(2)
    entries.put("y", 2)
    total.add(4)
    assert (value.value(), items.get(), sorted(entries.items()), total.get()) == \
        (5, [1, 2], [("x", 1), ("y", 2)], 7)
    clock.t += 4_000  # the first writes are 10 s old now
    assert value.value() == 0
    assert items.get() == [2]
    assert sorted(entries.items()) == [("y", 2)] and not entries.contains("x")
    assert total.get() == 7, "a reducing state's clock restarts on every add"
    clock.t += 10_000
    assert (items.get(), entries.is_empty(), total.get()) == ([], True, None)
    total.add(1)
    assert total.get() == 1, "an expired accumulator does not take part"
    backend.close()


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_on_read_and_write_restarts_the_clock_on_reads(kind, tmp_path, clock):
    backend, ctx = make(kind, tmp_path)
    value = ctx.value_state("v", ttl=1_000, ttl_update="on_read_and_write")
    backend.set_current_key("k")
    value.update("x")
    for _ in range(5):
        clock.t += 900
        assert value.value() == "x"
    clock.t += 1_000
    assert value.value() is None
    backend.close()


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_snapshots_drop_expired_values(kind, tmp_path, clock):
    backend, ctx = make(kind, tmp_path)
    value = ctx.value_state("v", ttl=1_000)
    for i in range(200):
        backend.set_current_key(i)
        value.update(i)
    clock.t += 500
    for i in range(100, 200):
        backend.set_current_key(i)
        value.update(i)  # rewritten: alive for another second
    clock.t += 600
    snap = backend.snapshot_state(1)
    d = tmp_path / "chk"
    d.mkdir()
    handle = keyed_handle_from_dict(snap.write(str(d), "op-0", True)[0], location=str(d))
    assert sorted(backend.keys("v")) == list(range(100, 200)), "dropped from the live state"
    restored, rctx = make(kind, tmp_path, name="restored")
    restored.restore_state(str(d), [handle], snap.states)
    assert sorted(restored.keys("v")) == list(range(100, 200)), "and from the snapshot"
    rvalue = rctx.value_state("v", ttl=5_000)  # a new duration is fine
    restored.set_current_key(150)
    assert rvalue.value() == 150
    backend.close()
    restored.close()


def test_adding_or_removing_a_ttl_against_a_snapshot_is_refused(tmp_path, clock):
    backend, ctx = make("heap", tmp_path)
    ctx.value_state("v", ttl=1_000)
    backend.set_current_key("k")
    ctx.value_state("v", ttl=1_000).update(1)
    snap = backend.snapshot_state(1)
    d = tmp_path / "chk"
    d.mkdir()
    handle = keyed_handle_from_dict(snap.write(str(d), "op-0", True)[0], location=str(d))
    restored, rctx = make("heap", tmp_path, name="r")
    restored.restore_state(str(d), [handle], snap.states)
    with pytest.raises(StateMigrationError,
                       match=r"operator 'op': state 'v' was snapshotted with a TTL and is now "
                             r"declared without one"):
        rctx.value_state("v")


def test_ttl_arguments_are_checked():
    backend, ctx = make("heap", None)
    with pytest.raises(ValueError, match="ttl must be a positive duration"):
        ctx.value_state("v", ttl=0)
    with pytest.raises(ValueError, match="ttl_update must be"):
        ctx.value_state("v", ttl=10, ttl_update="sometimes")
    json = Serializer("json", str, str)
    from airflow_checkpoint_provider.engine.state.descriptors import ListStateDescriptor

    with pytest.raises(ValueError, match="needs the default msgpack serializer"):
        ListStateDescriptor("l", json, ttl=10)


def test_aggregate_ttl_restarts_expired_keys_and_drops_them_from_snapshots(tmp_path, clock):
    import pyarrow as pa

    from airflow_checkpoint_provider.engine.state.columnar import AggregateSpec, AggregateTable

    spec = AggregateSpec("key", [("n", "count", None), ("total", "sum", "v")], ttl_ms=1_000)
    table = AggregateTable(spec, KGR, 128, "agg")

    def update(keys):
        out = table.update(pa.RecordBatch.from_pydict({"key": keys, "v": [1] * len(keys)}))
        return dict(zip(out.column("key").to_pylist(), out.column("n").to_pylist(), strict=True))

    assert update(["a", "b", "a"]) == {"a": 2, "b": 1}
    clock.t += 600
    assert update(["a"]) == {"a": 3}
    clock.t += 600  # b: 1.2 s without an update, a: 0.6 s
    assert update(["b", "a"]) == {"b": 1, "a": 4}, "b expired: it starts over"
    clock.t += 1_100
    update(["c"])
    snap = table.snapshot_state(1)
    assert sorted(table.index.take_keys().tolist()) == ["c"], "a and b left the state"
    handle = keyed_handle_from_dict(snap.write(str(tmp_path), "agg-0", True)[0],
                                    location=str(tmp_path))
    restored = AggregateTable(spec, KGR, 128, "agg")
    restored.restore_state(str(tmp_path), [handle], snap.states)
    assert restored.index.take_keys().tolist() == ["c"]
