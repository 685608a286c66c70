"""IcebergSink on pyiceberg's SQL catalog (SQLite) with a local warehouse: exactly-once
appends (one snapshot per subtask and checkpoint, checkpoint id in the snapshot summary)
under seeded failures, compared with the failure-free result; refusals of bad input."""

import pytest
from pipelines import (
    FaultPlan,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    ConfigurationError,
    CorruptCheckpointError,
    JobFailedError,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.iceberg import IcebergSink

N, KEYS, SEED = 12_000, 40, 7
pytestmark = pytest.mark.slow
FAULTS = [("record", 1_500), ("kill", 5_000), ("notify", 3), ("snapshot", 5), ("kill", 9_500)]


def catalog(root) -> dict:
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/wh"}


def load(root, identifier="db.sums"):
    from pyiceberg.catalog import load_catalog

    return load_catalog("db", **catalog(root)).load_table(identifier)


@pytest.mark.timeout(300)
def test_every_row_is_appended_exactly_once_under_failures(workdir):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    sink = IcebergSink("db.sums", catalog=catalog(workdir))
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, rate=4_000,
                             faults=faults, interval_ms=150, sink=sink)
    result = p.run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    table = load(workdir)
    check_exactly_once_rows(table.scan().to_arrow().to_pylist(),
                            expected_running_sums(N, KEYS, SEED))
    summaries = [s.summary for s in table.snapshots()]
    assert summaries and all(s.get("ckpt.operator_uid") == "out" for s in summaries)
    assert len({(s["ckpt.app_id"], s["ckpt.checkpoint_id"]) for s in summaries}) == len(summaries), \
        "no epoch was appended twice"


@pytest.mark.timeout(120)
def test_records_that_do_not_fit_the_table_fail_naming_the_column(workdir):
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    cat = load_catalog("db", **catalog(workdir))
    cat.create_namespace("db")
    cat.create_table("db.narrow", schema=pa.schema([("id", pa.int64())]))
    p = running_sum_pipeline(str(workdir), num_records=200, num_keys=4, interval_ms=None,
                             sink=IcebergSink("db.narrow", catalog=catalog(workdir)),
                             restart=RestartStrategy.none())
    with pytest.raises(JobFailedError, match="column 'key' is not in the table"):
        p.run()
    assert load(workdir, "db.narrow").scan().to_arrow().num_rows == 0


def test_bad_configuration_and_restored_transactions_are_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="not 'namespace.table'"):
        IcebergSink("sums", catalog=catalog(tmp_path))
    with pytest.raises(ConfigurationError, match="give staging_dir="):
        IcebergSink("db.sums", catalog={"type": "sql", "uri": "sqlite://", "warehouse": "s3://b/w"})
    sink = IcebergSink("db.sums", catalog=catalog(tmp_path))
    with pytest.raises(CorruptCheckpointError, match="staging"):
        sink.check_restored_transactions([{"staging": "../x", "app_id": "ckpt-j-out-0",
                                           "version": 1}], location="chk-1")


@pytest.mark.timeout(240)
def test_sql_catalog_on_postgresql(workdir, postgres_server):
    cat = {"type": "sql", "uri": postgres_server.create_database(),
           "warehouse": f"file://{workdir}/wh"}
    faults = FaultPlan(str(workdir / "faults"), [("kill", 2_500), ("notify", 3)])
    p = running_sum_pipeline(str(workdir), num_records=6_000, num_keys=KEYS, seed=SEED,
                             rate=4_000, faults=faults, interval_ms=200,
                             sink=IcebergSink("db.sums", catalog=cat))
    assert p.run().status == "FINISHED" and len(faults.fired()) == 2
    from pyiceberg.catalog import load_catalog

    table = load_catalog("db", **cat).load_table("db.sums")
    check_exactly_once_rows(table.scan().to_arrow().to_pylist(),
                            expected_running_sums(6_000, KEYS, SEED))


@pytest.mark.timeout(240)
def test_warehouse_on_s3(workdir, s3_server, s3_bucket):
    cat = {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db",
           "warehouse": f"s3://{s3_bucket}/wh", "s3.endpoint": s3_server.endpoint_url,
           "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
           "s3.region": "us-east-1"}
    faults = FaultPlan(str(workdir / "faults"), [("kill", 2_500), ("notify", 3)])
    sink = IcebergSink("db.sums", catalog=cat, staging_dir=f"s3://{s3_bucket}/staging")
    p = running_sum_pipeline(str(workdir), num_records=6_000, num_keys=KEYS, seed=SEED,
                             rate=4_000, faults=faults, interval_ms=200, sink=sink)
    assert p.run().status == "FINISHED" and len(faults.fired()) == 2
    from pyiceberg.catalog import load_catalog

    table = load_catalog("db", **cat).load_table("db.sums")
    assert table.location().startswith(f"s3://{s3_bucket}/wh")
    check_exactly_once_rows(table.scan().to_arrow().to_pylist(),
                            expected_running_sums(6_000, KEYS, SEED))
