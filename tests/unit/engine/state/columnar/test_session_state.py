"""Vectorized session windows (window(SessionWindows).aggregate) against a pandas
reference on out-of-order input, late records, and a snapshot restored into other
key-group ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine import SessionWindows
from airflow_checkpoint_provider.engine.eventtime import MAX_WATERMARK, TimestampSpec
from airflow_checkpoint_provider.engine.state.columnar import AggregateSpec
from airflow_checkpoint_provider.engine.state.columnar.session_state import SessionAggregateTable
from airflow_checkpoint_provider.engine.state.columnar.windows import WindowSpec
from airflow_checkpoint_provider.engine.state.key_hashing import key_groups
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

MAXP, GAP, DISORDER = 16, 100, 300
AGGS = [("n", "count", None), ("total", "sum", "v"), ("low", "min", "v"), ("high", "max", "v"),
        ("avg", "mean", "v"), ("nv", "count", "v")]


def _table(kg=None):
    spec = WindowSpec(AggregateSpec("k", AGGS), SessionWindows(GAP), 0, TimestampSpec("ts"))
    return SessionAggregateTable(spec, kg or KeyGroupRange(0, MAXP - 1), MAXP, "s")


def _events(seed, n=6000, keys=25, key_kind="int"):
    rng = np.random.default_rng(seed)
    # bursts: sparse activity per key, so sessions of several sizes and gaps near GAP
    base = np.sort(rng.integers(0, n * 12, n))
    ts = base - rng.integers(0, DISORDER, n)  # out of order, within DISORDER
    k = rng.integers(0, keys, n)
    v = rng.integers(-50, 50, n).astype(float)
    v[rng.random(n) < 0.05] = np.nan
    df = pd.DataFrame({"k": k if key_kind == "int" else [f"u{x}" for x in k], "ts": ts, "v": v,
                       "arrival": np.arange(n)})
    return df


def _batches(df, size=400):
    for i in range(0, len(df), size):
        part = df.iloc[i:i + size]
        yield pa.RecordBatch.from_arrays(
            [pa.array(part.k.tolist()), pa.array(part.ts.to_numpy()),
             pa.array(part.v.to_numpy(), from_pandas=True)], names=["k", "ts", "v"])


def _reference(df) -> pd.DataFrame:
    rows = []
    for key, g in df.sort_values("ts", kind="stable").groupby("k"):
        ts = g.ts.to_numpy()
        sid = np.concatenate([[0], np.cumsum(np.diff(ts) >= GAP)])
        for s in np.unique(sid):
            part = g[sid == s]
            v = part.v.dropna()
            rows.append((key, int(part.ts.min()), int(part.ts.max()) + GAP, len(part),
                         v.sum() if len(v) else None, v.min() if len(v) else None,
                         v.max() if len(v) else None, v.mean() if len(v) else None, len(v)))
    return pd.DataFrame(rows, columns=["k", "window_start", "window_end", "n", "total", "low",
                                       "high", "avg", "nv"])


def _run(tables, df, route=False):
    out, wm = [], -(2**62)
    seen = -(2**62)
    for b in _batches(df):
        for t in tables:
            part = b
            if route:
                kg = key_groups(b.column("k"), MAXP)
                part = b.filter(pa.array((kg >= t.key_groups.start) & (kg <= t.key_groups.end)))
            t.update(part, wm)
        seen = max(seen, int(pa.compute.max(b.column("ts")).as_py()))
        wm = seen - DISORDER - 1  # bounded out-of-orderness: nothing is late
        for t in tables:
            out += t.fire(wm)
    return out


def _frame(batches) -> pd.DataFrame:
    df = pa.Table.from_batches(batches).to_pandas()
    return df.sort_values(["k", "window_start"]).reset_index(drop=True)


@pytest.mark.parametrize("key_kind", ["int", "str"])
def test_sessions_equal_the_pandas_reference_on_out_of_order_input(key_kind):
    df = _events(5, key_kind=key_kind)
    t = _table()
    out = _run([t], df) + t.fire(MAX_WATERMARK)
    assert len(t) == 0
    ref = _reference(df).sort_values(["k", "window_start"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(_frame(out)[ref.columns], ref, check_dtype=False)


def test_records_behind_the_watermark_are_late_and_dropped():
    t = _table()
    t.update(next(_batches(pd.DataFrame({"k": [1, 1, 2], "ts": [1000, 1200, 1150],
                                         "v": [1.0, 2.0, 3.0]}))), 1100)
    # ts + GAP - 1 <= 1100: 1000 is late; 1200 and 1150 are not
    assert t.dropped_late == 1
    out = _frame(t.fire(MAX_WATERMARK))
    assert out[["k", "window_start", "window_end", "n"]].values.tolist() == [
        [1, 1200, 1300, 1], [2, 1150, 1250, 1]]


@pytest.mark.parametrize("parts", [1, 3])
def test_snapshot_restored_into_other_key_group_ranges_continues_exactly(parts):
    df = _events(8)
    half = len(df) // 2
    t = _table()
    out = _run([t], df.iloc[:half])
    snap = t.snapshot_state(1)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        handle, _, _ = snap.write(d, "s", True)
        data = open(f"{d}/{handle['path']}", "rb").read()
    bounds = np.linspace(0, MAXP, parts + 1).astype(int)
    tables = [_table(KeyGroupRange(int(lo), int(hi) - 1))
              for lo, hi in zip(bounds, bounds[1:], strict=False)]
    assert sum(x.restore(data) for x in tables) == len(t)
    # the second half only: its watermarks start from the first half's
    rest = _run(tables, df.iloc[half:], route=True)
    for x in tables:
        rest += x.fire(MAX_WATERMARK)
    ref = _reference(df).sort_values(["k", "window_start"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(_frame(out + rest)[ref.columns], ref, check_dtype=False)
