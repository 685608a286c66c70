"""Example job: replicate PostgreSQL tables as a changelog (snapshot, then changes) into
files, exactly once; records carry ``_op`` (+I/-U/+U/-D) and the table's columns.

Run it with ``ckpt run airflow_checkpoint_provider.examples.postgres_cdc:build``. Options
from environment variables (same reference from the CLI, spark-submit and Airflow):
``CKPT_CDC_URL`` (the source database, required), ``CKPT_CDC_TABLES`` (comma-separated,
default ``orders``), ``CKPT_EXAMPLE_DIR`` (checkpoints and output, default
``./demo-output``). The replication slot and publication are ``ckpt_<job name>``; drop them
with ``ckpt cdc drop-slot --job-name <job name>`` once the job is retired.

In Airflow the URL is never a DAG run's conf: the DAG ``postgres_cdc`` names an Airflow
connection (``cdc_conn_id``, one of the DAG author's list) and ``SubmitCheckpointedJobOperator
(env_from_connections={"CKPT_CDC_URL": ...})`` puts its URI in the job's environment.
"""

from __future__ import annotations

import os

from airflow_checkpoint_provider.engine import CheckpointConfig, FileSink, Pipeline
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource
from airflow_checkpoint_provider.examples import example_root


def build(root: str | None = None, *, url: str | None = None, tables: str | None = None,
          interval_ms: int = 2000) -> Pipeline:
    root = example_root(root)
    url = url or os.environ["CKPT_CDC_URL"]
    tables = tables or os.environ.get("CKPT_CDC_TABLES", "orders")
    p = Pipeline("postgres-cdc", checkpoint=CheckpointConfig(
        interval_ms=interval_ms, directory=os.path.join(root, "checkpoints"),
        savepoint_directory=os.path.join(root, "savepoints")))
    (p.source(PostgresCdcSource(url, [t.strip() for t in tables.split(",")]),
              uid="cdc", parallelism=2)
      .sink(FileSink(os.path.join(root, "cdc-out")), uid="out"))
    return p
