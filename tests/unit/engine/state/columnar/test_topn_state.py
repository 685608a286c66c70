"""top_n's columnar state against a pandas reference (ties in arrival order), the
upsert stream it emits, and its snapshot restored into other key-group ranges."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_checkpoint_provider.engine.state.columnar.topn_state import TopNSpec, TopNTable
from airflow_checkpoint_provider.engine.state.key_hashing import key_groups
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

MAXP = 16


def _batches(seed, n_batches=10, size=500, keys=30, key_kind="int"):
    rng = np.random.default_rng(seed)
    i = 0
    for _ in range(n_batches):
        k = rng.integers(0, keys, size)
        key = pa.array(k) if key_kind == "int" else pa.array([f"a{v}" for v in k])
        price = rng.integers(0, 50, size)  # many ties
        yield pa.RecordBatch.from_arrays(
            [key, pa.array(price), pa.array(np.arange(i, i + size)),
             pa.array([f"x{v}" for v in range(i, i + size)])],
            names=["auction", "price", "id", "extra"])
        i += size


def _reference(batches, n, descending=True) -> dict:
    df = pa.Table.from_batches(list(batches)).to_pandas()
    df = df.sort_values(["auction", "price", "id"], ascending=[True, not descending, True])
    df["rank"] = df.groupby("auction").cumcount() + 1
    top = df[df["rank"] <= n]
    return {(a, r): i for a, r, i in zip(top.auction, top["rank"], top.id, strict=True)}


def _upserts(outputs) -> dict:
    """(key, rank) -> id of the last emitted row (the upsert stream's current state)."""
    state = {}
    for out in outputs:
        for a, r, i in zip(out.column("auction").to_pylist(),
                           out.column("rank_number").to_pylist(),
                           out.column("id").to_pylist(), strict=True):
            state[(a, r)] = i
    return state


def _table(n=10, kg=None, descending=True):
    return TopNTable(TopNSpec("auction", n, "price", descending),
                     kg or KeyGroupRange(0, MAXP - 1), MAXP, "top")


@pytest.mark.parametrize("key_kind", ["int", "str"])
@pytest.mark.parametrize("n, descending", [(10, True), (3, False), (1, True)])
def test_the_upsert_stream_ends_at_the_reference_top_n(key_kind, n, descending):
    batches = list(_batches(3, key_kind=key_kind))
    t = _table(n, descending=descending)
    outputs = [t.update(b) for b in batches]
    assert _upserts(outputs) == _reference(batches, n, descending)
    # after every batch as well, and only changed ranks were emitted
    t2, seen = _table(n, descending=descending), {}
    for j, b in enumerate(batches):
        out = t2.update(b)
        before = dict(seen)
        seen.update(_upserts([out]))
        assert seen == _reference(batches[: j + 1], n, descending)
        emitted = set(zip(out.column("auction").to_pylist(), out.column("rank_number").to_pylist(),
                          strict=True))
        assert all(before.get(k) != seen[k] for k in emitted), "an unchanged rank was emitted"
    assert len(t2) == len(_reference(batches, n, descending))


@pytest.mark.parametrize("parts", [1, 3])
def test_snapshot_restored_into_other_key_group_ranges_continues_exactly(parts):
    batches = list(_batches(9))
    t = _table()
    outputs = [t.update(b) for b in batches[:5]]
    data = t.serialize(t.rows)
    tables, restored = _rescaled(data, 10, parts)
    assert restored == len(t)
    outputs += _feed(tables, batches[5:])
    assert _upserts(outputs) == _reference(batches, 10)


def test_an_input_column_named_like_the_rank_is_refused():
    t = _table()
    with pytest.raises(KeyError, match="rank_number"):
        t.update(pa.RecordBatch.from_pydict({"auction": [1], "price": [1], "rank_number": [1]}))


def test_pushed_out_payloads_are_compacted_away_without_changing_results(monkeypatch):
    monkeypatch.setattr(TopNTable, "COMPACT_MIN", 100)
    batches = list(_batches(4, n_batches=20))
    t = _table(3)
    outputs = [t.update(b) for b in batches]
    assert _upserts(outputs) == _reference(batches, 3)
    assert int(t.bounds[-1]) <= 2 * len(t) + 100 + 500  # compacted (at most one batch behind)
    data = t.serialize(t.rows)
    again = _table(3)
    again.restore(data)
    assert again.rows.sort_by([("auction", "ascending"), ("_rank", "ascending")]).equals(
        t.rows.sort_by([("auction", "ascending"), ("_rank", "ascending")]))


def test_rows_without_a_sort_value_never_rank():
    t = _table(2)
    out = t.update(pa.RecordBatch.from_pydict({"auction": [1, 1, 1], "price": [5, None, 3],
                                               "id": [0, 1, 2]}))
    assert sorted(zip(out.column("id").to_pylist(), out.column("rank_number").to_pylist(),
                      strict=True)) == [(0, 1), (2, 2)]
    assert t.skipped_null == 1


def test_only_rows_that_rank_are_stored(monkeypatch):
    """A row that does not make its key's top n at its batch is never copied into the
    payload store (q19: about half the bids; they made the store, and the compactions and
    concatenations copying it, twice as big): with no compaction, the store holds exactly
    the rows that ranked at their arrival, and the results stay the reference's."""
    monkeypatch.setattr(TopNTable, "COMPACT_MIN", 10**9)
    batches = list(_batches(5, n_batches=8, keys=4))  # 4,000 rows, top 3 of 4 keys
    t = _table(3)
    outputs = [t.update(b) for b in batches]
    assert _upserts(outputs) == _reference(batches, 3)
    # every row that ranks at its arrival is emitted by that batch's update
    entered = sum(int(pc.sum(pc.is_in(o.column("id"), b.column("id"))).as_py() or 0)
                  for o, b in zip(outputs, batches, strict=True))
    assert int(t.bounds[-1]) == entered < 200  # not 4,000


def test_a_snapshot_in_key_order_as_written_before_payload_order_restores_exactly():
    """Snapshots are now written in payload order (chunk by chunk, no reorder); those of
    earlier commits were in (key, rank) order. The file's columns are the same and a restore
    places each row by ``_rank``, so both orders continue to the same results (an older
    savepoint needs no migration)."""
    batches = list(_batches(6))
    t = _table()
    outputs = [t.update(b) for b in batches[:5]]
    rows = t.rows
    assert rows.column("_rank").to_pylist() != rows.sort_by(
        [("auction", "ascending"), ("_rank", "ascending")]).column("_rank").to_pylist()
    for written in (rows, rows.sort_by([("auction", "ascending"), ("_rank", "ascending")])):
        again = _table()
        assert again.restore(t.serialize(written)) == len(t)
        out = outputs + [again.update(b) for b in batches[5:]]
        assert _upserts(out) == _reference(batches, 10)


def _rescaled(data, n, parts):
    """``parts`` tables over the key-group ranges of a rescale, each restored from ``data``:
    the tables and how many rows they restored together."""
    bounds = np.linspace(0, MAXP, parts + 1).astype(int)
    tables = [_table(n, kg=KeyGroupRange(int(lo), int(hi) - 1))
              for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return tables, sum(x.restore(data) for x in tables)


def _feed(tables, batches) -> list:
    """Each batch's rows to the table owning their key groups; the outputs."""
    out = []
    for b in batches:
        kg = key_groups(b.column("auction"), MAXP)
        for x in tables:
            mine = (kg >= x.key_groups.start) & (kg <= x.key_groups.end)
            if mine.any():
                out.append(x.update(b.filter(pa.array(mine))))
    return out


def _snapshot(t, directory, stem):
    from airflow_checkpoint_provider.engine.snapshot.codec import read_state_file
    from airflow_checkpoint_provider.engine.snapshot.handles import StateFileHandle

    handle = t.snapshot_state(1).write(str(directory), stem, False)[0]
    return read_state_file(str(directory), StateFileHandle.from_dict(handle, location="t"))


@pytest.mark.parametrize("parts", [1, 3])
def test_snapshots_compress_only_changed_chunks_and_restore_exactly(tmp_path, monkeypatch, parts):
    """A snapshot is an IPC stream of one part per payload chunk; a chunk whose kept rows
    and ranks did not change since the last snapshot is not compressed again. Each of two
    successive snapshots (the second reusing parts) restores into other key-group ranges
    and continues to the reference's results."""
    import airflow_checkpoint_provider.engine.state.columnar.topn_snapshot as ts

    compressed = []
    real = ts._messages
    monkeypatch.setattr(ts, "_messages", lambda table: compressed.append(table.num_rows)
                        or real(table))
    batches = list(_batches(8, n_batches=10, keys=400))
    # batches 5 and 6 bring 40 new keys only: the chunks of the first 5 keep their ranks
    fed = [b if i not in (5, 6) else b.filter(pc.less(b.column("auction"), 40)).set_column(
        0, "auction", pc.add(b.filter(pc.less(b.column("auction"), 40)).column("auction"), 1000))
        for i, b in enumerate(batches)]
    t = _table(3)
    outputs = [t.update(b) for b in fed[:5]]
    first, kept_first = _snapshot(t, tmp_path, "a"), len(t)
    assert sum(compressed) == kept_first
    outputs += [t.update(b) for b in fed[5:7]]
    compressed.clear()
    second = _snapshot(t, tmp_path, "b")
    assert 0 < sum(compressed) <= len(t) - kept_first // 2  # the biggest chunk was reused
    for data, done in ((first, 5), (second, 7)):
        tables, restored = _rescaled(data, 3, parts)
        assert restored == (kept_first if done == 5 else len(t))
        out = list(outputs[:done]) + _feed(tables, fed[done:])
        assert _upserts(out) == _reference(fed, 3)


@pytest.mark.parametrize("kind", ["int", "wide int", "float", "uint8"])
@pytest.mark.parametrize("descending", [True, False])
def test_merge_order_is_the_order_by_row_value_and_arrival(kind, descending):
    """The merge's order (one packed int64 key and a stable sort, or a two-key lexsort when
    the values do not pack) equals the lexsort by row, value and arrival it replaced, ties
    included: rows arrive in arrival order within each (row, value)."""
    from airflow_checkpoint_provider.engine.state.columnar.topn_state import merge_order

    rng = np.random.default_rng(7)
    rows = rng.integers(0, 300, 5000)
    values = {"int": rng.integers(-20, 20, 5000),  # many ties, negative values
              "wide int": rng.integers(-(1 << 62), 1 << 62, 5000),  # does not pack
              "float": rng.integers(0, 20, 5000).astype(np.float64),
              "uint8": rng.integers(0, 20, 5000).astype(np.uint8)}[kind]
    arrival = np.arange(len(rows))
    v = values.astype(np.int64) if kind == "uint8" else values
    expected = np.lexsort((arrival, -v if descending else v, rows))
    assert np.array_equal(merge_order(rows, v, descending), expected)


def test_rows_that_cannot_beat_a_full_keys_last_row_skip_the_merge(monkeypatch):
    """A row whose value does not beat the n-th kept row of its full key (ties included: it
    came later) cannot rank: it is not merged (sorted) at all, and the results stay the
    reference's."""
    import airflow_checkpoint_provider.engine.state.columnar.topn_state as ts

    sorted_rows = []
    real = ts.merge_order
    monkeypatch.setattr(ts, "merge_order", lambda rows, values, descending: sorted_rows.append(
        len(rows)) or real(rows, values, descending))
    t = _table(3)
    first = pa.RecordBatch.from_pydict({"auction": [1, 1, 1, 2], "price": [30, 20, 10, 5],
                                        "id": [0, 1, 2, 3]})
    outputs = [t.update(first)]
    sorted_rows.clear()
    # key 1 is full (30, 20, 10): 10 (a tie, later) and 3 cannot rank; 25 can; key 2 is not full
    second = pa.RecordBatch.from_pydict({"auction": [1, 1, 1, 2], "price": [10, 3, 25, 1],
                                         "id": [4, 5, 6, 7]})
    outputs.append(t.update(second))
    assert sorted_rows == [3 + 1 + 1 + 1]  # key 1's 3 kept rows + 25, key 2's 5 + 1
    assert _upserts(outputs[1:]) == {(1, 2): 6, (1, 3): 1, (2, 2): 7}
    sorted_rows.clear()
    third = pa.RecordBatch.from_pydict({"auction": [1, 1], "price": [20, 2], "id": [8, 9]})
    outputs.append(t.update(third))
    assert sorted_rows == [] and outputs[-1].num_rows == 0 and len(t) == 5
    assert _upserts(outputs) == _reference([first, second, third], 3) == {
        (1, 1): 0, (1, 2): 6, (1, 3): 1, (2, 1): 3, (2, 2): 7}
