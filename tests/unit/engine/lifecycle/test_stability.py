"""The stability verdict from metadata DB rows (a real SQLite store, rows as the job master
writes them): each criterion passes, fails with its figure, or is not measured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.errors import ConfigurationError
from airflow_checkpoint_provider.engine.lifecycle.stability import (
    StabilityCriteria,
    assess_stability,
    early_verdict,
)


@pytest.fixture
def store(tmp_path):
    s = MetadataStore(f"sqlite:///{tmp_path}/m.db")
    yield s
    s.close()


def _job(store, job_id: str, *, rate: float, checkpoints: int = 4, since: datetime,
         watermark_lag_growth_ms: float | None = None, status: str = "RUNNING") -> None:
    """A job whose operators ``src`` and ``sum`` process ``rate`` records/s, with a completed
    checkpoint every second from ``since + 1 s``; with ``watermark_lag_growth_ms`` its
    watermark falls behind by that much per checkpoint."""
    store.create_job(job_id=job_id, job_name=job_id, parallelism=1)
    store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=None)
    store.set_job_status(job_id, status)
    # checkpoints follow the attempt's recorded start, which a loaded machine may put more
    # than the 500 ms of _since() after ``since`` (the first one then fell before the
    # attempt and was not counted)
    base = max(since, store.list_attempts(job_id)[-1].started_at)
    for i in range(1, checkpoints + 1):
        t = base + timedelta(seconds=i)
        n = int(rate * i)
        task = {"vertex": 0, "subtask": 0, "start_delay_ms": 5.0,
                "records": {"src": [0, n], "sum": [n, n]}}
        if watermark_lag_growth_ms is not None:
            task["watermark"] = t.timestamp() * 1000 - 500 - watermark_lag_growth_ms * i
        store.add_pending_checkpoint(job_id, i, kind="CHECKPOINT", trigger_time=t,
                                     location=f"/c/{job_id}/chk-{i}")
        store.complete_checkpoint(job_id, i, complete_time=t + timedelta(milliseconds=40),
                                  duration_ms=40, state_size=1, checkpointed_size=1,
                                  task_stats=[task])


def _since() -> datetime:
    return datetime.now(UTC) - timedelta(milliseconds=500)  # attempts start "now"


def _checks(verdict) -> dict:
    return {c.name: c for c in verdict.checks}


def test_a_job_keeping_pace_with_its_baseline_is_stable(store):
    since = _since()
    _job(store, "blue", rate=100, since=since)
    _job(store, "green", rate=100, since=since)
    verdict = assess_stability(store, "green", since=since, until=since + timedelta(seconds=10),
                               criteria=StabilityCriteria(max_checkpoint_duration_ms=100),
                               baseline_job_id="blue")
    checks = _checks(verdict)
    assert verdict.ok, verdict.describe()
    assert checks["restarts"].figure == 0 and checks["checkpoints"].figure == 4
    assert checks["checkpoint_duration"].figure == 40
    assert checks["throughput"].figure == pytest.approx(1.0)


def test_a_lagging_job_fails_on_throughput_naming_the_operator_and_the_rates(store):
    since = _since()
    _job(store, "blue", rate=100, since=since)
    _job(store, "green", rate=30, since=since)
    verdict = assess_stability(store, "green", since=since, until=since + timedelta(seconds=10),
                               criteria=StabilityCriteria(), baseline_job_id="blue")
    [failed] = verdict.failed
    assert failed.name == "throughput" and failed.figure == pytest.approx(0.3)
    assert "30.0 records/s against the baseline's 100.0" in failed.detail
    assert "NOT stable" in verdict.describe()


def test_a_restart_fails_the_verdict_early_with_the_failure_that_caused_it(store):
    since = _since()
    _job(store, "green", rate=100, since=since)
    store.end_attempt("green", 0, failure_reason="RuntimeError: feature store down")
    store.start_attempt("green", 1, restored_checkpoint_id=4, restored_from="/c/green/chk-4")
    criteria = StabilityCriteria(window_s=600)
    verdict = early_verdict(store, "green", since=since, criteria=criteria)
    assert verdict is not None and not verdict.ok
    restarts = _checks(verdict)["restarts"]
    assert restarts.figure == 1 and "feature store down" in restarts.detail
    assert early_verdict(store, "green", since=since,
                         criteria=StabilityCriteria(window_s=600, max_restarts=1)) is None


def test_a_growing_watermark_lag_fails_and_a_job_without_watermarks_is_not_measured(store):
    since = _since()
    _job(store, "late", rate=100, since=since, watermark_lag_growth_ms=1000)
    _job(store, "plain", rate=100, since=since)
    criteria = StabilityCriteria(max_watermark_lag_growth_ms=500, max_backlog_growth_ms=100)
    late = _checks(assess_stability(store, "late", since=since, criteria=criteria,
                                    until=since + timedelta(seconds=10)))
    assert late["watermark_lag_growth"].ok is False
    assert late["watermark_lag_growth"].figure == pytest.approx(3000, abs=1)
    assert late["backlog_growth"].ok is True  # start delay stays at 5 ms
    plain = assess_stability(store, "plain", since=since, criteria=criteria,
                             until=since + timedelta(seconds=10))
    assert _checks(plain)["watermark_lag_growth"].ok is None and plain.ok


def test_a_job_that_ended_or_checkpoints_too_little_is_not_stable(store):
    since = _since()
    _job(store, "ended", rate=100, checkpoints=1, since=since, status="FAILED")
    verdict = early_verdict(store, "ended", since=since, criteria=StabilityCriteria())
    assert verdict is not None
    assert {c.name for c in verdict.failed} == {"running", "checkpoints"}


def test_criteria_are_validated_by_name_and_range():
    with pytest.raises(ConfigurationError, match="unknown stability criteria.*max_lag"):
        StabilityCriteria.from_dict({"max_lag": 3})
    with pytest.raises(ConfigurationError, match="min_throughput_ratio must be >= 0"):
        StabilityCriteria(min_throughput_ratio=-1)
    with pytest.raises(ConfigurationError, match="window_s must be > 0"):
        StabilityCriteria(window_s=0)


def _windowed_job(store, job_id: str, *, since: datetime, first: int, last: int,
                  stalled: bool = False) -> None:
    """A job with 10 s tumbling windows (issue 54 item 5): ``src`` reads 30 records/s,
    ``win`` emits its 10 keys' results in one burst when a window fires (every 10 s of the
    watermark, 2 s behind the wall clock), and ``map(<lambda>)`` and ``sink`` take them. A
    completed checkpoint every second from ``since + first`` to ``since + last`` s.
    ``stalled``: input keeps arriving, but the watermark stands still from the start, so no
    window fires and nothing goes out."""
    store.create_job(job_id=job_id, job_name=job_id, parallelism=1)
    store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=None)
    store.set_job_status(job_id, "RUNNING")
    base = max(since, store.list_attempts(job_id)[-1].started_at)
    for i in range(first, last + 1):
        t = base + timedelta(seconds=i)
        read = 30 * i
        watermark = (base.timestamp() if stalled else t.timestamp() - 2) * 1000
        fired = 0 if stalled else 10 * int((i - 2) // 10 if i >= 2 else 0)
        task = {"vertex": 0, "subtask": 0, "start_delay_ms": 5.0, "watermark": watermark,
                "records": {"src": [0, read], "win": [read, fired],
                            "map(<lambda>)": [fired, fired], "sink": [fired, fired]}}
        store.add_pending_checkpoint(job_id, i, kind="CHECKPOINT", trigger_time=t,
                                     location=f"/c/{job_id}/chk-{i}")
        store.complete_checkpoint(job_id, i, complete_time=t + timedelta(milliseconds=40),
                                  duration_ms=40, state_size=1, checkpointed_size=1,
                                  task_stats=[task])


def test_a_healthy_windowed_job_passes_on_its_input_rate_where_bursty_output_would_fail(store):
    """Blue's checkpoints span the whole 20 s gate (two window firings); green, restored
    late, checkpoints from 13 s to 19 s: no window fired in between, so its operators after
    the window show 0 records/s. Judged on input, with its watermark advancing, it passes;
    judged per operator (the gate before issue 54) it failed as in the report."""
    since = _since()
    _windowed_job(store, "blue", since=since, first=1, last=20)
    _windowed_job(store, "green", since=since, first=13, last=19)
    until = since + timedelta(seconds=21)
    verdict = assess_stability(store, "green", since=since, until=until,
                               criteria=StabilityCriteria(window_s=20), baseline_job_id="blue")
    checks = _checks(verdict)
    assert verdict.ok, verdict.describe()
    assert checks["throughput"].figure == pytest.approx(1.0)
    assert "slowest source 'src'" in checks["throughput"].detail
    assert checks["progress"].ok is True and "watermark advanced" in checks["progress"].detail
    old = assess_stability(store, "green", since=since, until=until, baseline_job_id="blue",
                           criteria=StabilityCriteria(window_s=20, throughput_of="operators"))
    [failed] = old.failed
    assert failed.name == "throughput" and failed.figure == 0.0, old.describe()


def test_a_stalled_windowed_job_fails_though_its_input_keeps_arriving(store):
    since = _since()
    _windowed_job(store, "blue", since=since, first=1, last=20)
    _windowed_job(store, "green", since=since, first=1, last=20, stalled=True)
    verdict = assess_stability(store, "green", since=since, until=since + timedelta(seconds=21),
                               criteria=StabilityCriteria(window_s=20), baseline_job_id="blue")
    checks = _checks(verdict)
    assert checks["throughput"].ok is True  # it reads its input at blue's pace...
    assert not verdict.ok and [c.name for c in verdict.failed] == ["progress"]
    assert "watermark stood still" in checks["progress"].detail  # ...but nothing comes out
    assert "read 570 records" in checks["progress"].detail


def test_a_stall_the_watchdog_reported_fails_the_progress_check(store):
    since = _since()
    _windowed_job(store, "green", since=since, first=1, last=5)
    store.set_job_progress_stall("green", {"operator": "sink", "kind": "records",
                                           "detail": "1200 records queued for 31 s"})
    verdict = assess_stability(store, "green", since=since, until=since + timedelta(seconds=6),
                               criteria=StabilityCriteria(window_s=5))
    [failed] = verdict.failed
    assert failed.name == "progress" and "operator 'sink'" in failed.detail
    assert "1200 records queued" in failed.detail
