"""Reading a FileSink's committed output as its readers would (connectors/files/committed.py):
the part files with the job, checkpoint and subtask that committed each, in commit order,
with their partition values; read_committed's records."""

from __future__ import annotations

import json
import os

from airflow_checkpoint_provider.engine import CommittedFile, committed_files, read_committed
from airflow_checkpoint_provider.engine.connectors.sink_names import part_file_name


def _part(directory: str, job: str, checkpoint: int, subtask: int, rows: list[dict],
          uid: str = "sink") -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, part_file_name(uid, job, checkpoint, subtask))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def test_committed_files_are_in_commit_order_across_partitions(tmp_path):
    out = str(tmp_path / "out")
    # checkpoint 2 of partition a=x sorts before checkpoint 10 of a=y by commit, not by name
    late = _part(os.path.join(out, "a=y"), "job1", 10, 0, [{"k": 1, "v": "late"}])
    early = _part(os.path.join(out, "a=x"), "job1", 2, 1, [{"k": 1, "v": "early"}])
    first = _part(out, "job1", 2, 0, [{"k": 2}])
    os.makedirs(os.path.join(out, "_staging"))  # not committed output
    with open(os.path.join(out, "_SUCCESS"), "w"):
        pass

    files = committed_files(out)

    assert [f.path for f in files] == [first, early, late]
    assert files[1] == CommittedFile(early, "job1", 2, 1, "sink", {"a": "x"})
    assert files[0].partition == {}
    assert [f.commit_order[:3] for f in files] == [("job1", 2, 0), ("job1", 2, 1), ("job1", 10, 0)]


def test_jobs_are_ordered_by_the_rank_a_reader_gives_them(tmp_path):
    out = str(tmp_path / "out")
    _part(out, "b-first", 5, 0, [{"k": 1, "v": 1}])
    _part(out, "a-second", 1, 0, [{"k": 1, "v": 2}])
    rank = {"b-first": 0, "a-second": 1}

    files = sorted(committed_files(out), key=lambda f: (rank[f.job_id], f.commit_order))
    last = {}
    for f in files:
        with open(f.path) as lines:
            for line in lines:
                row = json.loads(line)
                last[row["k"]] = row["v"]

    assert [f.job_id for f in files] == ["b-first", "a-second"]
    assert last == {1: 2}  # the restored job's row is the result


def test_the_default_partition_and_an_old_file_name(tmp_path):
    out = str(tmp_path / "out")
    default = _part(os.path.join(out, "a=__HIVE_DEFAULT_PARTITION__"), "job1", 1, 0, [{"k": 1}])
    old = os.path.join(out, "part-sink-job0-c000001-s000.jsonl")  # before the ~ encoding
    with open(old, "w") as f:
        f.write('{"k": 0}\n')

    files = committed_files(out)

    assert files[0] == CommittedFile(old, None, None, None, None, {})
    assert files[1] == CommittedFile(default, "job1", 1, 0, "sink", {"a": None})
    assert sorted(r["k"] for r in read_committed(out)) == [0, 1]


def test_a_missing_directory_has_no_committed_files(tmp_path):
    assert committed_files(str(tmp_path / "never-written")) == []
