"""The stability gate on real windowed jobs (issue 54 item 5): 10 s tumbling event-time
windows whose event time follows the wall clock, so results leave in one burst every 10 s.
Blue and a healthy green pass (green's input rate against blue's, its watermark advancing);
a stalled green -- its input keeps arriving, but every record carries the same event time,
so the watermark and the output stand still -- fails on progress."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import pytest
from pipelines import Background

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
    TumblingWindows,
    WatermarkStrategy,
)
from airflow_checkpoint_provider.engine.lifecycle.stability import (
    StabilityCriteria,
    assess_stability,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RATE = 100  # records/s; event time advances 1000 / RATE ms per record: the wall clock's pace


def windowed(root: str, name: str, *, stalled: bool = False) -> Pipeline:
    p = Pipeline(name, checkpoint=CheckpointConfig(interval_ms=1000,
                                                   directory=os.path.join(root, "ckpt")),
                 restart_strategy=RestartStrategy.none(),
                 metadata_url="sqlite:///" + os.path.join(root, "meta.db"))
    source = GeneratorSource(None, num_keys=10, seed=1, splits=1, records_per_second=RATE,
                             event_time_step_ms=0 if stalled else 1000 / RATE,
                             start_ms=int(time.time() * 1000))
    (p.source(source, uid="gen", parallelism=1,
              watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                  500, timestamp_field="ts").with_emit_interval(100))
     .key_by("key").window(TumblingWindows(10_000))
     .aggregate(uid="win10s", parallelism=1, n="count")
     .map(lambda r: r)
     .sink(FileSink(os.path.join(root, f"out-{name}")), uid="out"))
    return p


def test_a_healthy_windowed_job_passes_the_gate_and_a_stalled_one_fails(tmp_path):
    root = str(tmp_path)
    jobs = {name: Background(windowed(root, name, stalled=name == "stalled"))
            for name in ("blue", "green", "stalled")}
    try:
        ids = {name: bg.wait_running(timeout=120).job_id for name, bg in jobs.items()}
        since = datetime.now(UTC)
        time.sleep(22)  # two firings of a 10 s window
        until = datetime.now(UTC)
        store = jobs["blue"].store
        criteria = StabilityCriteria(window_s=(until - since).total_seconds())
        green = assess_stability(store, ids["green"], since=since, until=until,
                                 criteria=criteria, baseline_job_id=ids["blue"])
        stalled = assess_stability(store, ids["stalled"], since=since, until=until,
                                   criteria=criteria, baseline_job_id=ids["blue"])
    finally:
        for bg in jobs.values():
            for job in bg.store.list_jobs(job_name=bg.pipeline.name):
                if not job.is_terminal:
                    bg.store.submit_control_request(job.job_id, "CANCEL", {})
        for bg in jobs.values():
            bg.thread.join(60)
    checks = {c.name: c for c in green.checks}
    assert green.ok, green.describe()
    assert "slowest source 'gen'" in checks["throughput"].detail
    assert "watermark advanced" in checks["progress"].detail, green.describe()
    stalled_checks = {c.name: c for c in stalled.checks}
    assert stalled_checks["throughput"].ok is True, stalled.describe()  # input keeps coming
    assert stalled_checks["progress"].ok is False, stalled.describe()
    assert "watermark stood still" in stalled_checks["progress"].detail
    assert not stalled.ok
