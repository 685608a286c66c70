"""Checkpoints on S3 end to end: a real S3-compatible server (moto_server) on 127.0.0.1.

The pipelines are the shared running-sum ones; only the checkpoint directory moves to
``s3://<bucket>/ckpt``. Output (FileSink) and the metadata DB stay local.
"""

import dataclasses
import threading
import time

import boto3
import pytest
from pipelines import FaultPlan, check_exactly_once, expected_running_sums, running_sum_pipeline

from airflow_checkpoint_provider.engine import JobFailedError, RestartStrategy
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

NUM_KEYS, SEED = 50, 7


def on_s3(p, bucket: str):
    """Move a pipeline's checkpoints to ``s3://<bucket>/ckpt``."""
    p.checkpoint = dataclasses.replace(p.checkpoint, directory=f"s3://{bucket}/ckpt")
    return p


def bucket_keys(endpoint_url: str, bucket: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1")
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys.extend(o["Key"] for o in page.get("Contents") or [])
    return keys


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failures_at_seeded_points_commit_exactly_once_with_checkpoints_on_s3(workdir, s3_bucket):
    n = 20_000
    points = [("record", 150), ("snapshot", 2), ("notify", 3), ("record", 7000),
              ("snapshot", 6), ("record", 16_000)]
    faults = FaultPlan(str(workdir / "faults"), points)
    p = on_s3(running_sum_pipeline(str(workdir), num_records=n, num_keys=NUM_KEYS, seed=SEED,
                                   faults=faults, rate=5000, interval_ms=150,
                                   initial_delay_ms=600), s3_bucket)
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(points), sorted(faults.fired())
    assert result.restarts == len(faults.attempts_hit())
    assert result.latest_checkpoint.startswith(f"s3://{s3_bucket}/ckpt/running-sum/{result.job_id}/chk-")
    check_exactly_once(str(workdir / "out"), expected_running_sums(n, NUM_KEYS, SEED))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_retention_leaves_only_the_retained_checkpoints_in_the_bucket(workdir, s3_bucket, s3_server):
    p = on_s3(running_sum_pipeline(str(workdir), num_records=20_000, rate=2000, interval_ms=100,
                                   retained=3), s3_bucket)
    result = p.run()
    assert result.status == "FINISHED"
    assert result.checkpoints_completed >= 8  # retention deleted at least 5 (CI saw 10)
    rows = MetadataStore(p.metadata_url).list_checkpoints(result.job_id)
    completed = {r.checkpoint_id for r in rows if r.status == "COMPLETED"}
    assert len(completed) == 3
    assert all(r.status in ("COMPLETED", "SUBSUMED", "FAILED") for r in rows)
    job_prefix = f"ckpt/running-sum/{result.job_id}/"
    keys = bucket_keys(s3_server.endpoint_url, s3_bucket)
    assert keys and all(k.startswith(job_prefix) for k in keys), keys[:5]
    in_bucket = {k[len(job_prefix):].split("/", 1)[0] for k in keys}
    assert in_bucket == {f"chk-{c}" for c in completed}
    for c in completed:  # each retained checkpoint is complete and loads
        assert f"{job_prefix}chk-{c}/_metadata" in keys
        assert load_snapshot(f"s3://{s3_bucket}/{job_prefix}chk-{c}").checkpoint_id == c


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_s3_outage_declines_the_checkpoint_and_the_job_keeps_running(workdir, s3_bucket,
                                                                     s3_server, monkeypatch):
    from s3_server import TcpProxy

    # S3 reached through a proxy that can be stopped (endpoint down) without losing data;
    # few attempts and short timeouts so that an upload fails within ~2 s in the outage
    proxy = TcpProxy(("127.0.0.1", s3_server.port)).start()
    monkeypatch.setenv("CKPT_S3_ENDPOINT_URL", proxy.endpoint_url)
    monkeypatch.setenv("CKPT_S3_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("CKPT_S3_TIMEOUT_S", "1")
    n = 30_000
    # a refused connection fails a checkpoint at once: the 3 s outage at 200 ms intervals
    # fails ~15 checkpoints in a row, more than the default of 10 tolerated
    p = on_s3(running_sum_pipeline(str(workdir), num_records=n, rate=3000, interval_ms=200,
                                   restart=RestartStrategy.none(), tolerable_failures=50),
              s3_bucket)
    store = MetadataStore(p.metadata_url)
    outage: dict = {}

    def cut_s3_after_two_checkpoints():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "done" not in outage:
            jobs = store.list_jobs(job_name=p.name)
            done = [c for j in jobs for c in store.list_checkpoints(j.job_id)
                    if c.status in ("COMPLETED", "SUBSUMED")]
            if len(done) >= 2:
                outage["before"] = max(c.checkpoint_id for c in done)
                proxy.stop()
                time.sleep(3.0)
                proxy.start()
                outage["ended"] = True
                return
            time.sleep(0.05)

    cutter = threading.Thread(target=cut_s3_after_two_checkpoints, daemon=True)
    cutter.start()
    try:
        result = p.run()
    finally:
        outage["done"] = True
        cutter.join(10)
        proxy.start()
    assert outage.get("ended"), "the outage did not happen while the job ran"
    assert result.status == "FINISHED" and result.restarts == 0
    assert len(store.list_attempts(result.job_id)) == 1
    rows = store.list_checkpoints(result.job_id)
    failed = [r for r in rows if r.status == "FAILED"]
    assert failed, [(r.checkpoint_id, r.status) for r in rows]
    assert all(r.failure_reason for r in failed)
    assert any(f"s3://{s3_bucket}/" in r.failure_reason for r in failed), failed[0].failure_reason
    assert all(r.checkpoint_id > outage["before"] for r in failed)
    later = [r for r in rows if r.status in ("COMPLETED", "SUBSUMED")
             and r.checkpoint_id > max(f.checkpoint_id for f in failed)]
    assert later, "no checkpoint completed after the outage"
    assert result.latest_checkpoint.startswith(f"s3://{s3_bucket}/")
    check_exactly_once(str(workdir / "out"), expected_running_sums(n, NUM_KEYS, SEED))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_new_job_restores_from_a_checkpoint_on_s3(workdir, s3_bucket):
    n = 15_000
    # the first job fails for good mid-stream, when checkpoint 2 completed on S3 but before
    # the sink committed its output (the restored job must commit it, exactly once)
    faults = FaultPlan(str(workdir / "faults"), [("notify", 2)])
    first = on_s3(running_sum_pipeline(str(workdir), num_records=n, rate=3000, interval_ms=150,
                                       faults=faults, restart=RestartStrategy.none()), s3_bucket)
    with pytest.raises(JobFailedError, match="injected failure notify 2") as info:
        first.run()
    r1 = info.value.result
    assert r1.checkpoints_completed >= 2
    location = r1.latest_checkpoint
    assert location.startswith(f"s3://{s3_bucket}/ckpt/running-sum/{r1.job_id}/chk-")
    # a second job (same output) restores that checkpoint and completes the stream
    second = on_s3(running_sum_pipeline(str(workdir), num_records=n, interval_ms=150,
                                        faults=faults), s3_bucket)
    r2 = second.run(restore=location)
    assert r2.status == "FINISHED" and r2.restored_from == location
    assert MetadataStore(second.metadata_url).get_job(r2.job_id).restored_from == location
    check_exactly_once(str(workdir / "out"), expected_running_sums(n, NUM_KEYS, SEED))
    assert load_snapshot(location).checkpoint_id == int(location.rsplit("-", 1)[1]), \
        "NO_CLAIM: the restored checkpoint stays"
