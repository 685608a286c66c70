"""Columnar aggregate state: the vectorized key index and accumulators against a plain
Python reference, snapshot/restore by key group, and state-migration errors."""

from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.errors import StateMigrationError
from airflow_checkpoint_provider.engine.state.columnar.aggregates import (
    AggregateSpec,
    AggregateTable,
    KeyIndex,
)
from airflow_checkpoint_provider.engine.state.key_hashing import key_hashes
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_range_for

SPEC = AggregateSpec("key", [("n", "count", None), ("total", "sum", "v"), ("lo", "min", "v"),
                             ("hi", "max", "v"), ("avg", "mean", "v"), ("nv", "count", "v")])


def _reference(rows):
    ref = defaultdict(lambda: {"n": 0, "vals": []})
    for key, v in rows:
        ref[key]["n"] += 1
        if v is not None:
            ref[key]["vals"].append(v)
    return ref


def _check(latest, ref):
    assert set(latest) == set(ref)
    for key, row in latest.items():
        vals = ref[key]["vals"]
        assert row["n"] == ref[key]["n"]
        assert row["nv"] == len(vals)
        if vals:
            assert row["total"] == sum(vals) and row["lo"] == min(vals) and row["hi"] == max(vals)
            assert row["avg"] == pytest.approx(sum(vals) / len(vals))
        else:
            assert row["total"] is None and row["lo"] is None and row["avg"] is None


def _random_batches(rng, key_kind, batches=30, size=400, keys=900):
    out, rows = [], []
    for _ in range(batches):
        ks = rng.integers(0, keys, size)
        key_values = [f"k{k}" if key_kind == "str" else int(k) - keys // 2 for k in ks]
        vals = [None if rng.random() < 0.1 else int(v) for v in rng.integers(-50, 50, size)]
        out.append(pa.RecordBatch.from_pydict({"key": key_values, "v": vals}))
        rows.extend(zip(key_values, vals, strict=True))
    return out, rows


@pytest.mark.parametrize("key_kind", ["str", "int"])
def test_running_aggregates_match_a_python_reference(key_kind):
    rng = np.random.default_rng(3)
    batches, rows = _random_batches(rng, key_kind)
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    latest = {}
    for b in batches:
        out = table.update(b)
        keys = out.column("key").to_pylist()
        assert len(keys) == len(set(keys)), "one output row per key touched"
        for r in out.to_pylist():
            latest[r["key"]] = r
    _check(latest, _reference(rows))
    assert len(table) == len(latest)


def test_key_index_finds_every_key_after_many_resizes_and_collisions():
    idx = KeyIndex()
    keys = np.array([f"key-{i}" for i in range(50_000)], dtype=object)
    hashes = key_hashes(pa.array(keys))
    # insert in uneven chunks so the table resizes between inserts
    start = 0
    for size in (1, 7, 100, 3000, 20_000, 26_892):
        idx.insert(keys[start:start + size], hashes[start:start + size])
        start += size
    assert idx.n == 50_000
    rows = idx.lookup(keys[::-1].copy(), hashes[::-1].copy())
    assert (rows == np.arange(50_000)[::-1]).all()
    # equal hashes but different keys are told apart
    forged = np.array(["not-a-key"] * 3, dtype=object)
    assert (idx.lookup(forged, hashes[:3].copy()) == -1).all()


def test_int_keys_then_null_keys_switch_the_index_to_objects():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    table.update(pa.RecordBatch.from_pydict({"key": [1, 2, 2], "v": [1, 2, 3]}))
    out = table.update(pa.RecordBatch.from_pydict({"key": [2, None, None], "v": [10, 1, 1]}))
    got = {r["key"]: r for r in out.to_pylist()}
    assert got[2]["n"] == 3 and got[2]["total"] == 15
    assert got[None]["n"] == 2


def test_float_values_after_int_values_widen_the_accumulators():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    table.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [1]}))
    out = table.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [0.5]})).to_pylist()[0]
    assert out["total"] == 1.5 and out["lo"] == 0.5 and out["hi"] == 1.0


def test_non_numeric_value_column_is_rejected_naming_operator_and_column():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "totals")
    with pytest.raises(TypeError, match="'totals'.*column 'v' has type string"):
        table.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": ["x"]}))


def test_missing_value_column_is_named():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "totals")
    with pytest.raises(KeyError, match="column 'v' is not in the input"):
        table.update(pa.RecordBatch.from_pydict({"key": ["a"], "w": [1]}))


@pytest.mark.parametrize("new_parallelism", [1, 3])
def test_snapshot_restores_by_key_group_at_another_parallelism(new_parallelism):
    rng = np.random.default_rng(5)
    batches, rows = _random_batches(rng, "str", batches=10)
    before = [AggregateTable(SPEC, key_group_range_for(i, 2, 128), 128, "agg") for i in range(2)]
    for b in batches:  # route rows as the network would: by key group
        kg = key_hashes(b.column("key")) % 128
        for t in before:
            mine = (kg >= t.key_groups.start) & (kg <= t.key_groups.end)
            if mine.any():
                t.update(b.filter(pa.array(mine)))
    files = [AggregateTable.serialize(t.copy())[0] for t in before]
    after = [AggregateTable(SPEC, key_group_range_for(i, new_parallelism, 128), 128, "agg")
             for i in range(new_parallelism)]
    for t in after:
        for data in files:
            t.restore(data)
    assert sum(len(t) for t in after) == sum(len(t) for t in before)
    # one more batch touching every key reports totals that include the restored state
    every = sorted({k for k, _ in rows})
    probe = pa.RecordBatch.from_pydict({"key": every, "v": [0] * len(every)})
    latest = {}
    kg = key_hashes(probe.column("key")) % 128
    for t in after:
        mine = (kg >= t.key_groups.start) & (kg <= t.key_groups.end)
        for r in t.update(probe.filter(pa.array(mine))).to_pylist():
            latest[r["key"]] = r
    ref = _reference(rows + [(k, 0) for k in every])
    _check(latest, ref)


def test_snapshot_copy_is_not_changed_by_later_updates():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    table.update(pa.RecordBatch.from_pydict({"key": ["a", "b"], "v": [1, 2]}))
    copy = table.copy()
    table.update(pa.RecordBatch.from_pydict({"key": ["a", "c"], "v": [5, 5]}))
    restored = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    restored.restore(AggregateTable.serialize(copy)[0])
    out = restored.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [0]})).to_pylist()[0]
    assert out["n"] == 2 and out["total"] == 1
    assert len(restored) == 2


def test_restoring_without_a_needed_accumulator_names_the_aggregation():
    old = AggregateTable(AggregateSpec("key", [("n", "count", None)]), KeyGroupRange(0, 127),
                         128, "agg")
    old.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [1]}))
    data = AggregateTable.serialize(old.copy())[0]
    new = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    with pytest.raises(StateMigrationError, match="operator 'agg': aggregation '(total|lo|hi|avg|nv)'"):
        new.restore(data, {"aggregations": [["n", "count", None]]})


def test_key_column_changing_type_is_rejected_naming_operator_and_column():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    table.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [1]}))
    with pytest.raises(TypeError, match="'agg': key column 'key' changed type from string to int64"):
        table.update(pa.RecordBatch.from_pydict({"key": [1], "v": [1]}))


def test_missing_key_field_is_named():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "totals")
    with pytest.raises(KeyError, match="'totals': key field 'key' is not in the input"):
        table.update(pa.RecordBatch.from_pydict({"user": ["a"], "v": [1]}))


def test_restored_key_type_is_enforced_on_new_input():
    old = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    old.update(pa.RecordBatch.from_pydict({"key": ["a"], "v": [1]}))
    new = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    new.restore(AggregateTable.serialize(old.copy())[0])
    with pytest.raises(TypeError, match="changed type from string to int64"):
        new.update(pa.RecordBatch.from_pydict({"key": [1], "v": [1]}))


def test_int_key_index_by_binary_search_then_hash_slots_after_a_switch_to_objects():
    idx = KeyIndex()
    rng = np.random.default_rng(3)
    keys = rng.choice(10**12, size=30_000, replace=False).astype(np.int64)
    hashes = key_hashes(pa.array(keys))
    start = 0
    for size in (1, 9, 990, 9000, 20_000):  # unsorted chunks merged into the sorted copy
        idx.insert(keys[start:start + size], hashes[start:start + size])
        start += size
    assert idx.by_sort
    both = np.concatenate([idx.sorted_keys, idx.delta_keys])
    assert sorted(both.tolist()) == sorted(keys.tolist())
    assert (np.diff(idx.sorted_keys) > 0).all() and (np.diff(idx.delta_keys) > 0).all()
    probe = np.concatenate([keys[::-1], np.array([-1, 10**12 + 5], dtype=np.int64)])
    rows = idx.lookup(probe)  # integer keys need no hashes
    assert (rows[:-2] == np.arange(30_000)[::-1]).all() and (rows[-2:] == -1).all()
    # a key that is not an int64 turns the index into hash slots; every row is still found
    idx.insert(np.array([None], dtype=object), key_hashes(pa.array([None], pa.int64())))
    assert not idx.by_sort
    assert (idx.lookup(keys.astype(object), hashes) == np.arange(30_000)).all()


@pytest.mark.parametrize("key_kind", ["str", "int"])
def test_dictionary_encoded_fold_gives_the_same_state_as_the_group_by_fold(key_kind, monkeypatch):
    from airflow_checkpoint_provider.engine.state.columnar import aggregates as columnar

    rng = np.random.default_rng(11)
    batches, _ = _random_batches(rng, key_kind)
    batches.append(pa.RecordBatch.from_pydict({"key": [None, None, batches[0]["key"][0].as_py()],
                                               "v": [1, None, 2]}))
    spec = AggregateSpec("key", SPEC.aggregations + [("f", "sum", "x")])
    states, outputs = [], []
    for encodable in (columnar._encodable, lambda t: False):
        monkeypatch.setattr(columnar, "_encodable", encodable)
        table = AggregateTable(spec, KeyGroupRange(0, 127), 128, "agg")
        out = [table.update(b.append_column("x", pa.array(np.linspace(0, 1, len(b)))))
               for b in batches]
        outputs.append([sorted(o.to_pylist(), key=repr) for o in out])
        cols = table.copy()
        order = sorted(range(len(table)), key=lambda r: repr(cols["key"][r]))
        states.append({name: [c[r] for r in order] for name, c in cols.items()})
    assert states[0] == states[1]
    assert outputs[0] == outputs[1]


def test_arrow_key_lookup_matches_the_object_lookup_and_tells_forged_hashes_apart():
    idx = KeyIndex()
    keys = pa.array([f"key-{i}" for i in range(20_000)])
    hashes = key_hashes(keys)
    for start in range(0, 20_000, 3_000):
        part = keys.slice(start, 3_000)
        idx.insert(part.to_numpy(zero_copy_only=False), hashes[start:start + 3_000], part)
    probe = pa.array([f"key-{i}" for i in range(19_999, -5, -7)] + ["absent"])
    probe_hashes = key_hashes(probe)
    expected = idx.lookup(probe.to_numpy(zero_copy_only=False), probe_hashes)
    assert (idx.lookup_arrow(probe, probe_hashes) == expected).all()
    assert expected[-1] == -1 and (expected[:-1] >= 0).all()
    forged = pa.array(["not-a-key"] * 3)
    assert (idx.lookup_arrow(forged, hashes[:3].copy()) == -1).all()


def test_arrow_key_lookup_is_off_after_an_insert_without_arrow_keys():
    idx = KeyIndex()
    keys = pa.array(["a", "b"])
    idx.insert(keys.to_numpy(zero_copy_only=False), key_hashes(keys), keys)
    assert idx.lookup_arrow(keys, key_hashes(keys)) is not None
    more = np.array(["c"], dtype=object)
    idx.insert(more, key_hashes(pa.array(more)))
    assert idx.lookup_arrow(keys, key_hashes(keys)) is None
    assert (idx.lookup(np.array(["a", "b", "c"], dtype=object),
                       key_hashes(pa.array(["a", "b", "c"]))) == [0, 1, 2]).all()


def test_null_int_keys_fold_into_one_row_across_batches():
    table = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    for _ in range(3):
        out = table.update(pa.RecordBatch.from_pydict({"key": [1, None], "v": [1, 2]}))
    got = {r["key"]: r for r in out.to_pylist()}
    assert got[None]["n"] == 3 and got[None]["total"] == 6 and len(table) == 2


def test_a_table_of_queued_batches_folds_as_the_batches_one_after_the_other():
    rng = np.random.default_rng(5)
    batches, rows = _random_batches(rng, "str", batches=6)
    one_by_one = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    for b in batches:
        one_by_one.update(b)
    at_once = AggregateTable(SPEC, KeyGroupRange(0, 127), 128, "agg")
    out = at_once.update(pa.Table.from_batches(batches))
    latest = {r["key"]: r for r in out.to_pylist()}
    _check(latest, _reference(rows))
    a, b = one_by_one.copy(), at_once.copy()
    assert sorted(a["key"]) == sorted(b["key"]) and len(out) == len(at_once)


@pytest.mark.parametrize("spread", [1, 3, 1000, 2**49], ids=["dense", "sparse-ok", "sparse", "huge"])
def test_int_key_lookup_is_exact_with_or_without_the_direct_address_table(spread):
    idx = KeyIndex()
    rng = np.random.default_rng(spread % 1000)
    keys = np.unique(rng.integers(-5_000, 5_000, 4_000)) * spread
    rng.shuffle(keys)
    for part in np.array_split(keys, 7):
        idx.insert(part, key_hashes(pa.array(part)))
    probe = np.concatenate([keys[::-1], keys[:50] + 1, [np.iinfo(np.int64).min,
                                                          np.iinfo(np.int64).max]])
    rows = idx.lookup(probe)
    expected = {int(k): r for r, k in enumerate(keys)}
    assert rows.tolist() == [expected.get(int(k), -1) for k in probe]


@pytest.mark.parametrize("key_kind", ["str", "int"])
def test_a_snapshot_after_every_key_expired_keeps_working(key_kind):
    """All keys past their TTL at a snapshot (Nexmark q12 under load: processing-time windows
    whose state expired between two checkpoints): the snapshot is empty, and keys added after
    it are found. Integer keys used to fail the snapshot with ``IndexError`` in the key
    index's direct-address table (built from the first and last of zero sorted keys)."""
    from airflow_checkpoint_provider.engine.state.ttl import processing_time_at

    spec = AggregateSpec("key", [("n", "count", None)], ttl_ms=1_000)
    table = AggregateTable(spec, KeyGroupRange(0, 127), 128, "agg")
    keys = [f"k{i}" if key_kind == "str" else i for i in range(50)]
    with processing_time_at(10_000):
        table.update(pa.RecordBatch.from_pydict({"key": keys}))
    with processing_time_at(20_000):
        assert table.drop_expired() == 50
        assert len(table) == 0
        table.snapshot_state(1)
        out = table.update(pa.RecordBatch.from_pydict({"key": keys[:3] + keys[:1]}))
    assert sorted(zip(out.column("key").to_pylist(), out.column("n").to_pylist(),
                      strict=True)) == sorted([(keys[0], 2), (keys[1], 1), (keys[2], 1)])
    assert len(table) == 3


def test_an_empty_insert_into_an_integer_key_index_keeps_it_usable():
    index = KeyIndex()
    index.insert(np.array([], dtype=np.int64), np.array([], dtype=np.uint64))
    rows = index.insert(np.array([7, 3], dtype=np.int64), np.array([1, 2], dtype=np.uint64))
    assert index.lookup(np.array([3, 7, 5], dtype=np.int64), np.array([2, 1, 9], dtype=np.uint64)
                        ).tolist() == [rows[1], rows[0], -1]


@pytest.mark.parametrize("spread", [10**12, 3], ids=["sparse", "dense"])
def test_an_integer_key_index_finds_every_key_across_its_two_sorted_runs(spread, monkeypatch):
    """New keys go to a small sorted run, merged into the large one when it outgrows
    delta_limit: every key is found in whichever run holds it, before and after merges
    (sparse keys: binary search in both runs; dense ones: the direct-address table)."""
    from airflow_checkpoint_provider.engine.state.columnar import key_index

    monkeypatch.setattr(key_index, "DELTA_MIN", 50)
    monkeypatch.setattr(key_index, "DELTA_FACTOR", 1)
    idx = KeyIndex()
    rng = np.random.default_rng(5)
    keys = rng.choice(spread * 5_000, size=5_000, replace=False).astype(np.int64)
    merges, seen = 0, 0
    for size in (1, 40, 7, 300, 2, 900, 13, 1_000, 2_700, 37):
        batch = keys[seen:seen + size]
        before = len(idx.sorted_keys)
        rows = idx.insert(batch, key_hashes(pa.array(batch)))
        assert rows.tolist() == list(range(seen, seen + size))
        merges += len(idx.sorted_keys) != before
        seen += size
        probe = np.concatenate([keys[:seen][::-1], keys[seen:seen + 50]])
        found = idx.lookup(probe)
        assert found[:seen].tolist() == list(range(seen))[::-1]
        assert (found[seen:] == -1).all()
        assert len(idx.delta_keys) <= key_index.delta_limit(len(idx.sorted_keys))
    assert merges >= 3 and len(idx.delta_keys)  # both runs in use at the end
    assert (idx._dense is not None) == (spread == 3)


def test_an_int_set_reports_each_key_absent_once_across_its_two_sorted_runs(monkeypatch):
    """IntSet (count_distinct's packed pairs): add() answers which keys were new, each key
    once over any number of batches, with the runs merging as the set grows; a Python set
    is the reference."""
    from airflow_checkpoint_provider.engine.state.columnar import key_index

    monkeypatch.setattr(key_index, "DELTA_MIN", 50)
    monkeypatch.setattr(key_index, "DELTA_FACTOR", 1)
    members, reference = key_index.IntSet(), set()
    rng = np.random.default_rng(11)
    merges = 0
    for size in (1, 40, 7, 300, 2, 900, 13, 1_000, 2_700, 37):
        batch = np.unique(rng.integers(-(2**62), 2**62, size=size) // 10**15 * 10**15)
        before = len(members.sorted_keys)
        new = members.add(batch)
        merges += len(members.sorted_keys) != before
        assert batch[new].tolist() == [k for k in batch.tolist() if k not in reference]
        reference.update(batch.tolist())
        assert len(members) == len(reference)
        assert not members.add(batch).any()  # a second time: nothing new
        assert len(members.delta_keys) <= key_index.delta_limit(len(members.sorted_keys))
    assert merges >= 3 and len(members.delta_keys)
    both = np.concatenate([members.sorted_keys, members.delta_keys])
    assert sorted(both.tolist()) == sorted(reference)
