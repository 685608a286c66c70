"""Keys a job could never read back are refused by ``ckpt state write`` (API and CLI) naming
operator, state, key and row, with nothing written; ``verify-restore`` checks every key of
a snapshot (contract, key group, one type) and reports a change of key type."""

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pipelines import aggregate_pipeline, running_sum_pipeline
from state_snapshots import finished

from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.lifecycle.verify import verify_restore
from airflow_checkpoint_provider.engine.state_io import (
    StateKeyError,
    StateSchemaError,
    bootstrap_savepoint,
    read_state_table,
    rewrite_savepoint,
)
from airflow_checkpoint_provider.engine.state_io.keys import KeyCheck

pytestmark = pytest.mark.timeout(180)

#: (table key column, what the error says): the keys of the issue, for the string-keyed
#: operator 'sum' of running_sum_pipeline
BAD_KEYS = {
    "nan": (pa.array([float("nan")]), "key nan is (or holds) NaN"),
    "uint64-max": (pa.array([2**64 - 1], pa.uint64()),
                   "key 18446744073709551615 is an int beyond 64 bits"),
    "float": (pa.array([1.5]), "key 1.5 is of type float, but the operator's keys are str"),
    "int": (pa.array([7]), "key 7 is of type int, but the operator's keys are str"),
    "struct": (pa.array([{"a": 1}]), "key {'a': 1} has a value of type dict"),
    "list": (pa.array([["a", "b"]]), "key ('a', 'b') is of type tuple[str, str], but"),
    "nested-list": (pa.array([[[1], [2]]]), "key [[1], [2]] has a value of type list"),
    "null": (pa.array([None], pa.string()), "key None is of type NoneType, but"),
}


def _table(key: pa.Array) -> pa.Table:
    return pa.table({"key": key, "state": ["sum"], "value": [1]})


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_bad_keys_are_refused_naming_operator_state_and_key(heap_checkpoint, tmp_path, case):
    key, message = BAD_KEYS[case]
    target = tmp_path / "fixed"
    with pytest.raises(StateKeyError) as err:
        rewrite_savepoint(heap_checkpoint, str(target), uid="sum", table=_table(key))
    text = str(err.value)
    assert text.startswith("operator 'sum', state 'sum', row ") and message in text, text
    assert "nothing was written" in text and not target.exists()


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_bad_keys_from_the_cli_exit_1_with_the_message_and_write_nothing(heap_checkpoint,
                                                                         tmp_path, case):
    key, message = BAD_KEYS[case]
    pq.write_table(_table(key), tmp_path / "t.parquet")
    res = CliRunner().invoke(ckpt, ["state", "write", "--from", heap_checkpoint, "--uid", "sum",
                                    "--table", str(tmp_path / "t.parquet"),
                                    "--output", str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert message in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_drop_keys_of_another_type_and_bad_bootstrap_keys_are_refused(heap_checkpoint,
                                                                      tmp_path):
    res = CliRunner().invoke(ckpt, ["state", "write", "--from", heap_checkpoint, "--uid", "sum",
                                    "--drop-key", "5", "--int-keys", "--output",
                                    str(tmp_path / "a")])
    assert res.exit_code == 1 and "key 5 to drop is of type int" in res.output, res.output
    assert not (tmp_path / "a").exists()
    p = running_sum_pipeline(str(tmp_path / "p"))
    # an Arrow column of one type holds keys of two types only as a union
    mixed = pa.UnionArray.from_sparse(pa.array([0, 1], pa.int8()),
                                      [pa.array(["k1", "x"]), pa.array([0, 2])])
    with pytest.raises(StateKeyError, match=r"operator 'sum', state 'sum', row 1 of the table: "
                                            r"key 2 is of type int, but the operator's keys are "
                                            r"str \(as the key of row 0 of the table\)"):
        bootstrap_savepoint(str(tmp_path / "b"), pa.table({"key": mixed, "value": [1, 2]}),
                            pipeline=p, uid="sum", state="sum")
    with pytest.raises(StateKeyError, match="row 0 of the table: key nan is"):
        bootstrap_savepoint(str(tmp_path / "b"), _table(pa.array([float("nan")])),
                            pipeline=p, uid="sum")
    assert not (tmp_path / "b").exists()


@pytest.fixture(scope="module")
def aggregate_checkpoint(tmp_path_factory) -> str:
    return finished(tmp_path_factory.mktemp("agg"), aggregate=True)


def _aggregate_row(location: str, key: pa.Array) -> pa.Table:
    """A table of one aggregate() state row of ``location`` with ``key`` as its key."""
    row = read_state_table(location, "agg").slice(0, 1).drop_columns(["key_group", "state"])
    return row.set_column(0, "key", key)


@pytest.mark.parametrize("key, message", [
    (pa.array([1.5]), "the key column is double (float keys), but the operator's keys are str"),
    (pa.array([2**64 - 1], pa.uint64()), "the key column is uint64 (int keys), but"),
    (pa.array([{"a": 1}]), "the key column is struct<a: int64>; aggregate() keys are"),
])
def test_bad_aggregate_keys_are_refused(aggregate_checkpoint, tmp_path, key, message):
    with pytest.raises(StateKeyError) as err:
        rewrite_savepoint(aggregate_checkpoint, str(tmp_path / "x"), uid="agg",
                          table=_aggregate_row(aggregate_checkpoint, key))
    assert str(err.value).startswith("operator 'agg', state ") and message in str(err.value)
    assert not (tmp_path / "x").exists()
    p = aggregate_pipeline(str(tmp_path / "p"))
    for bad, says in ((pa.array([float("nan")]), "key NaN (row 0)"),
                      (pa.array([2**64 - 1], pa.uint64()), "18446744073709551615 (row 0) is an int beyond")):
        with pytest.raises(StateKeyError, match=re.escape(says)):
            bootstrap_savepoint(str(tmp_path / "b"), _aggregate_row(aggregate_checkpoint, bad),
                                pipeline=p, uid="agg")
    assert not (tmp_path / "b").exists()


def _unchecked(monkeypatch):
    """State write as it was before the key checks (keys written as they come)."""
    monkeypatch.setattr(KeyCheck, "check", lambda self, key, state, where:
                        tuple(key) if isinstance(key, list) else key)


def test_verify_restore_reports_keys_of_a_second_type_and_keys_that_are_no_keys(
        heap_checkpoint, tmp_path, monkeypatch):
    _unchecked(monkeypatch)
    mixed = rewrite_savepoint(heap_checkpoint, str(tmp_path / "mixed"), uid="sum",
                              table=_table(pa.array([7])))
    nan = rewrite_savepoint(heap_checkpoint, str(tmp_path / "nan"), uid="sum",
                            table=_table(pa.array([float("nan")])))
    monkeypatch.undo()
    p = running_sum_pipeline(str(tmp_path / "p"))
    report = verify_restore(p, mixed)
    assert not report.ok
    assert any(pr.uid == "sum" and "keys of 2 types: int (e.g. key 7 of state 'sum'), str"
               in pr.reason for pr in report.problems), report.describe()
    with pytest.raises(StateSchemaError, match=r"of type\(s\) int \(e.g. key 7 of state 'sum'\), "
                                               r"str"):
        read_state_table(mixed, "sum")  # ckpt state read: an error that says why, no traceback
    report = verify_restore(p, nan)
    assert not report.ok
    assert any(pr.uid == "sum" and pr.state == "sum" and "key nan is (or holds) NaN"
               in pr.reason for pr in report.problems), report.describe()


def test_verify_restore_names_the_key_types_and_reports_a_change(heap_checkpoint,
                                                                 aggregate_checkpoint, tmp_path):
    p = running_sum_pipeline(str(tmp_path / "p"))
    report = verify_restore(p, heap_checkpoint, key_types={"sum": str})
    assert report.ok and report.key_types == {"sum": "str"}, report.describe()
    assert "key types sum: str" in report.describe()
    report = verify_restore(p, heap_checkpoint, key_types={"sum": int})
    assert not report.ok
    [problem] = report.problems
    assert problem.uid == "sum" and problem.reason.startswith(
        "the snapshot's keys are str, but the job keys this operator by int: a restore must "
        "keep the key type")
    report = verify_restore(aggregate_pipeline(str(tmp_path / "a")), aggregate_checkpoint,
                            key_types={"agg": "float"})
    assert report.key_types == {"agg": "str"}
    assert [pr.uid for pr in report.problems] == ["agg"]
