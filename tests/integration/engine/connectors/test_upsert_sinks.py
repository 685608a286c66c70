"""Upsert sinks (Delta MERGE, Iceberg copy-on-write, PostgreSQL ON CONFLICT/DELETE in the
prepared transaction) fed a changelog: under seeded failures (exceptions, SIGKILLed slots,
a failed snapshot, a failure between a checkpoint's completion and the sink's commit) the
table equals the oracle (the changelog applied to a dict per key) and a failure-free run's
table; the retracting aggregate's changelog upserted per user; refusals of bad input."""

from __future__ import annotations

import psycopg
import pytest
from changelog_pipelines import (
    expected_orders,
    expected_per_user,
    orders_pipeline,
    per_user_pipeline,
)
from pipelines import FaultPlan
from postgres_pipelines import PREPARED_HERE

from airflow_checkpoint_provider.engine import ConfigurationError, JobFailedError
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink
from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

pytestmark = pytest.mark.slow
N = 6_000
FAULTS = [("record", 700), ("kill", 2_500), ("notify", 3), ("snapshot", 5), ("kill", 4_800)]
ORDER_COLUMNS = ["order", "user", "amount", "version", "id"]


def _catalog(root) -> dict:
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/wh"}


class Target:
    """One upsert sink kind: makes a sink on a fresh table and reads the table back."""

    def __init__(self, kind: str, root, postgres_server=None) -> None:
        self.kind, self.root, self.pg = kind, root, postgres_server
        self.n = 0

    def sink(self, key: str, columns: list[str]):
        self.n += 1
        name = f"t{self.n}"
        if self.kind == "delta":
            self.where = str(self.root / name)
            return DeltaSink(self.where, mode="upsert", key=[key])
        if self.kind == "iceberg":
            self.where = f"db.{name}"
            return IcebergSink(self.where, catalog=_catalog(self.root), mode="upsert", key=[key])
        self.where = self.pg.create_database()
        types = {"order": "bigint PRIMARY KEY", "user": "text", "amount": "bigint",
                 "version": "bigint", "id": "bigint", "orders": "bigint", "total": "bigint"}
        if key == "user":
            types["user"] = "text PRIMARY KEY"
        with psycopg.connect(libpq_dsn(self.where), autocommit=True) as conn:
            conn.execute("CREATE TABLE t ({})".format(
                ", ".join(f'"{c}" {types[c]}' for c in columns)))
        return PostgresSink(self.where, "t", columns, mode="upsert", key=[key])

    def rows(self, where: str | None = None) -> list[dict]:
        where = where or self.where
        if self.kind == "delta":
            from deltalake import DeltaTable

            return DeltaTable(where).to_pyarrow_table().to_pylist()
        if self.kind == "iceberg":
            from pyiceberg.catalog import load_catalog

            return load_catalog("db", **_catalog(self.root)).load_table(where).scan().to_arrow().to_pylist()
        with psycopg.connect(libpq_dsn(where)) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute("SELECT * FROM t")
            rows = cur.fetchall()
            cur.execute(PREPARED_HERE)
            assert cur.fetchall() == [], "nothing left prepared"
            return rows


@pytest.fixture(params=["delta", "iceberg", "postgres"])
def target(request, workdir):
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    return Target(request.param, workdir, pg)


def _by(rows: list[dict], key: str) -> dict:
    out = {r[key]: r for r in rows}
    assert len(out) == len(rows), f"duplicate {key} rows in the table"
    return out


@pytest.mark.timeout(400)
def test_the_table_equals_the_changelog_applied_once_under_failures(workdir, target):
    clean_sink = target.sink("order", ORDER_COLUMNS)
    assert orders_pipeline(str(workdir / "clean"), clean_sink, n=N).run().status == "FINISHED"
    clean = target.rows()
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    p = orders_pipeline(str(workdir / "faulty"), target.sink("order", ORDER_COLUMNS), n=N,
                        rate=2_000, faults=faults)
    result = p.run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts >= len(faults.attempts_hit()) >= 2
    expected = expected_orders(N)
    assert 0 < len(expected) < N // 3, "the changelog deletes some orders and keeps others"
    got = _by(target.rows(), "order")
    assert got == expected
    assert _by(clean, "order") == expected, "the failure-free run agrees"


@pytest.mark.timeout(400)
def test_the_retracting_aggregate_upserts_live_totals_per_user_under_failures(workdir, target):
    faults = FaultPlan(str(workdir / "faults"), [("record", 900), ("kill", 3_300)])
    p = per_user_pipeline(str(workdir), target.sink("user", ["user", "orders", "total"]), n=N,
                          rate=2_000, faults=faults)
    assert p.run().status == "FINISHED" and len(faults.fired()) == 2
    got = {u: {"orders": r["orders"], "total": r["total"]}
           for u, r in _by(target.rows(), "user").items()}
    assert got == expected_per_user(N)


@pytest.mark.timeout(200)
def test_a_record_without_the_key_column_fails_naming_sink_and_column(workdir, target):
    from changelog_pipelines import _pipeline, delete_without_order

    from airflow_checkpoint_provider.engine import GeneratorSource, RestartStrategy

    sink = target.sink("order", ORDER_COLUMNS)
    p = _pipeline(str(workdir), "no-key", None)
    p.restart_strategy = RestartStrategy.none()
    (p.source(GeneratorSource(50, num_keys=3), uid="gen")
      .map(delete_without_order, uid="strip")
      .sink(sink, uid="upserts"))
    with pytest.raises(JobFailedError, match=r"'upserts'.*key column 'order'"):
        p.run()


def test_upsert_without_key_is_refused_at_definition_time(workdir):
    for make in (lambda: DeltaSink(str(workdir / "d"), mode="upsert"),
                 lambda: IcebergSink("db.t", catalog=_catalog(workdir), mode="upsert"),
                 lambda: PostgresSink("postgresql://x/y", "t", mode="upsert")):
        with pytest.raises(ConfigurationError, match="needs key="):
            make()
    with pytest.raises(ConfigurationError, match="key= is for mode='upsert'"):
        DeltaSink(str(workdir / "d"), key=["id"])
    with pytest.raises(ConfigurationError, match="mode 'merge' is unknown"):
        DeltaSink(str(workdir / "d"), mode="merge", key=["id"])
