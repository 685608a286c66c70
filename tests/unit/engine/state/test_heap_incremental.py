"""Incremental heap snapshots (issue 55): a chain of a base and deltas under the job's
``shared/``, restored in order, compacted, reference-counted by the shared-state registry."""

from __future__ import annotations

import copy
import os
import random
from types import SimpleNamespace

import pytest

from airflow_checkpoint_provider.engine import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.checkpoint.coordinator import _shared_keys
from airflow_checkpoint_provider.engine.checkpoint.outcomes import TaskAck
from airflow_checkpoint_provider.engine.snapshot.handles import (
    HeapChangelogHandle,
    keyed_handle_from_dict,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_range_for

pytestmark = pytest.mark.timeout(120)

MAX_P = 128


def _descriptors():
    return [ValueStateDescriptor("v"), ValueStateDescriptor("d"), ListStateDescriptor("l"),
            MapStateDescriptor("m"), ReducingStateDescriptor("r", lambda a, x: a + x)]


def tables(b: HeapKeyedStateBackend) -> dict:
    """``{state: {key: value}}`` of a backend, empty entries left out, deep-copied."""
    out: dict = {}
    for name, per_kg in b.tables.items():
        for entries in per_kg.values():
            for k, v in entries.items():
                out.setdefault(name, {})[k] = copy.deepcopy(v)
    return out


class Job:
    """One operator subtask checkpointing into a job directory, with the coordinator's
    bookkeeping of shared files: registration on completion (``_shared_keys``, the metadata
    DB's registry) and deletion of unreferenced ones after subsumption (``retain``)."""

    def __init__(self, tmp_path, store: MetadataStore | None = None, retain: int = 1,
                 key_groups: KeyGroupRange | None = None, **kw) -> None:
        self.dir = str(tmp_path / "job")
        os.makedirs(self.dir, exist_ok=True)
        self.b = HeapKeyedStateBackend("op", key_groups or KeyGroupRange(0, MAX_P - 1), MAX_P,
                                       incremental=True, **kw)
        self.states = {d.name: self.b.get_state(d) for d in _descriptors()}
        self.store = store
        self.job_id = "a1b2c3d4e5f6"
        if store is not None:
            store.create_job(job_id=self.job_id, job_name="incr", parallelism=1, version="v1")
        self.retain = retain
        self.completed: list[int] = []
        self.handles: dict[int, dict] = {}
        self.expected: dict[int, dict] = {}
        self.rnd = random.Random(7)
        self.next_id = 1

    # -- records --------------------------------------------------------------------------
    def process(self, n: int, keys: int = 200) -> None:
        s, rnd = self.states, self.rnd
        for _ in range(n):
            self.b.set_current_key(f"k{rnd.randrange(keys)}")
            op = rnd.randrange(10)
            if op == 0:
                s["v"].update(None)  # clears
            elif op == 1:
                s["l"].add(rnd.randrange(100))
            elif op == 2:
                s["l"].update([])
            elif op == 3:
                s["m"].put(rnd.randrange(5), rnd.random())
            elif op == 4:
                s["m"].remove(rnd.randrange(5))
            elif op == 5:
                s["r"].add(1)
            elif op == 6:
                current = s["d"].value()
                if current is not None:  # changed in place, never written back
                    current["n"] += 1
                else:
                    s["d"].update({"n": 0})
            elif op == 7:
                s["d"].clear()
            else:
                s["v"].update(rnd.randrange(1000))

    # -- checkpoints ----------------------------------------------------------------------
    def trigger(self, *, savepoint: bool = False) -> tuple[int, object]:
        """The synchronous part of checkpoint ``id``: ``(id, write)``."""
        cid = self.next_id
        self.next_id += 1
        snap = self.b.snapshot_state(cid)
        self.expected[cid] = tables(self.b)
        return cid, (snap.write, savepoint)

    def write(self, cid: int, pending) -> dict:
        write, savepoint = pending
        chk_dir = os.path.join(self.dir, f"chk-{cid}")
        os.makedirs(chk_dir, exist_ok=True)
        handle, _size, _sent = write(chk_dir, f"op-{cid}", savepoint)
        self.handles[cid] = handle
        return handle

    def complete(self, cid: int) -> None:
        """The coordinator completes ``cid``: registers its shared files, subsumes the
        checkpoints past ``retain`` and deletes the shared files none of the retained ones
        use; then notifies the task."""
        handle = self.handles[cid]
        p = SimpleNamespace(checkpoint_id=cid, location=os.path.join(self.dir, f"chk-{cid}"),
                            acks={(0, 0): TaskAck.from_wire({"op": {"keyed": handle}})})
        keys = sorted(_shared_keys(p))
        self.completed.append(cid)
        if self.store is not None:
            self.store.register_shared_state(self.job_id, cid, keys)
            retained = self.completed[-self.retain:]
            for key in self.store.unreferenced_shared_state(self.job_id, min(retained)):
                os.remove(os.path.join(self.dir, key))
                self.store.delete_shared_state(self.job_id, [key])
        self.b.notify_complete(cid)

    def abort(self, cid: int) -> None:
        """The coordinator aborts ``cid``: the shared files only it uploaded are deleted."""
        handle = self.handles.get(cid)
        if handle is None or self.store is None:
            return
        registered = set()
        for c in self.completed:
            registered |= {f["shared"] for f in self.handles[c].get("files", ())}
        for f in handle.get("files", ()):
            if f["shared"] not in registered:
                os.remove(os.path.join(self.dir, f["shared"]))

    def checkpoint(self, *, complete: bool = True) -> int:
        cid, pending = self.trigger()
        self.write(cid, pending)
        if complete:
            self.complete(cid)
        else:
            self.abort(cid)
        return cid

    def restore(self, cid: int, key_groups: KeyGroupRange | None = None,
                backend: str = "heap") -> object:
        handle = keyed_handle_from_dict(self.handles[cid], location=self.dir)
        kgr = key_groups or KeyGroupRange(0, MAX_P - 1)
        if backend == "heap":
            b = HeapKeyedStateBackend("op", kgr, MAX_P, incremental=True)
        else:
            from airflow_checkpoint_provider.engine.state.rocksdb import (
                RocksDBKeyedStateBackend,
            )

            b = RocksDBKeyedStateBackend("op", kgr, MAX_P,
                                         workdir=os.path.join(self.dir, f"rocks-{cid}"))
        b.restore_state(os.path.join(self.dir, f"chk-{cid}"), [handle],
                        {d.name: d.meta for d in _descriptors()})
        for d in _descriptors():
            b.get_state(d)
        return b


def _chain(handle: dict) -> list[str]:
    return [os.path.basename(f["shared"]).rsplit("-", 1)[1] for f in handle["files"]]


def test_every_completed_checkpoint_restores_from_its_chain_as_the_state_it_captured(tmp_path):
    job = Job(tmp_path, max_deltas=4, compaction_ratio=10.0)
    kinds = []
    for _ in range(12):
        job.process(150)
        cid = job.checkpoint()
        kinds.append(_chain(job.handles[cid]))
        assert tables(job.restore(cid)) == job.expected[cid]
    assert kinds[0] == ["base.heap"]
    assert kinds[1] == ["base.heap", "delta.heap"]
    assert max(len(k) for k in kinds) == 5  # a base and max_deltas deltas, then a new base
    assert kinds[5] == ["base.heap"]


def test_a_delta_holds_only_the_keys_changed_since_the_last_completed_checkpoint(tmp_path):
    job = Job(tmp_path, compaction_ratio=10.0)
    v = job.states["v"]
    for i in range(1000):
        job.b.set_current_key(f"k{i}")
        v.update(i)
    base = job.checkpoint()
    job.b.set_current_key("k3")
    v.update(-3)
    job.b.set_current_key("k4")
    v.clear()
    cid = job.checkpoint()
    files = job.handles[cid]["files"]
    assert files[0] == job.handles[base]["files"][0]  # the base is shared, not rewritten
    assert files[1]["size"] < files[0]["size"] / 50
    restored = job.restore(cid)
    assert tables(restored) == job.expected[cid]
    restored.set_current_key("k4")
    assert restored.get_state(ValueStateDescriptor("v")).value() is None


def test_restore_from_a_chain_after_failed_checkpoints_equals_a_failure_free_run(tmp_path):
    """Checkpoints that fail (aborted: their files deleted, never notified) between
    completed ones: every completed checkpoint still restores to the state it captured, the
    same state a run without failures has at that record."""
    store = MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}")
    try:
        flaky = Job(tmp_path / "flaky", store, max_deltas=3, compaction_ratio=10.0)
        clean = Job(tmp_path / "clean", max_deltas=3, compaction_ratio=10.0)
        fails = random.Random(3)
        for step in range(16):
            flaky.process(120)
            clean.process(120)
            ok = fails.random() > 0.4
            cid = flaky.checkpoint(complete=ok)
            clean_cid = clean.checkpoint()
            if ok:
                restored = tables(flaky.restore(cid))
                assert restored == flaky.expected[cid] == clean.expected[clean_cid], step
    finally:
        store.close()


@pytest.mark.parametrize("parallelism", [2, 3])
def test_restore_from_a_chain_at_another_parallelism_redistributes_key_groups(tmp_path,
                                                                              parallelism):
    job = Job(tmp_path, compaction_ratio=10.0)
    for _ in range(4):
        job.process(200)
        cid = job.checkpoint()
    assert len(job.handles[cid]["files"]) == 4
    merged: dict = {}
    for i in range(parallelism):
        part = job.restore(cid, key_group_range_for(i, parallelism, MAX_P))
        for name, entries in tables(part).items():
            assert not set(entries) & set(merged.get(name, {}))
            merged.setdefault(name, {}).update(entries)
    assert merged == job.expected[cid]


def test_a_new_base_once_the_deltas_outweigh_the_base(tmp_path):
    job = Job(tmp_path, max_deltas=100, compaction_ratio=0.5)
    chains = []
    for _ in range(6):
        job.process(400)
        chains.append(_chain(job.handles[job.checkpoint()]))
    assert ["base.heap"] in chains[1:]  # compacted before a hundred deltas
    assert all(len(c) <= 3 for c in chains)


@pytest.mark.parametrize("retain", [1, 2])
def test_retention_never_deletes_a_file_a_retained_or_pending_checkpoint_needs(tmp_path,
                                                                                 retain):
    """The registry deletes what no retained checkpoint uses; with notifications that come
    late (a checkpoint triggered before the previous one is confirmed) and compactions
    among them, every retained and every pending checkpoint still restores."""
    store = MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}")
    try:
        job = Job(tmp_path, store, retain=retain, max_deltas=2, compaction_ratio=10.0)
        pending: list[int] = []
        order = random.Random(11)
        for _ in range(30):
            job.process(80)
            cid, write = job.trigger()
            job.write(cid, write)
            pending.append(cid)
            while pending and order.random() < 0.6:  # complete in order, sometimes late
                job.complete(pending.pop(0))
            for c in [*job.completed[-retain:], *pending]:
                assert tables(job.restore(c)) == job.expected[c], c
        shared = set(os.listdir(os.path.join(job.dir, "shared")))
        needed = {os.path.basename(f["shared"]) for c in [*job.completed[-retain:], *pending]
                  for f in job.handles[c]["files"]}
        assert needed <= shared
        assert len(shared - needed) <= 2 * (job.b.max_deltas + 1)  # garbage is collected
    finally:
        store.close()


def test_a_savepoint_is_a_full_self_contained_file_and_the_chain_goes_on(tmp_path):
    job = Job(tmp_path, compaction_ratio=10.0)
    job.process(200)
    job.checkpoint()
    job.process(50)
    sp, write = job.trigger(savepoint=True)
    handle = job.write(sp, write)
    assert "files" not in handle and "shared" not in str(handle)  # in the savepoint dir
    job.complete(sp)  # a savepoint's completion does not move the chain
    job.process(50)
    cid = job.checkpoint()
    assert len(job.handles[cid]["files"]) == 2  # base + a delta holding both intervals
    assert tables(job.restore(cid)) == job.expected[cid]
    restored = HeapKeyedStateBackend("op", KeyGroupRange(0, MAX_P - 1), MAX_P)
    restored.restore_state(os.path.join(job.dir, f"chk-{sp}"),
                           [keyed_handle_from_dict(handle, location=job.dir)],
                           {d.name: d.meta for d in _descriptors()})
    assert tables(restored) == job.expected[sp]


def test_the_first_checkpoint_after_a_restore_writes_a_new_base(tmp_path):
    job = Job(tmp_path, compaction_ratio=10.0)
    job.process(200)
    job.checkpoint()
    job.process(20)
    cid = job.checkpoint()
    again = Job(tmp_path / "again", compaction_ratio=10.0)
    again.b = job.restore(cid)
    again.states = {d.name: again.b.get_state(d) for d in _descriptors()}
    again.process(20)
    nxt = again.checkpoint()
    assert _chain(again.handles[nxt]) == ["base.heap"]
    assert tables(again.restore(nxt)) == again.expected[nxt]


def test_a_dropped_state_is_gone_from_the_next_checkpoint(tmp_path):
    job = Job(tmp_path, compaction_ratio=10.0)
    job.process(200)
    job.checkpoint()
    job.b.drop_state("l")
    cid = job.checkpoint()
    assert _chain(job.handles[cid]) == ["base.heap"]
    assert "l" not in tables(job.restore(cid))


def test_a_chain_restores_into_rocksdb(tmp_path):
    pytest.importorskip("rocksdict")
    job = Job(tmp_path, compaction_ratio=10.0)
    for _ in range(3):
        job.process(200)
        cid = job.checkpoint()
    rocks = job.restore(cid, backend="rocksdb")
    try:
        for name, entries in job.expected[cid].items():
            d = next(d for d in _descriptors() if d.name == name)
            state = rocks.get_state(d)
            for key, value in entries.items():
                rocks.set_current_key(key)
                assert _read(name, state) == value, (name, key)
    finally:
        rocks.close()


def _read(name: str, state):
    if name in ("v", "d"):
        return state.value()
    if name == "m":
        return dict(state.items())
    return state.get()


def test_the_handle_round_trips_and_names_every_file(tmp_path):
    job = Job(tmp_path, compaction_ratio=10.0)
    job.process(100)
    job.checkpoint()
    job.process(100)
    cid = job.checkpoint()
    h = keyed_handle_from_dict(job.handles[cid], location=job.dir)
    assert isinstance(h, HeapChangelogHandle) and h.to_dict() == job.handles[cid]
    assert [f.location_in(os.path.join(job.dir, f"chk-{cid}")) for f in h.files] == [
        os.path.join(job.dir, f["shared"]) for f in job.handles[cid]["files"]]


def test_values_expired_by_ttl_are_gone_from_the_next_delta(tmp_path, monkeypatch):
    from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
    from airflow_checkpoint_provider.engine.state import ttl

    now = [1_000_000]
    monkeypatch.setattr(ttl, "now_ms", lambda: now[0])
    job = Job(tmp_path, compaction_ratio=10.0)
    ctx = RuntimeContext(job_id="j", job_name="n", operator_uid="op", subtask_index=0,
                         parallelism=1, attempt=0, backend=job.b)
    short = ctx.value_state("short", ttl=10_000)
    for i in range(100):
        job.b.set_current_key(f"k{i}")
        short.update(i)
    base = job.checkpoint()
    assert len(job.expected[base]["short"]) == 100
    now[0] += 60_000  # every value expired: purged at the next capture
    job.b.set_current_key("k0")
    job.states["v"].update(1)
    cid = job.checkpoint()
    assert _chain(job.handles[cid]) == ["base.heap", "delta.heap"]
    assert "short" not in job.expected[cid]
    assert "short" not in tables(job.restore(cid))
