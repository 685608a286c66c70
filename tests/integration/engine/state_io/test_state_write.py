"""Savepoints written from tables: a round trip restores like the original, bootstrap state
starts a new job, fixed copies drop and rewrite keys; bad tables are refused by name."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pipelines import (
    aggregate_pipeline,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
    versioned_pipeline,
)
from repo_paths import SUPPORT_DIR
from state_snapshots import KEYS, SAVEPOINT_N, SEED, N, copy_output, finished

from airflow_checkpoint_provider.engine import read_committed
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.lifecycle.verify import verify_restore
from airflow_checkpoint_provider.engine.snapshot.verify import load_verified_snapshot
from airflow_checkpoint_provider.engine.state_io import (
    StateSchemaError,
    TargetExistsError,
    UnknownOperatorError,
    UnknownStateError,
    bootstrap_savepoint,
    read_state_table,
    rewrite_savepoint,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def by_key_state(table: pa.Table) -> dict:
    return {(r["key"], r["state"]): r["value"] for r in table.to_pylist()}


def test_round_trip_restores_at_another_parallelism_like_the_original(stopped_savepoint, tmp_path):
    root, savepoint = stopped_savepoint
    table = read_state_table(savepoint, "sum")
    copy = rewrite_savepoint(savepoint, str(tmp_path / "copy"), uid="sum", table=table)
    assert by_key_state(read_state_table(copy, "sum")) == by_key_state(table)
    assert by_key_state(read_state_table(copy, "audit")) == by_key_state(
        read_state_table(savepoint, "audit"))
    load_verified_snapshot(copy)  # every file of the copy verifies; nothing points back
    out = copy_output(root, tmp_path)
    p = versioned_pipeline(str(tmp_path), "v1", num_records=SAVEPOINT_N, out=str(out),
                           keyed_parallelism=3)
    result = p.run(restore=copy, trust_snapshot=True)  # written without a key
    assert result.status == "FINISHED" and result.restored_from == copy
    check_exactly_once(str(out), expected_running_sums(SAVEPOINT_N, 50, 7))


def test_fixed_copy_drops_and_rewrites_keys(stopped_savepoint, tmp_path):
    root, savepoint = stopped_savepoint
    before = by_key_state(read_state_table(savepoint, "sum"))
    keys = sorted({k for k, _ in before})
    dropped, rewritten = keys[0], keys[1]
    fix = pa.table({"key": [rewritten], "value": [before[(rewritten, "sum")] + 1000]})
    pq.write_table(fix, tmp_path / "fix.parquet")
    res = CliRunner().invoke(ckpt, ["state", "write", "--from", savepoint, "--uid", "sum",
                                    "--state", "sum", "--table", str(tmp_path / "fix.parquet"),
                                    "--drop-key", dropped, "--output", str(tmp_path / "fixed")])
    assert res.exit_code == 0, res.output
    fixed = str(tmp_path / "fixed")
    after = by_key_state(read_state_table(fixed, "sum"))
    assert (dropped, "sum") not in after and (dropped, "count") in after  # only state 'sum'
    assert after[(rewritten, "sum")] == before[(rewritten, "sum")] + 1000
    out = copy_output(root, tmp_path)
    p = versioned_pipeline(str(tmp_path), "v1", num_records=SAVEPOINT_N, out=str(out),
                           keyed_parallelism=1)
    assert p.run(restore=fixed, trust_snapshot=True).status == "FINISHED"
    expected = expected_running_sums(SAVEPOINT_N, 50, 7)
    final = {}
    for r in read_committed(str(out)):
        if r["key"] not in final or r["count"] > final[r["key"]]["count"]:
            final[r["key"]] = r
    assert final[rewritten]["sum"] == expected[rewritten]["sum"] + 1000
    # the dropped key's sum started again from 0 at the savepoint: less than its total
    assert final[dropped]["sum"] < expected[dropped]["sum"]
    assert all(final[k]["sum"] == v["sum"] for k, v in expected.items()
               if k not in (dropped, rewritten))


def test_bootstrap_state_starts_a_new_job_from_the_table(tmp_path):
    keys = sorted(expected_running_sums(N, KEYS, SEED))
    table = pa.table({"key": keys * 2, "state": ["sum"] * len(keys) + ["count"] * len(keys),
                      "value": [1_000_000] * len(keys) + [0] * len(keys)})
    p = running_sum_pipeline(str(tmp_path), num_records=N, num_keys=KEYS, seed=SEED,
                             keyed_parallelism=2)
    savepoint = bootstrap_savepoint(str(tmp_path / "boot"), table, pipeline=p, uid="sum")
    assert verify_restore(p, savepoint, parallelism=3).ok
    assert p.run(restore=savepoint, trust_snapshot=True).status == "FINISHED"
    expected = expected_running_sums(N, KEYS, SEED)
    for v in expected.values():
        v["sum"] += 1_000_000
    check_exactly_once(str(tmp_path / "out"), expected)


def test_bootstrap_from_the_cli_with_a_pipeline_reference(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SUPPORT_DIR))  # pipelines_ref
    pq.write_table(pa.table({"key": ["k1", "k2"], "value": [5, 6]}), tmp_path / "t.parquet")
    res = CliRunner().invoke(ckpt, ["state", "write", "--pipeline", "pipelines_ref:v1",
                                    "--uid", "sum", "--state", "sum", "--table",
                                    str(tmp_path / "t.parquet"), "--output", str(tmp_path / "sp")])
    assert res.exit_code == 0, res.output
    table = read_state_table(str(tmp_path / "sp"), "sum")
    assert by_key_state(table) == {("k1", "sum"): 5, ("k2", "sum"): 6}
    res = CliRunner().invoke(ckpt, ["state", "write", "--pipeline", "pipelines_ref:v1",
                                    "--uid", "nope", "--state", "sum", "--table",
                                    str(tmp_path / "t.parquet"), "--output", str(tmp_path / "x")])
    assert res.exit_code == 1 and "no operator 'nope'" in res.output


@pytest.mark.timeout(180)
def test_fixed_copy_of_aggregate_state_rewrites_its_accumulators(tmp_path):
    location = finished(tmp_path, aggregate=True)
    before = {r["key"]: r for r in read_state_table(location, "agg").to_pylist()}
    key = sorted(before)[0]
    row = dict(before[key], count=before[key]["count"] + 10)
    fixed = rewrite_savepoint(location, str(tmp_path / "fixed"), uid="agg",
                              table=pa.Table.from_pylist([row]), drop_keys=[sorted(before)[1]])
    after = {r["key"]: r for r in read_state_table(fixed, "agg").to_pylist()}
    assert after[key]["count"] == before[key]["count"] + 10
    assert sorted(before)[1] not in after and len(after) == len(before) - 1
    assert verify_restore(aggregate_pipeline(str(tmp_path / "v")), fixed, parallelism=3).ok
    with pytest.raises(StateSchemaError, match="no column.*'sum:value'"):
        rewrite_savepoint(location, str(tmp_path / "bad"), uid="agg",
                          table=pa.table({"key": [key], "count": [1]}))


def test_bad_tables_and_targets_are_refused_by_name(stopped_savepoint, tmp_path):
    _, savepoint = stopped_savepoint
    with pytest.raises(UnknownStateError, match="operator 'sum' has no state 'total'"):
        rewrite_savepoint(savepoint, str(tmp_path / "a"), uid="sum",
                          table=pa.table({"key": ["k1"], "state": ["total"], "value": [1]}))
    with pytest.raises(StateSchemaError, match=r"no column\(s\) 'value'"):
        rewrite_savepoint(savepoint, str(tmp_path / "b"), uid="sum", state="sum",
                          table=pa.table({"key": ["k1"], "sum": [1]}))
    with pytest.raises(UnknownOperatorError, match="no operator 'nope'"):
        rewrite_savepoint(savepoint, str(tmp_path / "c"), uid="nope", drop_keys=["k1"])
    p = running_sum_pipeline(str(tmp_path))
    with pytest.raises(StateSchemaError, match="list state 'sum' needs a list"):
        bootstrap_savepoint(str(tmp_path / "d"), pa.table({"key": ["k1"], "value": [1]}),
                            pipeline=p, uid="sum", state="sum", kind="list")
    os.makedirs(tmp_path / "full")
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(TargetExistsError, match="is not empty"):
        rewrite_savepoint(savepoint, str(tmp_path / "full"), uid="sum", drop_keys=["k1"])


@pytest.mark.timeout(180)
def test_fixed_copy_of_an_incremental_rocksdb_checkpoint_owns_every_file(tmp_path):
    import shutil

    from state_snapshots import latest_checkpoint

    p = versioned_pipeline(str(tmp_path), "v1", num_records=N, interval_ms=100)
    p.state_backend = "rocksdb"
    assert p.run().status == "FINISHED"
    location = latest_checkpoint(p)
    audit = by_key_state(read_state_table(location, "audit"))
    fixed = rewrite_savepoint(location, str(tmp_path / "fixed"), uid="sum", drop_keys=["k1"])
    shutil.rmtree(tmp_path / "ckpt")  # the copy holds the shared SSTs it needs
    assert by_key_state(read_state_table(fixed, "audit")) == audit
    after = by_key_state(read_state_table(fixed, "sum"))
    assert ("k1", "sum") not in after and len(after) == 2 * (len(audit) - 1)
    v1 = versioned_pipeline(str(tmp_path / "v"), "v1")
    v1.state_backend = "rocksdb"  # 'audit' is still RocksDB state; 'sum' now heap-format files
    assert verify_restore(v1, fixed, parallelism=3).ok
