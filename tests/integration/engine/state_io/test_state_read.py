"""Reading a snapshot's keyed state as a pyarrow.Table: every backend, every error named."""

import json
import os

import pyarrow as pa
import pytest
from pipelines import expected_running_sums
from state_snapshots import KEYS, SEED, N, finished

from airflow_checkpoint_provider.engine import CorruptCheckpointError
from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata
from airflow_checkpoint_provider.engine.state.keygroups import key_group_for
from airflow_checkpoint_provider.engine.state_io import (
    NotKeyedStateError,
    UnknownOperatorError,
    UnknownStateError,
    read_state_table,
)

pytestmark = pytest.mark.timeout(180)


def sums_by_key(table: pa.Table, state: str = "sum") -> dict:
    return {r["key"]: r["value"] for r in table.to_pylist() if r["state"] == state}


def expected_sums() -> dict:
    return {k: v["sum"] for k, v in expected_running_sums(N, KEYS, SEED).items()}


def expected_counts() -> dict:
    return {k: len(v["ids"]) for k, v in expected_running_sums(N, KEYS, SEED).items()}


def test_heap_checkpoint_reads_every_key_with_its_sum_count_and_key_group(heap_checkpoint):
    table = read_state_table(heap_checkpoint, "sum")
    assert table.column_names == ["key", "key_group", "state", "value"]
    assert sums_by_key(table) == expected_sums()
    assert sums_by_key(table, "count") == expected_counts()
    assert all(r["key_group"] == key_group_for(r["key"], 128) for r in table.to_pylist())
    assert table.column("key_group").to_pylist() == sorted(table.column("key_group").to_pylist())


def test_one_state_and_one_key_group_range_read_only_those_rows(heap_checkpoint):
    only_sum = read_state_table(heap_checkpoint, "sum", "sum")
    assert set(only_sum.column("state").to_pylist()) == {"sum"}
    assert only_sum.num_rows == KEYS
    part = read_state_table(heap_checkpoint, "sum", "sum", key_groups=(0, 63))
    assert part.num_rows and all(0 <= g <= 63 for g in part.column("key_group").to_pylist())
    rest = read_state_table(heap_checkpoint, "sum", "sum", key_groups=(64, 127))
    assert part.num_rows + rest.num_rows == KEYS


@pytest.mark.slow
def test_rocksdb_incremental_checkpoint_reads_like_heap(tmp_path):
    location = finished(tmp_path, "rocksdb")
    with open(os.path.join(location, "_metadata")) as f:
        doc = json.load(f)
    files = [f for s in doc["operators"]["sum"]["subtasks"] if s["keyed"]
             for f in s["keyed"]["files"]]
    assert any("shared" in f for f in files), "an incremental checkpoint references shared SSTs"
    table = read_state_table(location, "sum")
    assert sums_by_key(table) == expected_sums()
    assert sums_by_key(table, "count") == expected_counts()


@pytest.mark.slow
def test_aggregate_state_reads_as_its_accumulator_columns(tmp_path):
    table = read_state_table(finished(tmp_path, aggregate=True), "agg")
    assert table.column_names[:3] == ["key", "key_group", "state"]
    assert {"count", "sum:value", "min:value", "max:value"} <= set(table.column_names)
    assert set(table.column("state").to_pylist()) == {"aggregate"}
    rows = {r["key"]: r for r in table.to_pylist()}
    assert {k: r["sum:value"] for k, r in rows.items()} == expected_sums()
    assert {k: r["count"] for k, r in rows.items()} == expected_counts()
    with pytest.raises(UnknownStateError, match="no state 'sum'.*aggregate"):
        read_state_table(finished(tmp_path / "again", aggregate=True), "agg", "sum")


def test_unknown_uid_unknown_state_and_operator_state_are_named(heap_checkpoint):
    with pytest.raises(UnknownOperatorError, match=r"no operator 'nope'.*gen, out, sum"):
        read_state_table(heap_checkpoint, "nope")
    with pytest.raises(UnknownStateError, match=r"operator 'sum' .* no state 'total'.*count, sum"):
        read_state_table(heap_checkpoint, "sum", "total")
    with pytest.raises(NotKeyedStateError, match="operator 'gen'.*operator state"):
        read_state_table(heap_checkpoint, "gen")


def _tampered(location, tmp_path, change) -> str:
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(location, copy)
    with open(copy / "_metadata") as f:
        doc = json.load(f)
    change(doc)
    (copy / "_metadata").write_bytes(encode_metadata(doc))  # a valid checksum: still refused
    return str(copy)


def test_tampered_paths_and_files_are_refused_naming_the_field(heap_checkpoint, tmp_path):
    def escape(doc):
        sub = next(s for s in doc["operators"]["sum"]["subtasks"] if s["keyed"])
        sub["keyed"]["path"] = "../../../etc/passwd"

    with pytest.raises(CorruptCheckpointError, match=r"operators\['sum'\].subtasks\[\d\].keyed.path"):
        read_state_table(_tampered(heap_checkpoint, tmp_path / "a", escape), "sum")

    def wrong_size(doc):
        sub = next(s for s in doc["operators"]["sum"]["subtasks"] if s["keyed"])
        sub["keyed"]["size"] += 1

    with pytest.raises(CorruptCheckpointError, match=r"points outside|does not match its checksum"):
        read_state_table(_tampered(heap_checkpoint, tmp_path / "b", wrong_size), "sum")


def test_cli_reads_as_a_table_json_or_parquet_and_names_bad_uids(heap_checkpoint, tmp_path):
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from airflow_checkpoint_provider.engine.cli import main as ckpt

    runner = CliRunner()
    res = runner.invoke(ckpt, ["state", "read", heap_checkpoint, "--uid", "sum", "--state", "sum",
                               "--format", "json"])
    assert res.exit_code == 0, res.output
    assert {r["key"]: r["value"] for r in json.loads(res.output)} == expected_sums()
    res = runner.invoke(ckpt, ["state", "read", heap_checkpoint, "--uid", "sum", "--format",
                               "parquet", "--output", str(tmp_path / "s.parquet")])
    assert res.exit_code == 0, res.output
    assert sums_by_key(pq.read_table(tmp_path / "s.parquet")) == expected_sums()
    res = runner.invoke(ckpt, ["state", "read", heap_checkpoint, "--uid", "sum"])
    assert res.exit_code == 0 and "key_group" in res.output
    res = runner.invoke(ckpt, ["state", "read", heap_checkpoint, "--uid", "nope"])
    assert res.exit_code == 1 and "no operator 'nope'" in res.output
