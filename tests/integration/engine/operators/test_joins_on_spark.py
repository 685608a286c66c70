"""Joins on the Spark runner (local[4]): the co-process, left outer interval join and window
join pipeline of tests/support/join_pipelines.py, with a slot SIGKILLed while it joins (and an
exception injected on a record), commits exactly the output of the plain Python reference
(which a failure-free run commits too: tests/integration/engine/operators/test_joins.py), with the join state on
heap and in RocksDB."""

from __future__ import annotations

import pytest
from join_pipelines import (
    committed_co,
    committed_interval_join,
    committed_window_join,
    expected_co,
    expected_interval_join,
    expected_window_join,
    join_pipeline,
)
from pipelines import FaultPlan

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]


@pytest.fixture(scope="module")
def local4():
    """One local[4] session for both state backends' jobs (a SparkContext start less; the
    SIGKILL ends a slot's Python worker, not the session, and each job ends before the
    next starts)."""
    from airflow_checkpoint_provider.engine.runners.spark import session_for

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # what the spark_env fixture sets per test
        spark = session_for("local[4]", "test-joins-local4")
    try:
        yield spark
    finally:
        spark.stop()


@pytest.mark.timeout(420)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_joins_on_spark_local4_are_exactly_once_under_sigkill_of_a_slot(workdir, backend, local4):
    faults = FaultPlan(str(workdir / "faults"), [("kill", 2_500), ("record", 4_500)])
    result = join_pipeline(str(workdir), faults=faults, rate=5_000, state_backend=backend,
                           initial_delay_ms=300).run("spark", spark=local4)
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 2 and result.restarts == len(faults.attempts_hit())
    assert committed_co(str(workdir)) == expected_co()
    assert committed_interval_join(str(workdir)) == expected_interval_join("left")
    assert committed_window_join(str(workdir)) == expected_window_join()
