"""IcebergSink on pyiceberg's SQL catalog (SQLite) with a local warehouse: exactly-once
appends (one snapshot per subtask and checkpoint, checkpoint id in the snapshot summary)
under seeded failures, compared with the failure-free result; refusals of bad input."""

import pytest
from pipelines import (
    FaultPlan,
    check_exactly_once_rows,
    expected_running_sums,
    open_sink_operator,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    ConfigurationError,
    CorruptCheckpointError,
    JobFailedError,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink

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


def _sink_op(sink, job_id: str, subtask: int = 0, restored=None, attempt: int = 0):
    return open_sink_operator(sink, job_id=job_id, job_name="replay", subtask=subtask,
                              parallelism=2, attempt=attempt, restored=restored)


def _epoch(op, checkpoint_id: int, records: list[dict], keep: dict | None = None) -> list:
    """One checkpoint: the records, the barrier, the commit; ``keep`` gets the staged
    files' bytes (what a crash between the table commit and their removal leaves)."""
    op.process(records)
    state = op.snapshot(checkpoint_id)
    txns = [t for e in state.operator_state if e["checkpoint_id"] == checkpoint_id
            for t in e["transactions"]]
    if keep is not None:
        for t in txns:
            path = f"{op.writer.sink.staging_dir}/{t['staging']}"
            with open(path, "rb") as f:
                keep[path] = f.read()
    op.notify_complete(checkpoint_id)
    return txns


def _expire_all_but_current(root) -> None:
    from datetime import UTC, datetime

    table = load(root, "db.t")
    table.maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    assert len(load(root, "db.t").snapshots()) == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_replayed_transaction_is_recognised_after_its_snapshots_expired(tmp_path, mode):
    """Subtask 0 commits checkpoints 1 and 2, subtask 1 commits after it, the snapshots are
    expired (subtask 0's summaries are gone), then a restore of checkpoint 1 replays its
    transaction whose staged file a crash left behind: the table does not change."""
    import uuid

    key = {"key": ["k"]} if mode == "upsert" else {}
    sink = IcebergSink("db.t", catalog=catalog(tmp_path), mode=mode, **key)
    job = uuid.uuid4().hex
    kept: dict = {}
    op0 = _sink_op(sink, job)
    first = _epoch(op0, 1, [{"k": 1, "v": 1}, {"k": 2, "v": 2}], keep=kept)
    _epoch(op0, 2, [{"k": 1, "v": 10}])
    op1 = _sink_op(sink, job, subtask=1)
    _epoch(op1, 2, [{"k": 3, "v": 3}])
    op0.close()
    op1.close()
    before = sorted(load(tmp_path, "db.t").scan().to_arrow().to_pylist(), key=lambda r: r["k"])
    _expire_all_but_current(tmp_path)
    for path, data in kept.items():  # the staged file of checkpoint 1 is still there
        with open(path, "wb") as f:
            f.write(data)
    replay = _sink_op(sink, job, restored=[{"checkpoint_id": 1, "transactions": first}],
                      attempt=1)
    replay.close()
    after = sorted(load(tmp_path, "db.t").scan().to_arrow().to_pylist(), key=lambda r: r["k"])
    assert after == before
    assert len(load(tmp_path, "db.t").snapshots()) == 1, "nothing was committed again"
    expected = ([(1, 10), (2, 2), (3, 3)] if mode == "upsert"
                else [(1, 1), (1, 10), (2, 2), (3, 3)])
    assert sorted((r["k"], r["v"]) for r in after) == expected
