"""Columnar window state: firing, lateness, snapshot and restore at other parallelism."""

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.errors import (
    BadRecordError,
    PipelineDefinitionError,
    RestoreError,
    StateMigrationError,
)
from airflow_checkpoint_provider.engine.eventtime import (
    SlidingWindows,
    TimestampSpec,
    TumblingWindows,
    to_millis,
)
from airflow_checkpoint_provider.engine.snapshot.handles import keyed_handle_from_dict
from airflow_checkpoint_provider.engine.state.columnar import AggregateSpec, AggregateTable
from airflow_checkpoint_provider.engine.state.columnar.windows import (
    WindowAggregateTable,
    WindowSpec,
)
from airflow_checkpoint_provider.engine.state.keygroups import (
    KeyGroupRange,
    key_group_range_for,
)

MAXP = 128


def table(assigner=None, lateness=0, kgr=None):
    kgr = kgr or KeyGroupRange(0, MAXP - 1)
    spec = WindowSpec(AggregateSpec("key", [("n", "count", None), ("total", "sum", "v")]),
                      assigner or TumblingWindows(1000), lateness, TimestampSpec("ts"))
    return WindowAggregateTable(spec, kgr, MAXP, "w")


def batch(rows):
    keys, ts, v = zip(*rows, strict=True)
    return pa.RecordBatch.from_pydict({"key": list(keys), "ts": list(ts), "v": list(v)})


def rows_of(batches):
    return sorted((r["key"], r["window_start"], r["window_end"], r["n"], r["total"])
                  for b in batches for r in b.to_pylist())


def test_windows_fire_when_the_watermark_reaches_their_last_millisecond():
    t = table()
    assert t.update(batch([("a", 100, 1), ("b", 900, 2), ("a", 999, 3), ("a", 1000, 4)]), -1) == []
    assert t.fire(998) == []
    assert rows_of(t.fire(999)) == [("a", 0, 1000, 2, 4), ("b", 0, 1000, 1, 2)]
    assert sorted(t.windows) == [1000], "fired window state is dropped (no lateness)"
    assert rows_of(t.fire(5000)) == [("a", 1000, 2000, 1, 4)]


def test_late_records_update_within_lateness_and_are_dropped_after():
    t = table(lateness=500)
    t.update(batch([("a", 100, 1)]), -1)
    assert rows_of(t.fire(1200)) == [("a", 0, 1000, 1, 1)]
    assert rows_of(t.update(batch([("a", 200, 10)]), 1200)) == [("a", 0, 1000, 2, 11)]
    assert t.fire(1300) == [], "the late update was emitted at once"
    assert rows_of(t.fire(1499)) == [] and 0 not in t.windows
    t.update(batch([("a", 300, 100)]), 1499)
    assert t.dropped_late == 1 and 0 not in t.windows


def test_sliding_windows_put_a_record_in_size_over_slide_windows():
    t = table(SlidingWindows(1000, 250))
    t.update(batch([("a", 1100, 1)]), -1)
    assert sorted(t.windows) == [250, 500, 750, 1000]
    assert rows_of(t.fire(10_000)) == [("a", s, s + 1000, 1, 1) for s in (250, 500, 750, 1000)]


@pytest.mark.parametrize("old,new", [(1, 3), (2, 1), (3, 2)])
def test_snapshot_restores_at_another_parallelism_with_pending_flags(tmp_path, old, new):
    rng = np.random.default_rng(5)
    records = [(f"k{rng.integers(50)}", int(rng.integers(0, 3000)), int(rng.integers(10)))
               for _ in range(2000)]
    # reference: one table, fire everything
    ref = table()
    ref.update(batch(records), -1)
    expected = rows_of(ref.fire(10_000))
    # old parallelism: the records split by key group, window 0 fired before the snapshot
    handles, states, emitted = [], None, []
    for sub in range(old):
        t = table(kgr=key_group_range_for(sub, old, MAXP))
        from airflow_checkpoint_provider.engine.state.keygroups import key_group_for

        mine = [r for r in records if key_group_for(r[0], MAXP) in t.key_groups]
        if mine:
            t.update(batch(mine), -1)
        emitted += t.fire(999)
        snap = t.snapshot_state(1)
        states = snap.states
        if snap.write:
            handle, _, _ = snap.write(str(tmp_path), f"w-{sub}", True)
            handles.append(keyed_handle_from_dict(handle, location=str(tmp_path)))
    for sub in range(new):
        t = table(kgr=key_group_range_for(sub, new, MAXP))
        t.restore_state(str(tmp_path), handles, states)
        emitted += t.fire(10_000)
    assert rows_of(emitted) == expected, "every (key, window) exactly once after rescale"


def test_restore_refuses_other_windows_and_plain_aggregate_state(tmp_path):
    t = table()
    t.update(batch([("a", 1, 1)]), -1)
    snap = t.snapshot_state(1)
    handle = keyed_handle_from_dict(snap.write(str(tmp_path), "w", True)[0], location=str(tmp_path))
    with pytest.raises(StateMigrationError, match=r"operator 'w': the snapshot's windows"):
        table(TumblingWindows(2000)).restore_state(str(tmp_path), [handle], snap.states)
    plain = AggregateTable(AggregateSpec("key", [("n", "count", None)]),
                           KeyGroupRange(0, MAXP - 1), MAXP, "w")
    with pytest.raises(RestoreError, match="windowed aggregate state"):
        plain.restore_state(str(tmp_path), [handle], snap.states)
    with pytest.raises(RestoreError, match="without windows"):
        table().restore_state(str(tmp_path), [handle], {"aggregate": {}})


def test_timestamp_columns_and_values():
    t = table()
    b = pa.RecordBatch.from_pydict({
        "key": ["a"], "v": [1],
        "ts": pa.array([dt.datetime(2026, 1, 1, 0, 0, 0, 500_000)], pa.timestamp("us"))})
    t.update(b, -1)
    (out,) = t.fire(2**62)
    assert out.schema.field("window_start").type == pa.timestamp("ms")
    assert to_millis(dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)) == 1000
    assert to_millis(1.5) is None and to_millis(True) is None
    with pytest.raises(BadRecordError, match=r"operator 'w': timestamp field 'ts' has type string"):
        t.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [1], "ts": ["x"]}), -1)
    with pytest.raises(BadRecordError, match="no timestamp"):
        t.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [1],
                                             "ts": pa.array([None], pa.int64())}), -1)


def test_window_arguments_are_checked():
    with pytest.raises(PipelineDefinitionError, match="window size must be > 0"):
        TumblingWindows(0)
    with pytest.raises(PipelineDefinitionError, match="timedelta or integer milliseconds"):
        TumblingWindows(1.5)
    with pytest.raises(PipelineDefinitionError, match="whole number of milliseconds"):
        TumblingWindows(dt.timedelta(microseconds=10))
    assert TumblingWindows(dt.timedelta(minutes=5)).size == 300_000
