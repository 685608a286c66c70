"""DeltaTableSource / IcebergTableSource: a table's data files as splits, read once under
failures (bounded), and new commits followed while the job runs (unbounded). The Delta
table the pipeline writes is read back by Spark, as its users would."""

import time

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pipelines import (
    Background,
    FaultPlan,
    RunningSum,
    check_exactly_once,
    check_exactly_once_rows,
    read_committed,
)

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    ConfigurationError,
    FileSink,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
from airflow_checkpoint_provider.engine.connectors.lakehouse.table_source import (
    DeltaTableSource,
    IcebergTableSource,
)

pytestmark = pytest.mark.slow
COMMITS, PER_COMMIT, KEYS = 6, 400, 8


def commit_rows(i):
    ids = list(range(i * PER_COMMIT, (i + 1) * PER_COMMIT))
    return pa.table({"id": pa.array(ids, pa.int64()), "key": [f"k{n % KEYS}" for n in ids],
                     "value": pa.array([n % 5 for n in ids], pa.int64())})


def expected(n_commits):
    per_key: dict = {}
    for n in range(n_commits * PER_COMMIT):
        e = per_key.setdefault(f"k{n % KEYS}", {"ids": set(), "sum": 0})
        e["ids"].add(n)
        e["sum"] += n % 5
    return per_key


def pipeline(root, source, faults=None, sink=None):
    p = Pipeline("tables", checkpoint=CheckpointConfig(interval_ms=150, directory=str(root / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=20, delay_ms=0),
                 metadata_url=f"sqlite:///{root}/meta.db", batch_size=128)
    (p.source(source, uid="table", parallelism=2)
      .key_by("key").process(RunningSum(faults), uid="sum", parallelism=2)
      .sink(sink or FileSink(str(root / "out")), uid="out"))
    return p


@pytest.mark.timeout(240)
def test_delta_table_read_once_under_failures_and_output_read_by_spark(tmp_path):
    table = str(tmp_path / "events")
    for i in range(COMMITS):
        write_deltalake(table, commit_rows(i), mode="append")
    faults = FaultPlan(str(tmp_path / "faults"), [("record", 300), ("kill", 1300),
                                                  ("record", 2100)])
    out = str(tmp_path / "sums")
    result = pipeline(tmp_path, DeltaTableSource(table), faults, DeltaSink(out)).run()
    assert result.status == "FINISHED" and len(faults.fired()) == 3
    # Spark reads the Delta table through delta-rs -> Arrow -> DataFrame
    from deltalake import DeltaTable

    from airflow_checkpoint_provider.engine.runners.spark import session_for

    spark = session_for("local[1]", "read-delta-output")
    try:
        df = spark.createDataFrame(DeltaTable(out).to_pandas())
        assert df.count() == COMMITS * PER_COMMIT
        rows = [r.asDict() for r in df.collect()]
    finally:
        spark.stop()
    check_exactly_once_rows(rows, expected(COMMITS))


@pytest.mark.timeout(240)
def test_following_a_delta_table_reads_each_new_commit_once(tmp_path):
    table = str(tmp_path / "events")
    write_deltalake(table, commit_rows(0), mode="append")
    bg = Background(pipeline(tmp_path, DeltaTableSource(table, monitor_interval=0.1)))
    job = bg.wait_running()
    for i in range(1, COMMITS):
        write_deltalake(table, commit_rows(i), mode="append")
        time.sleep(0.2)
    deadline = time.monotonic() + 90
    while len({r["id"] for r in read_committed(str(tmp_path / "out"))}) < COMMITS * PER_COMMIT:
        assert time.monotonic() < deadline, "the new commits were not all read"
        time.sleep(0.2)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED" and bg.result().status == "STOPPED"
    check_exactly_once(str(tmp_path / "out"), expected(COMMITS))


@pytest.mark.timeout(240)
def test_iceberg_table_is_read_once_under_failures(tmp_path):
    from pyiceberg.catalog import load_catalog

    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db",
               "warehouse": f"file://{tmp_path}/wh"}
    cat = load_catalog("db", **catalog)
    cat.create_namespace("db")
    t = cat.create_table("db.events", schema=commit_rows(0).schema)
    for i in range(COMMITS):
        t.append(commit_rows(i))
    faults = FaultPlan(str(tmp_path / "faults"), [("kill", 900), ("record", 1800)])
    result = pipeline(tmp_path, IcebergTableSource("db.events", catalog=catalog), faults).run()
    assert result.status == "FINISHED" and len(faults.fired()) == 2
    check_exactly_once(str(tmp_path / "out"), expected(COMMITS))


def test_unsupported_tables_and_options_are_refused(tmp_path):
    table = str(tmp_path / "parted")
    write_deltalake(table, commit_rows(0), mode="append", partition_by=["key"])
    with pytest.raises(ConfigurationError, match="partitioned Delta tables are not supported"):
        DeltaTableSource(table).splits()
    with pytest.raises(ConfigurationError, match="cannot be combined"):
        DeltaTableSource(table, version=0, monitor_interval=1)
    with pytest.raises(ConfigurationError, match="only local tables"):
        DeltaTableSource("s3://bucket/t")
