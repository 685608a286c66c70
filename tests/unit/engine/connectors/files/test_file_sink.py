"""The exactly-once file sink's writer: committed files hold one JSON object per line."""

from __future__ import annotations

import json

from airflow_checkpoint_provider.engine import FileSink
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.sink import read_committed

CTX = SourceContext(job_id="job-1", job_name="j", operator_uid="out", subtask_index=0,
                    parallelism=1, attempt=0)


def _write_and_commit(directory, batches):
    writer = FileSink(str(directory)).create_writer(CTX)
    for batch in batches:
        writer.write(batch)
    writer.commit(writer.pre_commit(1))
    writer.close()
    return list(read_committed(str(directory)))


def test_committed_lines_read_back_as_the_records_written(tmp_path):
    records = [{"key": "k1", "count": 3, "sum": 1.5, "tags": ["a", "b"], "none": None},
               {"key": "é日本", "count": -(2**63), "sum": 2**63 - 1, "nested": {"x": [1]}}]
    assert _write_and_commit(tmp_path, [records, records[:1]]) == records + records[:1]


def test_each_line_is_compact_json(tmp_path):
    _write_and_commit(tmp_path, [[{"a": 1, "b": "x"}]])
    (part,) = [p for p in tmp_path.iterdir() if p.name.startswith("part-")]
    assert part.read_text(encoding="utf-8") == '{"a":1,"b":"x"}\n'


def test_records_msgspec_cannot_encode_are_written_as_json_dumps_writes_them(tmp_path):
    records = [{None: 1, 2.5: "x", "big": 2**70}]
    got = _write_and_commit(tmp_path, [records])
    assert got == [json.loads(json.dumps(records[0]))]
