"""The Spark reader: a DataFrame over a snapshot's keyed state, one partition per key group
range, read by the executors."""

import pytest

from airflow_checkpoint_provider.engine.runners.spark import session_for
from airflow_checkpoint_provider.engine.state.keygroups import key_group_range_for
from airflow_checkpoint_provider.engine.state_io import (
    UnknownStateError,
    read_state_table,
    state_dataframe,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]


@pytest.fixture(scope="module")
def spark():
    session = session_for("local[2]", "test-state-tables")
    yield session
    session.stop()


@pytest.mark.timeout(300)
def test_the_python_workers_of_a_session_start_with_the_slot_runtime_imported(spark):
    """First in the module: its workers are fresh. pyspark's own daemon does not import the
    slot runtime; the Spark runner's imports it once, before it forks the workers."""
    def probe(_):
        import sys

        import pyspark

        yield "airflow_checkpoint_provider.engine.runtime.host.slot" in sys.modules, pyspark.__file__

    got = spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()
    assert [imported for imported, _ in got] == [True] * 2
    # the installed pyspark (bytecode), not Spark's source-only pyspark.zip
    assert all(".zip" not in where for _, where in got), got


@pytest.mark.timeout(300)
def test_dataframe_is_partitioned_by_key_group_range_and_matches_the_table(heap_checkpoint,
                                                                           spark):
    from pyspark.sql.functions import spark_partition_id

    df = state_dataframe(spark, heap_checkpoint, "sum", partitions=4)
    assert df.columns == ["key", "key_group", "state", "value"]
    rows = df.withColumn("part", spark_partition_id()).collect()
    for r in rows:
        assert r["key_group"] in key_group_range_for(r["part"], 4, 128)
    assert {r["part"] for r in rows} == {0, 1, 2, 3}
    expected = read_state_table(heap_checkpoint, "sum").to_pylist()
    got = [{k: r[k] for k in ("key", "key_group", "state", "value")} for r in rows]
    key = lambda r: (r["key"], r["state"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    with pytest.raises(UnknownStateError, match="no state 'total'"):
        state_dataframe(spark, heap_checkpoint, "sum", "total")
