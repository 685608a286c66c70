"""A job switches keyed-state backends through a savepoint, both ways (as Flink's canonical
savepoints allow): stopped on RocksDB, restored on heap (at the same or another
parallelism), it finishes with the output of a failure-free run; heap -> RocksDB too; the
pre-flight (verify-restore) says so, and refuses up front the state that cannot convert."""

from __future__ import annotations

import datetime as dt
import operator
import os
import shutil

import pytest
from pipelines import (
    Background,
    check_exactly_once_rows,
    expected_running_sums,
    read_committed,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import JobFailedError, KeyedProcessFunction
from airflow_checkpoint_provider.engine.lifecycle.verify import verify_restore
from airflow_checkpoint_provider.engine.serialization import Serializer
from airflow_checkpoint_provider.engine.state.descriptors import EntryMapStateDescriptor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

N = 6_000
# 4 s of input: the job is still running when the stop-with-savepoint request is claimed
RATE = 1_500


class AllKinds(KeyedProcessFunction):
    """A running sum kept in every per-key state kind: a value, a list of the ids seen, a map
    of counts per id parity, a reducing count and a TTL value. Each row carries what each
    state says, so a state lost or doubled by a restore shows as a row whose numbers differ."""

    def open(self, ctx):
        self.sum = ctx.value_state("sum", 0)
        self.ids = ctx.list_state("ids")
        self.parity = ctx.map_state("parity")
        self.count = ctx.reducing_state("count", operator.add)
        self.seen = ctx.value_state("seen", 0, ttl=dt.timedelta(hours=1))

    def process_element(self, record, ctx):
        s = self.sum.value() + record["value"]
        self.sum.update(s)
        self.ids.add(record["id"])
        bit = record["id"] % 2
        self.parity.put(bit, (self.parity.get(bit) or 0) + 1)
        self.count.add(1)
        self.seen.update(self.seen.value() + 1)
        ids = self.ids.get()
        return {"key": ctx.current_key, "id": record["id"], "count": self.count.get(), "sum": s,
                "ids": len(ids), "ids_sum": sum(ids), "seen": self.seen.value(),
                "parity": sum(v for _, v in self.parity.items())}


def _upper(v):
    return str(v).upper()


def _lower(v):
    return str(v).lower()


class Rows(KeyedProcessFunction):
    """Entry map state with its own serializer: RocksDB stores it entry by entry, heap as
    one map, so it cannot switch backends."""

    def open(self, ctx):
        self.rows = ctx.get_state(EntryMapStateDescriptor(
            "rows", serializer=Serializer("upper", _upper, _lower)))

    def process_element(self, record, ctx):
        self.rows.put(record["id"], "x")
        return {"key": ctx.current_key, "id": record["id"]}


def check_all_kinds(out_dir: str) -> None:
    """Exactly once (every id once per key, counts 1..n, the final sum), and every state kind
    agreeing with the count on every row."""
    rows = list(read_committed(out_dir))
    expected = expected_running_sums(N, 50, 7)
    check_exactly_once_rows(rows, expected)
    for r in rows:
        assert r["ids"] == r["seen"] == r["parity"] == r["count"], r
    last = {}
    for r in rows:
        if r["count"] > last.get(r["key"], {"count": 0})["count"]:
            last[r["key"]] = r
    assert {k: r["ids_sum"] for k, r in last.items()} == {
        k: sum(e["ids"]) for k, e in expected.items()}


def pipeline(root, backend, *, name="switch", function=None, keyed_parallelism=3, out=None,
             rate=None):
    p = running_sum_pipeline(str(root), name=name, num_records=N, rate=rate,
                             function=function or AllKinds(), keyed_parallelism=keyed_parallelism,
                             out=out)
    p.state_backend = backend
    return p


def stop_with_savepoint(root, backend, **kwargs):
    bg = Background(pipeline(root, backend, rate=RATE, **kwargs))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    return req.result["location"]


@pytest.fixture(scope="module")
def on_rocksdb(tmp_path_factory):
    """The job on RocksDB at parallelism 3, stopped with a savepoint mid-stream."""
    root = tmp_path_factory.mktemp("rocksdb")
    return root, stop_with_savepoint(root, "rocksdb")


def restore(stopped, tmp_path, backend, parallelism):
    root, savepoint = stopped
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    p = pipeline(tmp_path, backend, name="switched", keyed_parallelism=parallelism, out=str(out))
    result = p.run(restore=savepoint, trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == savepoint
    check_all_kinds(str(out))
    assert os.path.exists(os.path.join(savepoint, "_metadata"))


@pytest.mark.parametrize("parallelism", [3, 2])
def test_a_rocksdb_savepoint_restores_on_heap_and_finishes_exactly_once(
        on_rocksdb, tmp_path, parallelism):
    restore(on_rocksdb, tmp_path, "heap", parallelism)


def test_a_heap_savepoint_restores_on_rocksdb_and_finishes_exactly_once(
        tmp_path_factory, tmp_path):
    root = tmp_path_factory.mktemp("heap")
    restore((root, stop_with_savepoint(root, "heap")), tmp_path, "rocksdb", 2)


def test_verify_restore_passes_a_rocksdb_savepoint_for_a_heap_job(on_rocksdb, tmp_path):
    _, savepoint = on_rocksdb
    report = verify_restore(pipeline(tmp_path, "heap"), savepoint, parallelism=2,
                            probe_records=0)
    assert report.ok, report.describe()
    assert report.operators_opened


def test_a_state_that_cannot_switch_is_refused_by_verify_restore_and_at_restore(tmp_path):
    src = tmp_path / "src"
    savepoint = stop_with_savepoint(src, "rocksdb", name="rows", function=Rows())
    heap = pipeline(tmp_path / "dst", "heap", name="rows2", function=Rows())
    report = verify_restore(heap, savepoint)
    assert not report.ok
    assert [(p.uid, p.state) for p in report.problems] == [("sum", "rows")]
    assert "state_backend='rocksdb'" in report.problems[0].reason
    with pytest.raises(JobFailedError, match=r"operator 'sum': state 'rows': entry map state"):
        heap.run(restore=savepoint, trust_snapshot=True)
    # the same job on RocksDB restores it
    rocks = pipeline(tmp_path / "dst2", "rocksdb", name="rows3", function=Rows())
    assert verify_restore(rocks, savepoint, probe_records=0).ok


def test_a_retained_incremental_rocksdb_checkpoint_restores_on_heap(on_rocksdb, tmp_path):
    """The stopped RocksDB job's last retained checkpoint (incremental: SSTs under the job's
    shared/) restores on heap at another parallelism; the output after it continues every
    key's count from the restored state and ends at the failure-free run's final state."""
    root, _ = on_rocksdb
    checkpoints = sorted(
        (int(d.name.removeprefix("chk-")), d) for d in (root / "ckpt" / "switch").glob("*/chk-*")
        if (d / "_metadata").exists())
    assert checkpoints, "the stopped job keeps its retained checkpoints"
    chk = checkpoints[-1][1]
    assert list(chk.parent.glob("shared/*")), "incremental: shared SSTs"
    out = tmp_path / "out"
    p = pipeline(tmp_path, "heap", name="from-chk", keyed_parallelism=2, out=str(out))
    result = p.run(restore=str(chk), trust_snapshot=True)
    assert result.status == "FINISHED"
    rows = list(read_committed(str(out)))
    expected = expected_running_sums(N, 50, 7)
    by_key: dict = {}
    for r in rows:
        assert r["ids"] == r["seen"] == r["parity"] == r["count"], r
        by_key.setdefault(r["key"], []).append(r)
    assert rows and len(rows) < N, "the checkpoint held state"
    for key, mine in by_key.items():
        counts = sorted(r["count"] for r in mine)
        n = len(expected[key]["ids"])
        assert counts == list(range(n - len(mine) + 1, n + 1)), key
        last = max(mine, key=lambda r: r["count"])
        assert last["sum"] == expected[key]["sum"]
        assert last["ids_sum"] == sum(expected[key]["ids"])
