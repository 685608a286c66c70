"""Snapshots of columnar aggregate state written from cached parts (state/columnar/
snapshot_parts.py): a part whose rows did not change is copied, not encoded again; every
snapshot restores the state it was taken of (at any parallelism), and the files written
before parts (one IPC file, fixtures written by that code) restore as before."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pyarrow as pa
import pytest
from repo_paths import SUPPORT_DIR

from airflow_checkpoint_provider.engine.state.columnar import snapshot_parts as parts
from airflow_checkpoint_provider.engine.state.columnar.aggregates import (
    AggregateSpec,
    AggregateTable,
)
from airflow_checkpoint_provider.engine.state.columnar.distinct_state import (
    PAIRS,
    DistinctAggregateTable,
    PairRuns,
    classic_table,
)
from airflow_checkpoint_provider.engine.state.key_hashing import key_groups
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

#: written by the code before snapshots from parts (tests/support/fixtures/columnar_old_layout/
#: make.py, run with commit 7258e37's code)
FIXTURES = os.path.join(SUPPORT_DIR, "fixtures", "columnar_old_layout")
MAXP = 16
SPEC = AggregateSpec("key", [("n", "count", None), ("total", "sum", "v"), ("hi", "max", "v")])
DISTINCT = AggregateSpec("key", [("n", "count", None), ("vs", "count_distinct", "v"),
                                 ("names", "count_distinct", "name")])


@pytest.fixture
def small_parts(monkeypatch):
    """Parts of 8 rows and runs of 16 pairs, so a few hundred keys make many of them."""
    monkeypatch.setenv(parts.PART_ROWS_ENV, "8")


@pytest.fixture
def encoded(monkeypatch):
    """The rows of every part encoded (not copied from an earlier snapshot)."""
    rows: list[int] = []
    real = parts.encode

    def counting(table):
        rows.append(table.num_rows)
        return real(table)

    monkeypatch.setattr(parts, "encode", counting)
    return rows


def _batch(keys, values, names=None) -> pa.RecordBatch:
    cols = {"key": pa.array(keys), "v": pa.array(values)}
    if names is not None:
        cols["name"] = pa.array(names)
    return pa.RecordBatch.from_pydict(cols)


def _state(table: AggregateTable) -> dict:
    """key -> accumulators (and the distinct sets) of every key of ``table``."""
    keys = table.index.take_keys()[: table.index.n]
    out = {}
    for row, key in enumerate(keys.tolist()):
        out[key] = {name: arr[row].item() for name, arr in table.acc.items()}
    if isinstance(table, DistinctAggregateTable):
        for c, pairs in table.sets.items():
            rows, values = pairs.snapshot()
            for r, v in zip(rows.tolist(), values.to_pylist(), strict=True):
                out[keys[r].item() if hasattr(keys[r], "item") else keys[r]].setdefault(
                    c, set()).add(v)
    return out


def _snapshot(table: AggregateTable) -> bytes:
    return table.write_parts(table.capture_parts())


def _fresh(spec=SPEC, kg=None):
    cls = DistinctAggregateTable if spec is DISTINCT else AggregateTable
    return cls(spec, kg or KeyGroupRange(0, MAXP - 1), MAXP, "agg")


@pytest.mark.parametrize("key_kind", ["int", "str"])
def test_every_snapshot_from_parts_restores_the_state_it_was_taken_of(small_parts, key_kind):
    rng = np.random.default_rng(1)
    t = _fresh()
    for step in range(12):
        # new keys at the end and updates of a few old ones: parts of both kinds
        keys = np.concatenate([rng.integers(0, 20 * (step + 1), 30), 1000 + step * 10
                               + np.arange(10)])
        keys = [f"k{k}" for k in keys] if key_kind == "str" else keys.tolist()
        t.update(_batch(keys, rng.integers(-5, 5, len(keys)).tolist()))
        data = _snapshot(t)
        back = _fresh()
        assert back.restore(data) == len(t)
        assert _state(back) == _state(t)


def test_a_snapshot_encodes_only_the_parts_whose_rows_changed(small_parts, encoded):
    t = _fresh()
    t.update(_batch(list(range(80)), [1] * 80))  # 10 parts of 8 rows
    _snapshot(t)
    assert sum(encoded) == 80
    encoded.clear()
    t.update(_batch([3, 77, 78], [5, 5, 5]))  # rows 3, 77, 78: parts 0 and 9
    _snapshot(t)
    assert sorted(encoded) == [8, 8]
    encoded.clear()
    _snapshot(t)  # nothing changed: every part copied
    assert encoded in ([], [0])  # at most the schema of an empty table
    back = _fresh()
    back.restore(_snapshot(t))
    assert _state(back) == _state(t)


def test_a_capture_is_not_changed_by_updates_before_it_is_written(small_parts):
    t = _fresh()
    t.update(_batch(list(range(40)), [1] * 40))
    before = _state(t)
    captured = t.capture_parts()
    t.update(_batch(list(range(50)), [7] * 50))
    back = _fresh()
    back.restore(t.write_parts(captured))
    assert _state(back) == before


def test_snapshots_written_out_of_order_reuse_only_parts_of_their_own_version(small_parts):
    """Two captures in flight (1 s checkpoints, slow uploads), written newest first: each
    file holds the state of its own capture."""
    t = _fresh()
    t.update(_batch(list(range(40)), [1] * 40))
    first_state, first = _state(t), t.capture_parts()
    t.update(_batch([1, 39], [10, 10]))
    second_state, second = _state(t), t.capture_parts()
    t.update(_batch([2], [3]))
    third_state, third = _state(t), t.capture_parts()
    for captured, expected in ((third, third_state), (first, first_state),
                               (second, second_state)):
        back = _fresh()
        back.restore(t.write_parts(captured))
        assert _state(back) == expected


def test_keys_dropped_before_a_snapshot_renumber_every_part(small_parts, monkeypatch):
    spec = AggregateSpec("key", [("n", "count", None)], ttl_ms=1000)
    t = AggregateTable(spec, KeyGroupRange(0, MAXP - 1), MAXP, "agg")
    from airflow_checkpoint_provider.engine.state import ttl

    now = [10_000]
    monkeypatch.setattr(ttl, "now_ms", lambda: now[0])
    t.update(pa.RecordBatch.from_pydict({"key": list(range(30))}))
    _snapshot(t)
    now[0] += 600
    t.update(pa.RecordBatch.from_pydict({"key": list(range(0, 30, 3))}))
    now[0] += 600  # the keys not updated since expired: rows renumbered
    assert t.drop_expired() == 20
    data = _snapshot(t)
    back = AggregateTable(spec, KeyGroupRange(0, MAXP - 1), MAXP, "agg")
    assert back.restore(data) == 10
    assert sorted(back.index.take_keys()[:10].tolist()) == list(range(0, 30, 3))


@pytest.mark.parametrize("ranges", [[(0, 7), (8, 15)], [(0, 4), (5, 10), (11, 15)]])
def test_a_snapshot_from_parts_restores_at_another_parallelism(small_parts, ranges):
    rng = np.random.default_rng(5)
    t = _fresh(DISTINCT)
    for _ in range(6):
        keys = rng.integers(0, 60, 50).tolist()
        t.update(_batch(keys, rng.integers(0, 40, 50).tolist(),
                        [f"n{x}" for x in rng.integers(0, 9, 50)]))
        _snapshot(t)  # caches parts, so the next snapshot reuses some
    data = _snapshot(t)
    merged: dict = {}
    for lo, hi in ranges:
        sub = _fresh(DISTINCT, KeyGroupRange(lo, hi))
        sub.restore(data)
        state = _state(sub)
        kg = key_groups(pa.array(list(state)), MAXP) if state else []
        assert all(lo <= g <= hi for g in kg)
        merged.update(state)
    assert merged == _state(t)


def test_distinct_pairs_added_since_the_last_snapshot_are_a_run_of_their_own(small_parts,
                                                                           encoded):
    t = _fresh(DISTINCT)
    t.update(_batch([1] * 40, list(range(40)), ["a"] * 40))  # 40 pairs of v, 1 of name
    _snapshot(t)
    encoded.clear()
    t.update(_batch([2], [1000], ["a"]))  # one new pair of v, one of name, one new key
    _snapshot(t)
    # encoded again: the key rows' part (keys 1 and 2) and the new run (the new pairs of v
    # and name: key 2), not the first run (41 pairs: sealed, at least 16)
    assert sorted(encoded) == [1, 2]
    back = _fresh(DISTINCT)
    back.restore(_snapshot(t))
    assert _state(back) == _state(t)
    out = back.update(_batch([1, 2], [0, 1000], ["b", "a"]))
    assert out.column("vs").to_pylist() == [40, 1] and out.column("names").to_pylist() == [2, 1]


@pytest.mark.parametrize("per_snapshot", [1, 3, 7, 16, 40, 1000])
def test_pair_runs_encode_each_pair_a_few_times_and_keep_few_open_runs(per_snapshot):
    runs, size, n, encoded, seen = PairRuns(), 16, 0, 0, {}
    bound = 1 + max(size // per_snapshot, 1).bit_length()
    for _ in range(200):
        n += per_snapshot
        cut = runs.cut((n, 2 * n), 0, size)  # two columns, one adding twice the other's
        # the runs cover the pairs of each column once, in order
        assert [start for start, _ in cut] == [(0, 0)] + [end for _, end in cut[:-1]]
        assert cut[-1][1] == (n, 2 * n)
        assert len(runs.open) <= bound
        assert all(sum(e - s for s, e in zip(*run, strict=True)) >= size
                   for run in runs.sealed)
        for start, end in cut:
            if seen.get(start) != end:  # not the run its cached message is of
                encoded += sum(end) - sum(start)
            seen[start] = end
    # a pair is encoded again only while its run is open: a few times, not once per snapshot
    assert encoded <= 3 * n * bound
    # pairs renumbered (another generation): cut anew, many pairs in sealed runs of a column
    again = runs.cut((n, 2 * n), 1, size)
    assert again[0][0] == (0, 0) and again[-1][1] == (n, 2 * n)
    if n > PairRuns.SPLIT_RUNS * size:
        assert again[:2] == [((0, 0), (size, 0)), ((size, 0), (2 * size, 0))]
    elif 2 * n <= PairRuns.SPLIT_RUNS * size:
        assert again == [((0, 0), (n, 2 * n))]


def test_the_classic_table_of_a_parts_file_is_the_layout_of_a_full_file(small_parts):
    rng = np.random.default_rng(9)
    t = _fresh(DISTINCT)
    for _ in range(4):
        keys = [f"k{x}" for x in rng.integers(0, 12, 40)]
        t.update(_batch(keys, rng.integers(0, 30, 40).tolist(),
                        [f"n{x}" for x in rng.integers(0, 5, 40)]))
        _snapshot(t)
    table = parts.read_table(_snapshot(t))
    assert PAIRS in table.column_names
    classic = classic_table(table)
    full = parts.read_table(t.serialize(t.copy())[0])
    assert classic.num_rows == full.num_rows == len(t)
    assert sorted(classic.column_names) == sorted(full.column_names)

    def by_key(tab):
        d = tab.to_pydict()
        return {k: {c: (sorted(d[c][i]) if c.startswith("distinct:") else d[c][i])
                    for c in d if c != "key"} for i, k in enumerate(d["key"])}

    assert by_key(classic) == by_key(full)


@pytest.mark.parametrize("name", ["aggregate-ipc-file.arrow", "distinct-ipc-file.arrow"])
def test_a_snapshot_file_written_before_parts_restores(name):
    """Fixtures written by the code before snapshots from parts (one IPC file per snapshot:
    ``AggregateTable.serialize``, which that code's ``snapshot_state`` wrote): the keys and
    values of the fixtures' make.py."""
    with open(os.path.join(FIXTURES, name), "rb") as f:
        data = f.read()
    assert data[:6] == b"ARROW1"
    spec = DISTINCT if name.startswith("distinct") else SPEC
    t = _fresh(spec)
    assert t.restore(data) == 30
    out = t.update(_batch([0, 29], [100, 100], ["x", "x"] if spec is DISTINCT else None))
    if spec is DISTINCT:  # key k had values k, k + 1 (two of them) and name "n<k % 3>"
        assert out.column("n").to_pylist() == [3, 3]
        assert out.column("vs").to_pylist() == [3, 3]
        assert out.column("names").to_pylist() == [2, 2]
    else:  # key k had v = k and k + 1
        assert out.column("n").to_pylist() == [3, 3]
        assert out.column("total").to_pylist() == [101, 159]
        assert out.column("hi").to_pylist() == [100, 100]


def test_the_digest_of_a_snapshot_hashed_on_from_the_last_one_is_that_of_its_bytes(small_parts):
    rng = np.random.default_rng(3)
    t = _fresh(DISTINCT)
    for step in range(6):
        keys = rng.integers(0, 10 + 5 * step, 50).tolist()
        t.update(_batch(keys, rng.integers(0, 100 * (step + 1), 50).tolist(),
                        [f"n{x}" for x in rng.integers(0, 20, 50)]))
        pieces, digest = t.write_pieces(t.capture_parts())
        assert digest == hashlib.sha256(b"".join(pieces)).hexdigest()
        back = _fresh(DISTINCT)
        back.restore(b"".join(pieces))
        assert _state(back) == _state(t)
    # the sealed runs lead the file, so a snapshot begins with the last one's messages
    first, _ = t.write_pieces(t.capture_parts())
    second, _ = t.write_pieces(t.capture_parts())
    assert len(first) > 3 and all(a is b for a, b in zip(first[:-1], second[:-1], strict=True))
