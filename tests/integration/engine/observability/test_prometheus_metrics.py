"""The Prometheus endpoint of a job: own registry, labels, counters that rise."""

import re
import urllib.request

import pytest

from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.runners.jobmaster.metrics import (
    JobMetrics,
    metrics_port_from_env,
)


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        body = response.read().decode()
    samples = {}
    for line in body.splitlines():
        match = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if match and not line.startswith("#"):
            samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


LABELS = '{job_id="abc123",job_name="orders"}'


def test_endpoint_serves_counters_that_rise_and_gauges_of_the_last_checkpoint():
    metrics = JobMetrics(job_name="orders", job_id="abc123")
    port = metrics.start(0)  # any free port
    try:
        assert port > 0 and metrics.url == f"http://127.0.0.1:{port}/metrics"
        before = _scrape(metrics.url)
        assert before[f"ckpt_checkpoints_completed_total{LABELS}"] == 0

        metrics.on_checkpoint_completed(1, 120, 4096, 1024)
        metrics.on_checkpoint_completed(2, 80, 8192, 2048)
        metrics.on_checkpoint_failed(3)
        metrics.on_restart()
        metrics.on_records("sum", 100, 90)
        metrics.on_records("sum", 50, 45)
        metrics.on_records("gen", 0, 150)
        after = _scrape(metrics.url)
    finally:
        metrics.stop()

    assert after[f"ckpt_checkpoints_completed_total{LABELS}"] == 2
    assert after[f"ckpt_checkpoints_failed_total{LABELS}"] == 1
    assert after[f"ckpt_restarts_total{LABELS}"] == 1
    assert after[f"ckpt_last_checkpoint_duration_ms{LABELS}"] == 80
    assert after[f"ckpt_last_checkpoint_size_bytes{LABELS}"] == 8192
    assert after[f"ckpt_last_checkpoint_checkpointed_size_bytes{LABELS}"] == 2048
    assert after[f"ckpt_last_completed_checkpoint_id{LABELS}"] == 2
    op = '{job_id="abc123",job_name="orders",operator="%s"}'
    assert after["ckpt_records_in_total" + op % "sum"] == 150
    assert after["ckpt_records_out_total" + op % "sum"] == 135
    assert after["ckpt_records_in_total" + op % "gen"] == 0
    assert after["ckpt_records_out_total" + op % "gen"] == 150


def test_each_job_has_its_own_registry_and_stop_frees_the_port():
    first = JobMetrics(job_name="a", job_id="1")
    second = JobMetrics(job_name="b", job_id="2")  # same series names: no duplicate error
    first.on_restart()
    assert b'ckpt_restarts_total{job_id="1",job_name="a"} 1.0' in first.exposition()
    assert b'job_id="1"' not in second.exposition()

    port = first.start(0)
    with pytest.raises(RuntimeError, match="already served"):
        first.start(0)
    first.stop()
    first.stop()  # idempotent
    assert not first.running and first.url is None
    with second:
        assert second.start(port) == port  # the port is free again
        assert _scrape(second.url)['ckpt_restarts_total{job_id="2",job_name="b"}'] == 0
    assert not second.running


def test_coordinator_listener_counts_completed_and_failed_checkpoints():
    from airflow_checkpoint_provider.engine.checkpoint.coordinator import CompletedCheckpoint

    metrics = JobMetrics(job_name="orders", job_id="abc123")
    metrics.checkpoint_listener(5, CompletedCheckpoint(5, "CHECKPOINT", "/c/chk-5", 300, 100, 9),
                                None)
    metrics.checkpoint_listener(6, None, "expired before completing")
    text = metrics.exposition().decode()
    assert f"ckpt_checkpoints_completed_total{LABELS} 1.0" in text
    assert f"ckpt_checkpoints_failed_total{LABELS} 1.0" in text
    assert f"ckpt_last_completed_checkpoint_id{LABELS} 5.0" in text
    assert f"ckpt_last_checkpoint_checkpointed_size_bytes{LABELS} 100.0" in text


def test_record_counts_are_increments():
    with pytest.raises(ValueError, match="increments"):
        JobMetrics(job_name="a", job_id="1").on_records("sum", -1, 0)


def test_metrics_are_off_unless_a_port_is_configured():
    assert metrics_port_from_env({}) is None
    assert metrics_port_from_env({"CKPT_METRICS_PORT": " "}) is None
    assert metrics_port_from_env({"CKPT_METRICS_PORT": "9249"}) == 9249
    with pytest.raises(ConfigurationError, match="not a port number"):
        metrics_port_from_env({"CKPT_METRICS_PORT": "http"})
