"""OpenLineage: the submit operator reports its pipeline's sources and sinks as datasets, and
each connector names its dataset the OpenLineage way, without credentials."""

from __future__ import annotations

import pytest
from provider_helpers import EXAMPLE

from airflow_checkpoint_provider.engine import FileSink, GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.connectors.files.source import FileSource
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.lifecycle.lineage import pipeline_datasets
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

pytest.importorskip("airflow.providers.openlineage")


def test_submit_reports_the_pipelines_sink_as_an_output_dataset(tmp_path):
    op = SubmitCheckpointedJobOperator(task_id="start", pipeline=f"{EXAMPLE}:build_v1",
                                       job_name="versioned-sum",
                                       env_vars={"CKPT_EXAMPLE_DIR": str(tmp_path / "ex")})
    lineage = op.get_openlineage_facets_on_start()
    assert lineage.inputs == []  # a generator reads no dataset
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", str(tmp_path / "ex" / "output"))]


def test_a_pipeline_that_cannot_be_built_gives_empty_lineage_not_a_failure():
    op = SubmitCheckpointedJobOperator(task_id="start", pipeline="no_such_module:build",
                                       job_name="x")
    lineage = op.get_openlineage_facets_on_start()
    assert lineage.inputs == [] and lineage.outputs == []


def test_connectors_name_their_datasets(tmp_path):
    (tmp_path / "in").mkdir()
    p = Pipeline("lineage")
    src = p.source(FileSource(str(tmp_path / "in")), uid="files")
    src.sink(PostgresSink("postgresql+psycopg://bob:secret@db.example:6543/shop", "sales.orders"),
             uid="pg")
    src.sink(DeltaSink("s3://lake/tables/orders"), uid="delta")
    src.sink(IcebergSink("sales.orders", catalog={"type": "sql", "uri": "postgresql://u:pw@h/c",
                                                  "warehouse": "s3://wh/iceberg"},
                         staging_dir=str(tmp_path / "stage")), uid="ice")
    p.source(GeneratorSource(10), uid="gen").sink(FileSink(str(tmp_path / "out")), uid="out")
    datasets = pipeline_datasets(p)
    assert datasets["inputs"] == [{"namespace": "file", "name": str(tmp_path / "in"),
                                   "uid": "files"}]
    outputs = {d["uid"]: (d["namespace"], d["name"]) for d in datasets["outputs"]}
    assert outputs == {"pg": ("postgres://db.example:6543", "shop.sales.orders"),
                       "delta": ("s3://lake", "tables/orders"),
                       "ice": ("s3://wh/iceberg", "sales.orders"),
                       "out": ("file", str(tmp_path / "out"))}
    assert "secret" not in repr(datasets) and "pw" not in repr(datasets)
