"""The progress watchdog in a running job (issue 51, item 5): an operator that blocks on
purpose is reported stalled, by name, in ``ckpt jobs --json`` and its text, the metrics
and the checkpoint report, within a bounded time; the job is not failed for it."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner
from pipelines import Background
from pipelines import metric_value as value
from pipelines import scrape_metrics as scrape

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
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


def blocking_pipeline(root: str) -> Pipeline:
    p = Pipeline("stalls", checkpoint=CheckpointConfig(
                     interval_ms=200, directory=os.path.join(root, "ckpt"),
                     stall_timeout_ms=STALL_TIMEOUT_MS),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    (p.source(GeneratorSource(10**9, num_keys=10, seed=3, splits=1, records_per_second=1000),
              uid="gen", parallelism=1)
     .rebalance()
     .map(BlockAfter(1500), uid="slow", parallelism=1)
     .sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


def jobs_json(db: str) -> list[dict]:
    res = CliRunner().invoke(main, ["jobs", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_operator_that_blocks_is_reported_stalled_by_name(tmp_path):
    from spark_cluster import free_port

    port = free_port()
    root = str(tmp_path)
    db = "sqlite:///" + os.path.join(root, "meta.db")
    bg = Background(blocking_pipeline(root), metrics_port=port)
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
        assert stall["queued"] > 0 and stall["threshold_s"] == STALL_TIMEOUT_MS / 1000
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
