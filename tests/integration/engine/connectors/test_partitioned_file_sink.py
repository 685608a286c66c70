"""FileSink(partition_by=...): Hive-style partition directories, escaped values, a bound on
open writers, and exactly once (failures, SIGKILL, a savepoint restored at another
parallelism) as the unpartitioned sink."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from pipelines import (
    Background,
    FaultPlan,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    BadRecordError,
    ConfigurationError,
    CorruptCheckpointError,
    FileSink,
)
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.partitions import (
    escape_value,
    parse_partition_path,
)
from airflow_checkpoint_provider.engine.connectors.files.sink import STAGING, read_committed

CTX = SourceContext(job_id="job-1", job_name="j", operator_uid="out", subtask_index=0,
                    parallelism=1, attempt=0)
N, KEYS, SEED = 20_000, 50, 7
#: the failure runs and their failure-free reference: 10,000 records at 5,000/s stream >= 2 s,
#: ~12 checkpoints at 150 ms (the plans fire up to checkpoint 5, the last record point at
#: 8,000); 20,000 took twice the records and checkpoints for the same failures
N_FAULTS = 10_000


def _files(root) -> list[str]:
    """Every file under ``root``, relative, sorted."""
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def _committed(directory) -> Counter:
    """(partition directory, id, count) of every committed row, and per partition
    (directory, "final", its largest count, the sum of that row): what does not depend on
    the order in which the two source splits interleave (a running sum's intermediate values
    do)."""
    out: Counter = Counter()
    last: dict[str, tuple[int, int]] = {}
    for d, _, names in os.walk(directory):
        rel = os.path.relpath(d, directory)
        if rel.split(os.sep)[0] == STAGING:
            continue
        for n in names:
            if n.startswith("part-"):
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    for line in f:
                        r = json.loads(line)
                        assert "key" not in r  # the partition column is not in the rows
                        out[(rel, r["id"])] += 1
                        last[rel] = max(last.get(rel, (0, 0)), (r["count"], r["sum"]))
    out.update((rel, "final", *v) for rel, v in last.items())
    return out


# -- layout and escaping -------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_hive_layout_two_levels_without_the_partition_columns(tmp_path):
    sink = FileSink(str(tmp_path), partition_by=["dt", "hm"])
    w = sink.create_writer(CTX)
    w.write([{"id": 1, "dt": "2026-11-25", "hm": "10-00"},
             {"id": 2, "dt": "2026-11-25", "hm": "10-01"},
             {"id": 3, "dt": "2026-11-25", "hm": "10-00"}])
    w.commit(w.pre_commit(7))
    w.close()
    part = "part-out~job-1~c000007~s000.jsonl"
    assert _files(tmp_path) == [f"dt=2026-11-25/hm=10-00/{part}",
                                f"dt=2026-11-25/hm=10-01/{part}"]
    with open(tmp_path / "dt=2026-11-25" / "hm=10-00" / part) as f:
        assert f.read() == '{"id":1}\n{"id":3}\n'  # the columns live in the directory names
    assert sorted(read_committed(str(tmp_path)), key=lambda r: r["id"]) == [
        {"id": 1, "dt": "2026-11-25", "hm": "10-00"}, {"id": 2, "dt": "2026-11-25", "hm": "10-01"},
        {"id": 3, "dt": "2026-11-25", "hm": "10-00"}]


@pytest.mark.timeout(30)
def test_keep_partition_columns_keeps_them_in_the_rows(tmp_path):
    w = FileSink(str(tmp_path), partition_by=["n"], keep_partition_columns=True).create_writer(CTX)
    w.write([{"id": 1, "n": 5}])
    w.commit(w.pre_commit(1))
    (path,) = _files(tmp_path)
    assert path.startswith("n=5/")
    with open(tmp_path / path) as f:
        assert f.read() == '{"id":1,"n":5}\n'
    assert list(read_committed(str(tmp_path))) == [{"id": 1, "n": 5}]  # the typed value wins


HOSTILE = {"a/b": "c=a%2Fb", "..": "c=..", ".": "c=.", "x=y": "c=x%3Dy", "%": "c=%25",
           "%2F": "c=%252F", "line\nbreak": "c=line%0Abreak", "/etc/passwd": "c=%2Fetc%2Fpasswd",
           "..\\..": "c=..%5C..", "a:b*?": "c=a%3Ab%2A%3F", "日本 é": "c=日本 é",
           "": "c=__HIVE_DEFAULT_PARTITION__", None: "c=__HIVE_DEFAULT_PARTITION__"}


@pytest.mark.timeout(30)
def test_hostile_values_are_escaped_as_hive_does_and_stay_inside_the_directory(tmp_path):
    out = tmp_path / "out"
    w = FileSink(str(out), partition_by=["c"]).create_writer(CTX)
    w.write([{"id": i, "c": v} for i, v in enumerate(HOSTILE)])
    w.commit(w.pre_commit(1))
    assert set(os.listdir(out)) == {STAGING, *HOSTILE.values()}
    assert os.listdir(tmp_path) == ["out"]  # nothing written beside the sink's directory
    assert all(f.count("/") == 1 for f in _files(out))  # every file one level down
    back = {r["id"]: r["c"] for r in read_committed(str(out))}
    # every value reads back as written, but for "" (Hive's default partition: None)
    assert back == {i: (None if v == "" else v) for i, v in enumerate(HOSTILE)}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value, why", [
    ("__HIVE_DEFAULT_PARTITION__", "default"), ({"x": 1}, "dict"), ([1], "list"),
    (b"raw", "bytes"), ("\ud800", "surrogate"), (float("nan"), "finite"), ("x" * 300, "255")])
def test_values_that_cannot_be_a_partition_fail_naming_column_and_value(tmp_path, value, why):
    w = FileSink(str(tmp_path), partition_by=["col"]).create_writer(CTX)
    with pytest.raises(BadRecordError, match=rf"(?s)'col'.*{why}"):
        w.write([{"col": value}])


@pytest.mark.timeout(30)
def test_a_record_without_a_partition_column_fails_naming_it(tmp_path):
    w = FileSink(str(tmp_path), partition_by=["dt", "hm"]).create_writer(CTX)
    with pytest.raises(BadRecordError, match="no partition column 'hm'"):
        w.write([{"dt": "x"}])


@pytest.mark.timeout(30)
def test_typed_values_are_distinct_partitions(tmp_path):
    """1, 1.0 and True are equal dict keys; they must not share a cached directory."""
    w = FileSink(str(tmp_path), partition_by=["v"]).create_writer(CTX)
    w.write([{"v": 1}, {"v": 1.0}, {"v": True}])
    w.commit(w.pre_commit(1))
    assert set(os.listdir(tmp_path)) == {STAGING, "v=1", "v=1.0", "v=true"}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("columns", [["../x"], ["a b"], ["a/b"], ["dt", "dt"], [""], "dt",
                                     ["x=y"], ["é"]])
def test_partition_column_names_are_identifiers(tmp_path, columns):
    with pytest.raises(ConfigurationError, match="partition"):
        FileSink(str(tmp_path), partition_by=columns)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bad", [0, -1, True, "8"])
def test_max_open_writers_must_be_a_positive_integer(tmp_path, bad):
    with pytest.raises(ConfigurationError, match="max_open_writers"):
        FileSink(str(tmp_path), partition_by=["k"], max_open_writers=bad)


# -- restored transactions (untrusted) -----------------------------------------------------

def _txn(partition):
    return {"staging": "out~job-1~a0~s0~c3~0123456789abcdef.inprogress",
            "final": "part-out~job-1~c000003~s000.jsonl", "partition": partition}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("partition", [
    "../x", "dt=a/../..", "/abs", "dt=a", "hm=b/dt=a", "dt=a/hm=b/x=c", "dt=a/hm=b/",
    "dt=../hm=..", "dt=%2f/hm=b", "dt=%41/hm=b", "dt=a%/hm=b", "dt=a#/hm=b", "dt=/hm=b",
    "dt=a\\b/hm=c", 5])
def test_a_restored_transaction_must_name_a_partition_of_the_sinks_columns(tmp_path, partition):
    sink = FileSink(str(tmp_path), partition_by=["dt", "hm"])
    if partition == "dt=../hm=..":  # a valid partition ("..": a value, escaped as Hive does)
        sink.check_restored_transactions([_txn(partition)], location="test")
        return
    with pytest.raises(CorruptCheckpointError, match="partition"):
        sink.check_restored_transactions([_txn(partition)], location="test")


@pytest.mark.timeout(30)
def test_partitioning_must_match_the_snapshots(tmp_path):
    with pytest.raises(CorruptCheckpointError, match="partition_by"):
        FileSink(str(tmp_path)).check_restored_transactions([_txn("dt=a/hm=b")], location="t")
    old = {k: v for k, v in _txn("").items() if k != "partition"}  # written before partitions
    FileSink(str(tmp_path)).check_restored_transactions([old], location="t")
    with pytest.raises(CorruptCheckpointError, match="partition_by"):
        FileSink(str(tmp_path), partition_by=["dt"]).check_restored_transactions(
            [old], location="t")


@pytest.mark.timeout(30)
def test_escaping_is_canonical():
    for v in HOSTILE:
        if v not in ("", None):
            e = escape_value("c", v)
            assert parse_partition_path(f"c={e}", ["c"]) == [("c", v)]


# -- the writer bound ------------------------------------------------------------------------

def _open_staged_fds(staging: str) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(staging):
                n += 1
        except OSError:
            pass
    return n


@pytest.mark.timeout(30)
def test_open_writers_are_bounded_and_the_least_recent_is_rolled_not_failed(tmp_path):
    w = FileSink(str(tmp_path), partition_by=["k"], max_open_writers=2).create_writer(CTX)
    staging = str(tmp_path / STAGING)
    expected: dict[str, list[int]] = {}
    for i in range(200):  # 7 partitions, interleaved: each one rolled and reopened often
        k = f"p{(i * 3) % 7}"
        w.write([{"k": k, "i": i}])
        expected.setdefault(k, []).append(i)
        assert _open_staged_fds(staging) <= 2
    assert w.rolled > 50
    txns = w.pre_commit(4)
    assert len(txns) == 7 and len(os.listdir(staging)) == 7  # one file per partition
    w.commit(txns)
    for k, ids in expected.items():
        (name,) = os.listdir(tmp_path / f"k={k}")
        assert name == "part-out~job-1~c000004~s000.jsonl"
        with open(tmp_path / f"k={k}" / name) as f:
            assert [int(line.split(":")[1].rstrip("}\n")) for line in f] == ids
    assert os.listdir(staging) == []


@pytest.mark.timeout(30)
def test_commit_is_idempotent_and_a_restored_transaction_is_committed_once(tmp_path):
    w = FileSink(str(tmp_path), partition_by=["k"]).create_writer(CTX)
    w.write([{"k": "a", "i": 1}, {"k": "b", "i": 2}])
    txns = w.pre_commit(1)
    w.commit(txns)
    w.commit(txns)  # again (a notify repeated)
    again = FileSink(str(tmp_path), partition_by=["k"]).create_writer(
        SourceContext(job_id="job-1", job_name="j", operator_uid="out", subtask_index=0,
                      parallelism=1, attempt=1))
    again.recover(txns)  # restored: committed already
    assert sorted(r["i"] for r in read_committed(str(tmp_path))) == [1, 2]


# -- exactly once in a job -----------------------------------------------------------------

def _sink(out: str) -> FileSink:
    return FileSink(out, partition_by=["key"], max_open_writers=4)


@pytest.fixture(scope="module")
def failure_free(tmp_path_factory):
    root = tmp_path_factory.mktemp("free")
    p = running_sum_pipeline(str(root), num_records=N_FAULTS, num_keys=KEYS, seed=SEED,
                             sink=_sink(str(root / "out")))
    result = p.run()
    assert result.status == "FINISHED" and result.restarts == 0
    return _committed(root / "out")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("plan", [
    [("record", 1500), ("record", 6000), ("snapshot", 3), ("notify", 5)],
    [("kill", 4100), ("kill", 8000), ("notify", 3)],
], ids=["exceptions", "sigkill"])
def test_failures_commit_exactly_what_a_failure_free_run_commits(tmp_path, failure_free, plan):
    faults = FaultPlan(str(tmp_path / "faults"), plan)
    out = tmp_path / "out"
    p = running_sum_pipeline(str(tmp_path), num_records=N_FAULTS, num_keys=KEYS, seed=SEED,
                             faults=faults, rate=5000, interval_ms=150, initial_delay_ms=600,
                             sink=_sink(str(out)))
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(plan) and result.restarts >= 1
    check_exactly_once(str(out), expected_running_sums(N_FAULTS, KEYS, SEED))
    got = _committed(out)
    assert len(got) == N_FAULTS + KEYS and got == failure_free
    assert {k[0] for k in got} == {f"key=k{i}" for i in range(KEYS)}
    assert os.listdir(out / STAGING) == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("parallelism", [1, 4])
def test_savepoint_restored_at_another_parallelism_continues_exactly_once(tmp_path, parallelism):
    out = str(tmp_path / "out")
    opts = dict(num_records=N, num_keys=KEYS, seed=SEED, sink=_sink(out), name="partitioned",
                savepoint_directory=str(tmp_path / "savepoints"),
                allowed_savepoint_roots=(str(tmp_path),))
    bg = Background(running_sum_pipeline(str(tmp_path), rate=4000, keyed_parallelism=2, **opts))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    before = sum(n for k, n in _committed(out).items() if k[1] != "final")
    assert 0 < before < N
    p = running_sum_pipeline(str(tmp_path), keyed_parallelism=parallelism,
                             source_parallelism=min(parallelism, 3), **opts)
    result = p.run(restore=req.result["location"])
    assert result.status == "FINISHED"
    check_exactly_once(out, expected_running_sums(N, KEYS, SEED))
