"""The Prometheus endpoint of a running job: checkpoint and record counters rise."""

import time

import pytest
from pipelines import Background, versioned_pipeline
from pipelines import metric_value as value
from pipelines import scrape_metrics as scrape


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_metrics_endpoint_of_a_running_job_shows_counters_rising(tmp_path):
    from spark_cluster import free_port

    port = free_port()
    bg = Background(versioned_pipeline(str(tmp_path), "v1", num_records=10**9, rate=3000,
                                       interval_ms=200), metrics_port=port)
    job = bg.wait_running(min_checkpoints=1)
    first = scrape(port)
    time.sleep(2.5)
    second = scrape(port)
    assert f'job_id="{job.job_id}"' in second
    assert value(second, "ckpt_checkpoints_completed_total") > value(first, "ckpt_checkpoints_completed_total") > 0
    assert value(second, "ckpt_records_out_total", operator="gen") > value(first, "ckpt_records_out_total", operator="gen")
    assert value(second, "ckpt_records_in_total", operator="sum") > 0
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"
    with pytest.raises(OSError):
        scrape(port)  # the endpoint ends with the job
