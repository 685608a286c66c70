"""How long a job on a cluster master waits for executors offering its slots: 60 s unless
``CKPT_SPARK_SLOT_WAIT_S`` says otherwise (executor JVMs registered later than 60 s on a
loaded 2-core machine, failing a parallelism-3 job with "the Spark cluster offers 2 cores")."""

from __future__ import annotations

from airflow_checkpoint_provider.engine.runners.spark import SLOT_WAIT_ENV, SparkRunner


def test_the_slot_wait_defaults_to_60_s_and_follows_the_environment(monkeypatch):
    monkeypatch.delenv(SLOT_WAIT_ENV, raising=False)
    assert SLOT_WAIT_ENV == "CKPT_SPARK_SLOT_WAIT_S"
    assert SparkRunner(master="spark://127.0.0.1:7077").slot_wait_seconds == 60.0
    monkeypatch.setenv(SLOT_WAIT_ENV, "240")
    assert SparkRunner(master="spark://127.0.0.1:7077").slot_wait_seconds == 240.0
    # an explicit argument wins
    assert SparkRunner(master="spark://127.0.0.1:7077",
                       slot_wait_seconds=5).slot_wait_seconds == 5
