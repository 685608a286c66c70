"""The temporal join's probe state: one entry per waiting probe (adding one is O(1) on the
heap backend however many share a timestamp; the layout before rebuilt the timestamp's list
on every add), and snapshots of that layout (tests/support/fixtures/temporal_old_layout,
written by the code before the change) restored, converted and joined on."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter

import pytest
from operator_harness import load_make, open_op, run
from repo_paths import SUPPORT_DIR

from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK
from airflow_checkpoint_provider.engine.runtime.operators.joins.temporal import (
    LEGACY_PROBE_STATE,
    PROBE_COUNT_STATE,
    PROBE_STATE,
)

FIXTURES = os.path.join(SUPPORT_DIR, "fixtures", "temporal_old_layout")


make = load_make("temporal_old_layout")  # the same join node, input and driver as the fixtures were written with


def open_tj(backend, restore=None):
    return open_op(make.node(), backend, restore=restore)


def phase2() -> list:
    """After the snapshot: new versions (k1 comes back), more probes at the timestamps
    already waiting (they join after the restored ones), the end of input."""
    return [[2, [{"k": "k1", "price": 7, "ts": 1230}, {"k": "k2", "price": 9, "ts": 1150}]],
            [1, [{"id": -t - j, "k": f"k{j}", "ts": t} for t in (1190, 1250) for j in range(4)]],
            ["wm", 1200], ["wm", MAX_WATERMARK]]


def bag(rows) -> Counter:
    return Counter(json.dumps(r, sort_keys=True) for r in rows)


def in_arrival_order(rows) -> bool:
    """Probes of one key and timestamp (ids ``t*10 + j`` and ``t*10 + j + 4`` of phase 1)
    join in the order they arrived."""
    at = {r["id"]: i for i, r in enumerate(rows)}
    pairs = [(i, i + 4) for i in at if i > 0 and i % 10 < 4 and i + 4 in at]
    return bool(pairs) and all(at[a] < at[b] for a, b in pairs)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_snapshot_of_the_old_probe_layout_restores_and_the_join_goes_on(tmp_path, backend):
    fixture = os.path.join(FIXTURES, backend)
    with open(os.path.join(fixture, "spec.json")) as f:
        spec = json.load(f)
    assert LEGACY_PROBE_STATE in spec["states"] and PROBE_STATE not in spec["states"], \
        "the fixture holds the old layout"
    shutil.copytree(fixture, tmp_path / "old")  # restore from a copy
    op = open_tj(backend, {"directory": str(tmp_path / "old"), "states": spec["states"],
                           "keyed": spec["keyed"], "operator_state": spec["operator_state"]})
    assert list(op.state_rows()) == spec["state_rows"] and spec["state_rows"][0] > 0, \
        "every waiting probe was moved"
    assert not list(op.backend.keys(LEGACY_PROBE_STATE))
    snap = op.snapshot(2)
    handle, _, _ = snap.keyed.write(str(tmp_path / "new"), "tj-0", True)
    resumed = {"directory": str(tmp_path / "new"), "states": snap.states, "keyed": [handle],
               "operator_state": snap.operator_state}
    assert {PROBE_STATE, PROBE_COUNT_STATE} <= set(snap.states)
    out2 = run(op, phase2())
    assert op.state_rows()[0] == 0
    op.close()

    # the same input through the current code without a restore: the same rows (probes of
    # one key and timestamp join in arrival order)
    fresh = open_tj(backend)
    assert bag(run(fresh, spec["phase1"])) == bag(spec["out1"])
    expected = run(fresh, phase2())
    fresh.close()
    assert bag(out2) == bag(expected) and len(expected) > 40
    assert in_arrival_order(out2) and in_arrival_order(expected)
    assert any(r["price"] is None for r in expected) and any(r["price"] == 7 for r in expected)

    # the converted state restores again (the new layout)
    again = open_tj(backend, resumed)
    out3 = run(again, phase2())
    assert bag(out3) == bag(expected) and in_arrival_order(out3)
    again.close()


def _add_seconds(n: int) -> float:
    op = open_tj("heap")
    op.process_input(2, [{"k": "hot", "price": 1, "ts": 0}])
    rows = [{"id": i, "k": "hot", "ts": 5_000} for i in range(n)]
    start = time.perf_counter()
    for i in range(0, n, 100):
        op.process_input(1, rows[i:i + 100])
    took = time.perf_counter() - start
    out = [r for b in op.on_watermark(MAX_WATERMARK) for r in b]
    assert [r["id"] for r in out] == list(range(n)) and op.state_rows() == (0, 1)
    op.close()
    return took


def test_probes_sharing_one_timestamp_are_added_in_linear_time():
    """8x the probes at one timestamp of one key take about 8x as long to add (the list
    rebuilt per add took about 64x: 40,000 probes took seconds)."""
    _add_seconds(2_000)  # warm up
    small, large = _add_seconds(5_000), _add_seconds(40_000)
    assert large < 20 * small + 0.2, f"5,000 probes: {small:.3f} s, 40,000: {large:.3f} s"
