"""The operators' own counters -- a regular join's ``dropped_retractions`` (retractions of
rows it does not hold) and ``expired_rows`` (state TTL) -- reach the Prometheus endpoint
(``ckpt_operator_counter_total{operator, counter}``) and every checkpoint's task stats
(``counters``), as the late records of windows do."""

from __future__ import annotations

import time

import pytest
from pipelines import Background, metric_value, scrape_metrics
from upsert_materializer_pipelines import counting_join_pipeline

from airflow_checkpoint_provider.engine.runners.jobmaster.metrics import JobMetrics


def test_operator_counter_series_counts_increments():
    m = JobMetrics(job_name="j", job_id="id")
    m.on_operator_counter("rj", "dropped_retractions", 0)
    text = m.exposition().decode()
    assert 'ckpt_operator_counter_total{counter="dropped_retractions",job_id="id",' in text
    m.on_operator_counter("rj", "dropped_retractions", 3)
    m.on_operator_counter("rj", "dropped_retractions", 2)
    assert metric_value(m.exposition().decode(), "ckpt_operator_counter_total",
                        operator="rj", counter="dropped_retractions") == 5


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_regular_join_counters_reach_prometheus_and_checkpoint_stats(workdir):
    from spark_cluster import free_port

    port = free_port()
    bg = Background(counting_join_pipeline(str(workdir)), metrics_port=port)
    job = bg.wait_running(min_checkpoints=3)
    try:
        deadline = time.monotonic() + 30
        while True:
            text = scrape_metrics(port)
            dropped = metric_value(text, "ckpt_operator_counter_total", operator="rj",
                                   counter="dropped_retractions")
            expired = metric_value(text, "ckpt_operator_counter_total", operator="rj",
                                   counter="expired_rows")
            if (dropped and expired) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert dropped > 0 and expired > 0, text
        done = [c for c in bg.store.list_checkpoints(job.job_id)
                if c.status in ("COMPLETED", "SUBSUMED")]
        stats = [t["counters"]["rj"] for c in done for t in c.task_stats or ()
                 if "rj" in t.get("counters", {})]
        assert stats and max(s["dropped_retractions"] for s in stats) > 0
        assert set(stats[0]) == {"dropped_retractions", "expired_rows"}
    finally:
        req = bg.request(job.job_id, "CANCEL")
        assert req.status == "SUCCEEDED", req.error
        bg.result(60)
