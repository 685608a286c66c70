"""The window join's state layout: one state entry per buffered row (so in RocksDB buffering
a row writes that row, not the key's others), snapshots of the layout before it (one map per
key and side, tests/support/fixtures/joins_old_layout, written by the code before the change)
restored and converted, heap snapshots restored into RocksDB, and RocksDB join state read
back per key by the state reader. The interval join keeps the map layout: its fixtures must
restore unchanged."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest
from operator_harness import load_make, open_op, run
from repo_paths import SUPPORT_DIR

from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.runtime.operators.joins.per_record import (
    INTERVAL_STATES,
    LEGACY_WINDOW_STATES,
    WINDOW_STATES,
)
from airflow_checkpoint_provider.engine.runtime.operators.joins.state import COUNT, SEQ_BITS
from airflow_checkpoint_provider.engine.snapshot.handles import RocksDBHandle
from airflow_checkpoint_provider.engine.state_io.read import _rocksdb_entries

FIXTURES = os.path.join(SUPPORT_DIR, "fixtures", "joins_old_layout")


make = load_make("joins_old_layout")  # the same join nodes, input and driver as the fixtures were written with


def open_join(join, backend, restore=None):
    return open_op(make.node(join), backend, restore=restore)


def phase2() -> list:
    """Rows after the snapshot: more of each key, some matching the buffered ones."""
    steps = []
    for t in range(1060, 1200, 9):
        steps.append([2, [{"id": -t - j, "k": f"k{j}", "ts": t} for j in range(4)]])
        steps.append([1, [{"id": t * 10 + 7, "k": f"k{t % 4}", "ts": t + 3}]])
    return [*steps, ["wm", 1120], ["wm", MAX_WATERMARK]]


def bag(rows) -> Counter:
    return Counter(json.dumps(r, sort_keys=True) for r in rows)


def snapshot_spec(op, directory) -> dict:
    snap = op.snapshot(2)
    handle, _, _ = snap.keyed.write(str(directory), "j-0", True)
    return {"directory": str(directory), "states": snap.states, "keyed": [handle],
            "operator_state": snap.operator_state}


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("join", ["interval", "window"])
def test_a_snapshot_of_the_old_layout_restores_and_the_join_goes_on(tmp_path, backend, join):
    fixture = os.path.join(FIXTURES, f"{backend}-{join}")
    with open(os.path.join(fixture, "spec.json")) as f:
        spec = json.load(f)
    legacy = () if join == "interval" else LEGACY_WINDOW_STATES  # interval: kept as it was
    old_states = INTERVAL_STATES if join == "interval" else LEGACY_WINDOW_STATES
    assert set(old_states) <= set(spec["states"]), "the fixture holds the old layout"
    # restore from a copy (RocksDB restores copy the files, heap reads them; keep it clean)
    shutil.copytree(fixture, tmp_path / "old")
    op = open_join(join, backend, {"directory": str(tmp_path / "old"), "states": spec["states"],
                                 "keyed": spec["keyed"],
                                 "operator_state": spec["operator_state"]})
    assert op.buffered_rows() == spec["buffered_rows"] > 0, "every buffered row was moved"
    for name in legacy:
        assert name not in op.backend.restored_meta and not list(op.backend.keys(name))
    resumed = snapshot_spec(op, tmp_path / "new")
    assert not set(legacy) & set(resumed["states"]), "the old states are not carried on"
    out2 = run(op, phase2())
    assert op.buffered_rows() == 0
    op.close()

    # the same input through the current code without a restore
    fresh = open_join(join, backend)
    assert bag(run(fresh, spec["phase1"])) == bag(spec["out1"]), \
        "the old and the new layout emit the same before the snapshot"
    expected = bag(run(fresh, phase2()))
    fresh.close()
    assert bag(out2) == expected and sum(expected.values()) > 0

    # and the converted state restores again (the new layout only)
    again = open_join(join, backend, resumed)
    assert bag(run(again, phase2())) == expected
    again.close()


def _rows_of(op, name):
    """The RocksDB rows of state ``name``: {db key: value bytes}."""
    marker = name.encode() + b"\x00"
    op.backend.write_out()  # the row cache's changes into RocksDB
    return {k: v for k, v in op.backend.db.items() if k[2:2 + len(marker)] == marker}


def test_rocksdb_holds_one_row_per_buffered_record_and_writes_only_it():
    """The old layout kept a key's side in one value, rewritten (and growing) with every
    row: 600 rows of one key made one value of them all."""
    op = open_join("window", "rocksdb")
    name = WINDOW_STATES[0]
    for i in range(300):
        op.process_input(1, [{"id": 2 * i, "k": "hot", "ts": 1000 + i % 50},
                             {"id": 2 * i + 1, "k": "hot", "ts": 1000 + i % 50}])
    rows = _rows_of(op, name)
    assert len(rows) == 600 + 1, "one row per record plus the window's count"
    assert max(len(v) for v in rows.values()) < 100, "no value holds more than one record"
    before = dict(rows)
    op.process_input(1, [{"id": 9999, "k": "hot", "ts": 1010}])
    changed = {k for k, v in _rows_of(op, name).items() if before.get(k) != v}
    assert len(changed) == 2, "a new row writes its own entry and its time's count"
    op.on_watermark(MAX_WATERMARK)
    assert op.buffered_rows() == 0 and not _rows_of(op, name), "clean-up removed every row"
    op.close()


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_window_join_clean_up_removes_exactly_the_expired_rows(backend):
    op = open_join("window", backend)  # tumbling 100 ms
    op.process_input(1, [{"id": i, "k": "a", "ts": 1000 + 20 * i} for i in range(10)])
    op.on_watermark(1099)  # the window [1000, 1100) fires: its 5 rows leave
    op.backend.set_current_key("a")
    left = sorted(t for t, _, _ in op.buffers[0].entries())
    assert left == [1100] * 5
    state = op.buffers[0].state
    counts = sorted(uk >> SEQ_BITS for uk in state.keys() if uk & COUNT == COUNT)
    assert counts == [1100], "the count of the fired window is gone too"
    op.close()


@pytest.mark.parametrize("join", ["interval", "window"])
def test_heap_join_state_restores_into_rocksdb(tmp_path, join):
    heap = open_join(join, "heap")
    out1 = run(heap, make.phase1())
    spec = snapshot_spec(heap, tmp_path)
    buffered = heap.buffered_rows()
    heap.close()
    rocks = open_join(join, "rocksdb", spec)
    assert rocks.buffered_rows() == buffered > 0
    out2 = run(rocks, phase2())
    rocks.close()
    fresh = open_join(join, "rocksdb")
    assert bag(out1) + bag(out2) == bag(run(fresh, make.phase1() + phase2()))
    fresh.close()


def test_the_state_reader_gives_a_rocksdb_join_side_as_one_map_per_key(tmp_path):
    op = open_join("window", "rocksdb")
    op.process_input(1, [{"id": i, "k": f"k{i % 3}", "ts": 1000 + i * 40} for i in range(9)])
    spec = snapshot_spec(op, tmp_path)
    op.close()
    handle = RocksDBHandle.from_dict(spec["keyed"][0], location=str(tmp_path))
    got = {key: value for _, name, key, value in _rocksdb_entries(str(tmp_path), handle)
           if name == WINDOW_STATES[0]}
    assert set(got) == {"k0", "k1", "k2"}
    rows = sorted(v["id"] for m in got.values() for uk, v in m.items() if uk & COUNT != COUNT)
    assert rows == list(range(9))


def test_heap_rows_buffered_after_a_capture_are_not_in_it(tmp_path):
    """The heap row buffer changes the key's dict in place: copy on write keeps a pending
    capture as it was."""
    op = open_join("window", "heap")
    op.process_input(1, [{"id": 1, "k": "a", "ts": 1010}])
    snap = op.snapshot(1)  # the synchronous part: a capture, serialized below
    op.process_input(1, [{"id": i, "k": "a", "ts": 1020} for i in range(2, 6)])
    handle, _, _ = snap.keyed.write(str(tmp_path), "j-0", True)
    assert op.buffered_rows() == 5
    op.close()
    restored = open_join("window", "heap", {"directory": str(tmp_path), "states": snap.states,
                                          "keyed": [handle],
                                          "operator_state": snap.operator_state})
    assert restored.buffered_rows() == 1
    restored.close()
