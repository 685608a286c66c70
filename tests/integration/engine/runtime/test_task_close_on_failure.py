"""A task that fails closes its operators (a source's split readers, a sink's writer): a CDC
reader's replication connection is not left open until the slot process ends. A close that
raises is logged; the task's failure stays the original error."""

from __future__ import annotations

import os

import pytest

from airflow_checkpoint_provider.engine import (
    FileSink,
    GeneratorSource,
    JobFailedError,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.generator import _GeneratorReader


def _mark(directory: str, what: str) -> None:
    with open(os.path.join(directory, what), "a") as f:
        f.write("closed\n")


class ClosingGenerator(GeneratorSource):
    """Its readers leave a marker file when closed, then raise from close()."""

    def __init__(self, marks: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marks = marks

    def open_split(self, split_id, position, ctx):
        reader = super().open_split(split_id, position, ctx)
        marks = self.marks

        class Reader(_GeneratorReader):
            def close(self):
                _mark(marks, f"source-{split_id}")
                raise RuntimeError("the reader's close failed too")

        reader.__class__ = Reader
        return reader


class ClosingSink(FileSink):
    def __init__(self, directory: str, marks: str) -> None:
        super().__init__(directory)
        self.marks = marks

    def create_writer(self, ctx):
        writer = super().create_writer(ctx)
        marks, close = self.marks, writer.close

        def closing():
            _mark(marks, "sink")
            close()

        writer.close = closing
        return writer


def explode(record: dict) -> dict:
    if record["value"] >= 0:
        raise ValueError("boom: the map failed")
    return record


@pytest.mark.timeout(120)
def test_a_failed_task_closes_its_operators_and_reports_the_original_error(tmp_path):
    marks = str(tmp_path / "marks")
    os.mkdir(marks)
    p = Pipeline("close-on-failure", metadata_url=f"sqlite:///{tmp_path}/meta.db",
                 restart_strategy=RestartStrategy.none())
    # one chained task: source -> map -> sink
    (p.source(ClosingGenerator(marks, num_records=1_000, splits=1), uid="gen", parallelism=1)
      .map(explode, uid="explode")
      .sink(ClosingSink(str(tmp_path / "out"), marks), uid="out"))
    with pytest.raises(JobFailedError, match="boom: the map failed") as failed:
        p.run()
    assert "close failed" not in str(failed.value)
    # closed before the failure was reported: the slot process may be stopped right after
    assert sorted(os.listdir(marks)) == ["sink", "source-split-0"]
