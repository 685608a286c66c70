"""Fixtures of the engine tests that compare against Spark Structured Streaming."""

from __future__ import annotations

import pytest

#: the SS settings of the comparisons: two shuffle partitions (a few thousand rows), UTC,
#: and no no-data micro-batches (SS would run one after every batch only to evict state
#: with the advanced watermark; the next batch evicts with the same watermark, so the
#: output and the rows dropped as late are the same, in fewer batches of ~1-4 CPU-s each)
SS_CONF = {"spark.sql.shuffle.partitions": "2",
           "spark.sql.session.timeZone": "UTC",
           "spark.sql.streaming.noDataMicroBatches.enabled": "false",
           "spark.ui.enabled": "false"}


@pytest.fixture(scope="session")
def ss_spark():
    """One local[2] Spark session for the Structured Streaming comparisons
    (tests/engine/test_joins_vs_structured_streaming.py and
    test_windows_vs_structured_streaming.py): a session start is ~15 CPU-s on this loaded
    machine. tests/conftest.py puts its users in one xdist group (``spark-ss``), so one
    worker starts it once. Each test stops the queries it starts."""
    from airflow_checkpoint_provider.engine.runners.spark import session_for

    with pytest.MonkeyPatch.context() as mp:  # what the spark_env fixture sets per test
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        session = session_for("local[2]", "engine-vs-ss", extra_conf=SS_CONF)
    try:
        yield session
    finally:
        session.stop()
