"""The progress watchdog in a running job (issue 51, item 5): an operator that blocks on
purpose is reported stalled, by name, in ``ckpt jobs --json`` and its text, the metrics
and the checkpoint report, within a bounded time; the job is not failed for it."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner
from pipelines import Background, RunningSum
from pipelines import metric_value as value
from pipelines import scrape_metrics as scrape

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.cli import main

#: the configured stall threshold and the bound within which the stall must be reported
STALL_TIMEOUT_MS = 2000
REPORTED_WITHIN_S = 45.0


class BlockAfter:
    """A map function that passes ``n`` records on, then blocks forever (as a user function
    stuck on a lock or a dead service would)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0

    def __call__(self, record: dict) -> dict:
        self.seen += 1
        while self.seen > self.n:
            time.sleep(0.2)
        return record


def blocking_pipeline(root: str, chained: bool) -> Pipeline:
    """gen -> slow -> out; ``slow`` in its own task (after a rebalance: records queue in
    front of it) or chained to the source (one task: it takes no checkpoint trigger)."""
    p = Pipeline("stalls", checkpoint=CheckpointConfig(
                     interval_ms=200, directory=os.path.join(root, "ckpt"),
                     stall_timeout_ms=STALL_TIMEOUT_MS),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    stream = p.source(GeneratorSource(10**9, num_keys=10, seed=3, splits=1,
                                      records_per_second=1000), uid="gen", parallelism=1)
    if not chained:
        stream = stream.rebalance()
    (stream.map(BlockAfter(1500), uid="slow", parallelism=1)
     .sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


def jobs_json(db: str) -> list[dict]:
    res = CliRunner().invoke(main, ["jobs", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("chained", [False, True], ids=["own-task", "chained-to-source"])
def test_an_operator_that_blocks_is_reported_stalled_by_name(tmp_path, chained):
    from spark_cluster import free_port

    port = free_port()
    root = str(tmp_path)
    db = "sqlite:///" + os.path.join(root, "meta.db")
    bg = Background(blocking_pipeline(root, chained), metrics_port=port)
    try:
        job = bg.wait_running(min_checkpoints=1, timeout=90)
        # progressing: nothing reported
        assert jobs_json(db)[0]["progress_stall"] is None
        deadline = time.monotonic() + REPORTED_WITHIN_S
        stall = None
        while time.monotonic() < deadline:
            row = next(r for r in jobs_json(db) if r["job_id"] == job.job_id)
            stall = row["progress_stall"]
            if stall is not None:
                break
            time.sleep(0.5)
        assert stall is not None, "the stall was not reported in `ckpt jobs --json`"
        assert row["status"] == "RUNNING"  # reported, not failed
        assert stall["operator"] == "slow" and stall["kind"] == "records"
        assert stall["threshold_s"] == STALL_TIMEOUT_MS / 1000
        assert stall["queued"] is None if chained else stall["queued"] > 0
        assert stall["stalled_seconds"] >= STALL_TIMEOUT_MS / 1000 - 1
        assert "'slow'" in stall["detail"]
        # the text listing says it too
        text = CliRunner().invoke(main, ["jobs", "--db", db]).output
        assert "STALLED" in text and "'slow'" in text
        # the metrics name the operator
        metrics = scrape(port)
        assert value(metrics, "ckpt_stalled{", job_id=job.job_id) == 1
        assert value(metrics, "ckpt_stalled_seconds", operator="slow", kind="records") >= 1
        # the checkpoint report shows it
        from airflow_checkpoint_provider.engine.catalog import MetadataStore
        from airflow_checkpoint_provider.engine.lifecycle.report import ReportData, render_html

        store = MetadataStore(db)
        try:
            html = render_html(ReportData.load(store, job.job_id))
        finally:
            store.close()
        assert "Progress stalled" in html and "<b>slow</b>" in html
    finally:
        jobs = [j for j in bg.store.list_jobs(job_name="stalls") if j.status == "RUNNING"]
        for j in jobs:
            bg.request(j.job_id, "CANCEL")
    assert bg.result(timeout=60).status == "CANCELED"


def bursty_pipeline(root: str) -> Pipeline:
    """An event-time keyed job whose source delivers a record every 6 s and is idle in
    between (longer than its stall threshold, 4 s: a loaded test machine can hold a slot
    process back for a second or two)."""
    p = Pipeline("bursts", checkpoint=CheckpointConfig(
                     interval_ms=200, directory=os.path.join(root, "ckpt"),
                     stall_timeout_ms=4000),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(None, num_keys=10, seed=3, splits=1, records_per_second=1 / 6),
              uid="gen", parallelism=1,
              watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp_field="id"))
     .key_by("key")
     .process(RunningSum(), uid="sum", parallelism=2)
     .sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_job_idle_between_bursts_of_input_is_not_reported_stalled(tmp_path):
    from spark_cluster import free_port

    port = free_port()
    root = str(tmp_path)
    db = "sqlite:///" + os.path.join(root, "meta.db")
    bg = Background(bursty_pipeline(root), metrics_port=port)
    try:
        job = bg.wait_running(min_checkpoints=1, timeout=90)
        end = time.monotonic() + 20.0
        while time.monotonic() < end:
            row = next(r for r in jobs_json(db) if r["job_id"] == job.job_id)
            assert row["progress_stall"] is None, row["progress_stall"]
            time.sleep(0.3)
        metrics = scrape(port)
        assert value(metrics, "ckpt_records_in_total", operator="sum") > 0
        assert value(metrics, "ckpt_stalled{", job_id=job.job_id) == 0
    finally:
        for j in bg.store.list_jobs(job_name="bursts"):
            if j.status == "RUNNING":
                bg.request(j.job_id, "CANCEL")
    assert bg.result(timeout=60).status == "CANCELED"
