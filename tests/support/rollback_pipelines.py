"""Pipelines of the rollback tests (imported by name in child processes)."""

from __future__ import annotations

import os

from airflow_checkpoint_provider.engine import GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink


def postgres_2pc() -> Pipeline:
    """A v2 whose sink appends through PostgreSQL 2PC: it cannot remove committed rows."""
    p = Pipeline("pg-rollback")
    (p.source(GeneratorSource(10, num_keys=2), uid="generator")
      .sink(PostgresSink(os.environ.get("ROLLBACK_PG_URL", "postgresql://nobody@127.0.0.1:1/x"),
                         "orders"), uid="orders-2pc"))
    return p


def postgres_upsert() -> Pipeline:
    """A green whose PostgreSQL sink upserts: fenced mode (exactly-once blue-green) refuses it."""
    p = Pipeline("pg-upsert")
    (p.source(GeneratorSource(10, num_keys=2), uid="generator")
      .sink(PostgresSink("postgresql://nobody@127.0.0.1:1/x", "totals", mode="upsert",
                         key=["key"]), uid="totals-upsert"))
    return p
