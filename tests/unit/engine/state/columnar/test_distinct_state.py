"""count_distinct in aggregate(): the exact distinct-set state against pandas' nunique,
its snapshot restored into other key-group ranges (rescaling), and the value kinds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.state.columnar import AggregateSpec
from airflow_checkpoint_provider.engine.state.columnar.distinct_state import (
    DistinctAggregateTable,
    PairSet,
)
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

MAXP = 16
AGGS = [("n", "count", None), ("bidders", "count_distinct", "bidder"),
        ("names", "count_distinct", "name"), ("top", "max", "price"),
        ("cheap_bidders", "count_distinct", "cheap_bidder")]


def _batches(seed: int, n_batches: int = 12, size: int = 700, big: bool = False,
             key_kind: str = "str"):
    rng = np.random.default_rng(seed)
    for _ in range(n_batches):
        k = rng.integers(0, 40, size)
        bidder = rng.integers(0, 300, size) * (10**13 if big else 1)
        price = rng.integers(1, 1000, size)
        name = np.array([f"n{v}" for v in rng.integers(0, 200, size)], dtype=object)
        cheap = pa.array(np.where(price < 300, bidder, 0), mask=price >= 300)
        names = pa.array(name, mask=rng.random(size) < 0.1)
        key = pa.array([f"k{v}" for v in k]) if key_kind == "str" else pa.array(k)
        yield pa.RecordBatch.from_arrays(
            [key, pa.array(bidder), names, pa.array(price), cheap],
            names=["key", "bidder", "name", "price", "cheap_bidder"])


def _reference(batches) -> pd.DataFrame:
    df = pa.Table.from_batches(list(batches)).to_pandas()
    g = df.groupby("key")
    return pd.DataFrame({"n": g.size(), "bidders": g["bidder"].nunique(),
                         "names": g["name"].nunique(), "top": g["price"].max(),
                         "cheap_bidders": g["cheap_bidder"].nunique()})


def _final(outputs) -> pd.DataFrame:
    df = pa.Table.from_batches(outputs).to_pandas()
    return df.groupby("key").last()[["n", "bidders", "names", "top", "cheap_bidders"]]


def _table(kg=None):
    return DistinctAggregateTable(AggregateSpec("key", AGGS), kg or KeyGroupRange(0, MAXP - 1),
                                  MAXP, "agg")


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("key_kind", ["str", "int"])
def test_running_distinct_counts_equal_pandas_nunique(big, key_kind):
    t = _table()
    batches = list(_batches(1, big=big, key_kind=key_kind))
    outputs = [t.update(b) for b in batches]
    got, exp = _final(outputs), _reference(batches)
    pd.testing.assert_frame_equal(got.sort_index(), exp.sort_index(), check_dtype=False)
    # every update row is the running value after its batch
    for i, out in enumerate(outputs):
        ref = _reference(batches[: i + 1])
        mine = out.to_pandas().set_index("key")
        pd.testing.assert_frame_equal(mine.sort_index(), ref.loc[mine.index].sort_index(),
                                      check_dtype=False)


def test_values_outside_the_packed_range_switch_to_byte_pairs_without_losing_any():
    s = PairSet("t")
    assert list(s.add(np.array([0, 0, 1]), pa.array([5, 5, 5]))) == [0, 1]
    assert s.packed
    assert list(s.add(np.array([0, 2]), pa.array([-1, 5]))) == [0, 2]  # negative: unpack
    assert not s.packed and len(s) == 4
    assert list(s.add(np.array([0, 1, 0]), pa.array([5, 5, -1]))) == []
    assert list(s.add(np.array([1]), pa.array([2**62]))) == [1]


def test_a_column_that_changes_type_is_refused_by_name():
    s = PairSet("aggregate 'a': count_distinct of 'x'")
    s.add(np.array([0]), pa.array([1]))
    with pytest.raises(TypeError, match="count_distinct of 'x'.*changed type"):
        s.add(np.array([0]), pa.array(["1"]))
    with pytest.raises(TypeError, match="count_distinct takes integer, string or binary"):
        PairSet("p").add(np.array([0]), pa.array([1.5]))


@pytest.mark.parametrize("parts", [1, 3])
def test_snapshot_restored_into_other_key_group_ranges_continues_exactly(parts):
    """Half the batches, snapshot, restore into ``parts`` subtasks' key-group ranges, the
    other half routed by key group: the union of the outputs equals the reference."""
    batches = list(_batches(7, n_batches=10))
    t = _table()
    for b in batches[:5]:
        t.update(b)
    data = t.serialize(t.copy())[0]
    bounds = np.linspace(0, MAXP, parts + 1).astype(int)
    tables = [_table(KeyGroupRange(int(lo), int(hi) - 1))
              for lo, hi in zip(bounds, bounds[1:], strict=False)]
    restored = sum(x.restore(data) for x in tables)
    assert restored == len(t)
    outputs = []
    for b in batches[5:]:
        from airflow_checkpoint_provider.engine.state.key_hashing import key_groups

        kg = key_groups(b.column("key"), MAXP)
        for x in tables:
            mine = (kg >= x.key_groups.start) & (kg <= x.key_groups.end)
            if mine.any():
                outputs.append(x.update(b.filter(pa.array(mine))))
    got = _final(outputs)
    exp = _reference(batches).loc[got.index]
    pd.testing.assert_frame_equal(got.sort_index(), exp.sort_index(), check_dtype=False)


def test_a_snapshot_without_the_distinct_sets_is_refused():
    from airflow_checkpoint_provider.engine.errors import StateMigrationError
    from airflow_checkpoint_provider.engine.state.columnar import AggregateTable

    old = AggregateTable(AggregateSpec("key", [("n", "count", None)]),
                         KeyGroupRange(0, MAXP - 1), MAXP, "agg")
    old.update(next(_batches(3)))
    with pytest.raises(StateMigrationError, match="bidders"):
        _table().restore(old.serialize(old.copy())[0])
