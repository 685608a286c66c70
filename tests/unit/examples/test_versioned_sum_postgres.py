"""The versioned_sum example writes to PostgreSQL 2PC sinks when ``CKPT_EXAMPLE_PG_URL`` is
set (one sink per table of ``CKPT_EXAMPLE_PG_TABLES``, uid ``pg-<table>``), else to its file
sink: the real-deployment blue-green into PostgreSQL (tests/deployment/cluster) runs it through Airflow."""

from __future__ import annotations

from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.examples.versioned_sum import build_v1, build_v2
from airflow_checkpoint_provider.params import EXAMPLE_ENV


def _sinks(pipeline) -> dict[str, object]:
    return {n.uid: n.payload for v in pipeline.execution_graph().vertices for n in v.nodes
            if n.kind == "sink"}


def test_the_example_writes_to_postgres_2pc_sinks_when_given_a_url(monkeypatch, tmp_path):
    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(tmp_path))
    monkeypatch.delenv("CKPT_EXAMPLE_PG_URL", raising=False)
    assert list(_sinks(build_v1())) == ["file-sink"]
    monkeypatch.setenv("CKPT_EXAMPLE_PG_URL", "postgresql://u@127.0.0.1:5432/db")
    monkeypatch.setenv("CKPT_EXAMPLE_PG_TABLES", "sums_a, sums_b")
    monkeypatch.setenv("CKPT_EXAMPLE_PARALLELISM", "3")
    for build in (build_v1, build_v2):  # the same sink uids: each restores the other's snapshots
        sinks = _sinks(build())
        assert list(sinks) == ["pg-sums_a", "pg-sums_b"]
        assert all(isinstance(s, PostgresSink) and s.mode == "2pc" and s.can_hold_commits()
                   for s in sinks.values())
        assert [s.table for s in sinks.values()] == ["sums_a", "sums_b"]
        assert build().execution_graph().num_slots == 3
    # a DAG run's conf may choose the tables (the DAGs' job_env allow-list), never the URL:
    # that is the worker's environment or an author-listed connection (issue 50)
    assert "CKPT_EXAMPLE_PG_TABLES" in EXAMPLE_ENV and "CKPT_EXAMPLE_PG_URL" not in EXAMPLE_ENV
