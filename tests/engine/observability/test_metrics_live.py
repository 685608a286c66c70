"""The Prometheus endpoint of a running job: checkpoint and record counters rise."""

import time
import urllib.request

import pytest
from pipelines import Background, versioned_pipeline


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def value(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


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
