"""FileSource(columns=[...]): Parquet projection pushdown.

Only the named columns are read and decoded; positions stay row indexes, so a split read
with one projection resumes exactly under another (a restore after the job's query changed
the columns it needs)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    FileSource,
    Pipeline,
    RestartStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.readers import MalformedFileError
from airflow_checkpoint_provider.engine.errors import ConfigurationError

CTX = SourceContext(job_id="j", job_name="n", operator_uid="src", subtask_index=0,
                    parallelism=1, attempt=0)
N = 23


def _write(tmp_path, name="a.parquet", n=N):
    table = pa.table({"id": list(range(n)), "key": [f"k{i % 3}" for i in range(n)],
                      "value": [i * 10 for i in range(n)], "big": ["x" * 50] * n})
    pq.write_table(table, str(tmp_path / name), row_group_size=7)
    return table


def _read(reader, batch=4, limit=None):
    out = []
    while limit is None or len(out) < limit:
        b = reader.read_batch(batch if limit is None else min(batch, limit - len(out)))
        if b is None:
            break
        out.extend(b.to_pylist())
    return out


def test_only_the_projected_columns_are_read_in_the_given_order(tmp_path, monkeypatch):
    table = _write(tmp_path)
    asked = []
    iter_batches = pq.ParquetFile.iter_batches

    def recording(self, *args, columns=None, **kwargs):
        asked.append(columns)
        return iter_batches(self, *args, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording)
    src = FileSource(str(tmp_path), format="parquet", columns=["value", "id"])
    rows = _read(src.open_split("a.parquet", None, CTX))
    assert asked == [["value", "id"]]  # pushed down to the Parquet reader
    assert rows == table.select(["value", "id"]).to_pylist()
    assert list(rows[0]) == ["value", "id"]


@pytest.mark.parametrize("k", [0, 5, 7, 15, N])
def test_a_position_taken_under_one_projection_resumes_exactly_under_another(tmp_path, k):
    table = _write(tmp_path)
    narrow = FileSource(str(tmp_path), format="parquet", columns=["id"])
    wide = FileSource(str(tmp_path), format="parquet", columns=["id", "key", "value"])
    first = narrow.open_split("a.parquet", None, CTX)
    head = _read(first, limit=k)
    position = first.position()
    assert position == k
    rest = _read(wide.open_split("a.parquet", position, CTX))
    ids = [r["id"] for r in head] + [r["id"] for r in rest]
    assert ids == list(range(N))  # no gap, no duplicate
    assert rest == table.select(["id", "key", "value"]).to_pylist()[k:]
    # and back: every column to a narrower projection
    every = FileSource(str(tmp_path), format="parquet")
    r = every.open_split("a.parquet", None, CTX)
    _read(r, limit=k)
    assert [x["id"] for x in _read(narrow.open_split("a.parquet", r.position(), CTX))] == \
        list(range(k, N))


def test_a_missing_column_names_the_file_and_the_column(tmp_path):
    _write(tmp_path)
    src = FileSource(str(tmp_path), format="parquet", columns=["id", "nope"])
    with pytest.raises(MalformedFileError, match=r"a\.parquet has no column\(s\) nope"):
        src.open_split("a.parquet", None, CTX)


@pytest.mark.parametrize("columns, fmt, match", [
    ([], "parquet", "at least one column"),
    (["a", "a"], "parquet", "each once"),
    ("id", "parquet", "list of column names"),
    (["id"], "csv", "Parquet files only"),
])
def test_bad_projections_are_configuration_errors(tmp_path, columns, fmt, match):
    with pytest.raises(ConfigurationError, match=match):
        FileSource(str(tmp_path), format=fmt, columns=columns)


def _slow(batch):
    import time

    time.sleep(0.05)  # the first run is stopped part-way: it must last a few seconds
    return batch


def _projection_job(root, data, columns, out, parallelism):
    p = Pipeline("projection", batch_size=50, arrow_batch_size=50,
                 checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(root, "ckpt"),
                                             savepoint_directory=os.path.join(root, "sp")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=0, delay_ms=0),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    src = FileSource(data, format="parquet", columns=columns, parquet_batch_size=50)
    (p.source(src, uid="src", parallelism=parallelism)
     .map_batches(_slow, name="slow")
     .sink(FileSink(out), uid="sink"))
    return p


@pytest.mark.timeout(180)
def test_a_savepoint_taken_with_one_projection_restores_with_another(workdir):
    """Stopped with a savepoint while reading ``columns=["id"]`` at parallelism 2, restored
    with ``["id", "value"]`` at parallelism 3: every row is committed exactly once across
    the two runs (positions are row indexes, whatever the projection)."""
    from pipelines import Background

    data = workdir / "data"
    data.mkdir()
    n, files = 1500, 3
    for j in range(files):
        table = pa.table({"id": list(range(j * n, (j + 1) * n)),
                          "value": [i * 10 for i in range(j * n, (j + 1) * n)],
                          "big": ["x" * 50] * n})
        pq.write_table(table, str(data / f"f{j}.parquet"), row_group_size=200)
    out = str(workdir / "out")
    bg = Background(_projection_job(str(workdir), str(data), ["id"], out, 2))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    first = list(read_committed(out))
    assert 0 < len(first) < n * files, "the first run must stop part-way"
    assert all(set(r) == {"id"} for r in first)
    second = _projection_job(str(workdir), str(data), ["id", "value"], out, 3).run(
        restore=req.result["location"])
    assert second.status == "FINISHED", second.failure_reason
    rows = list(read_committed(out))
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(n * files))  # no gap, no duplicate
    later = [r for r in rows if "value" in r]
    assert len(later) == n * files - len(first)
    assert all(r["value"] == r["id"] * 10 and "big" not in r for r in later)
