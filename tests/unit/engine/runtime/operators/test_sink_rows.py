"""Which batches a sink gets: dict records stay dicts for a writer that takes both (no
dict -> Arrow conversion on the per-record path, issue 55), Arrow stays Arrow."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine import DiscardSink, GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.connectors.discard import DiscardWriter
from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
from airflow_checkpoint_provider.engine.runtime.operators.registry import open_operator
from airflow_checkpoint_provider.engine.runtime.task.stream_task import StreamTask
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

SEEN: list = []


class RecordingWriter(DiscardWriter):
    def write(self, records) -> None:
        SEEN.append(records)


class ArrowOnlyWriter(RecordingWriter):
    accepts_rows = False


class RecordingSink(DiscardSink):
    def __init__(self, writer) -> None:
        self.writer_class = writer

    def create_writer(self, ctx):
        return self.writer_class()


def _sink_operator(writer):
    p = Pipeline("sink-rows")
    p.source(GeneratorSource(10), uid="gen").sink(RecordingSink(writer), uid="out")
    node = next(n for n in p.job_graph().nodes if n.uid == "out")
    ctx = RuntimeContext(job_id="j", job_name="sink-rows", operator_uid="out", subtask_index=0,
                         parallelism=1, attempt=0)
    return open_operator(node, ctx, KeyGroupRange(0, 127), 128, None, None)


def _push(op, records) -> None:
    """StreamTask._push of a chain holding only ``op``."""
    task = SimpleNamespace(counts=[[0, 0]], operators=[op], main_writers=[], side_writers=[],
                           _last_report=time.monotonic(), report_counts=lambda now: None)
    StreamTask._push(task, records)  # type: ignore[arg-type]


@pytest.mark.parametrize(("writer", "rows_as_rows"), [(RecordingWriter, True),
                                                      (ArrowOnlyWriter, False)])
def test_a_sink_writer_that_takes_rows_gets_dict_records_as_they_are(writer, rows_as_rows):
    SEEN.clear()
    op = _sink_operator(writer)
    rows = [{"key": "a", "n": 1}, {"key": "b", "n": 2}]
    _push(op, rows)
    _push(op, pa.RecordBatch.from_pylist(rows))
    first, second = SEEN
    if rows_as_rows:
        assert first is rows  # not converted (nor copied)
    else:
        assert isinstance(first, pa.RecordBatch) and first.to_pylist() == rows
    assert isinstance(second, pa.RecordBatch)  # Arrow input stays Arrow either way
