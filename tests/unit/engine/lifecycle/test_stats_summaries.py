"""Checkpoint statistics and reports on hand-written metadata rows (no job runs)."""

from datetime import UTC, datetime, timedelta

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.lifecycle.report import render_report
from airflow_checkpoint_provider.engine.lifecycle.stats import (
    checkpoint_statistics,
    percentile,
    summarize,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_summarize_gives_min_avg_max_and_interpolated_percentiles():
    s = summarize([4, None, 1, 3, 2])
    assert s == {"count": 4, "min": 1, "avg": 2.5, "max": 4, "p50": 2.5, "p90": 3.7,
                 "p99": 3.97}
    assert summarize([]) == {"count": 0, "min": None, "avg": None, "max": None, "p50": None,
                             "p90": None, "p99": None}
    assert percentile([7.0], 99) == 7.0


@pytest.fixture
def store(workdir):
    with MetadataStore(str(workdir / "meta.db")) as s:
        yield s


def _checkpoint(store, job_id, chk, *, kind="CHECKPOINT", duration=10, size=1000,
                tasks=None, fail=None):
    trigger = T0 + timedelta(seconds=chk)
    store.add_pending_checkpoint(job_id, chk, kind=kind, trigger_time=trigger,
                                 location=f"/ckpt/chk-{chk}")
    if fail:
        store.fail_checkpoint(job_id, chk, reason=fail)
        return
    tasks = tasks or [{"vertex": 0, "subtask": 0, "sync_ms": 1.0, "async_ms": 2.0,
                       "alignment_ms": 0.0, "state_size": size, "checkpointed_size": size}]
    store.complete_checkpoint(job_id, chk, complete_time=trigger + timedelta(milliseconds=duration),
                              duration_ms=duration, state_size=size, checkpointed_size=size // 2,
                              task_stats=tasks)


def test_restart_before_any_checkpoint_is_a_restart_but_not_a_restore(store):
    store.create_job(job_id="a" * 32, job_name="early", parallelism=1)
    store.start_attempt("a" * 32, 0, restored_checkpoint_id=None, restored_from=None)
    _checkpoint(store, "a" * 32, 1, fail="expired before completing")
    store.end_attempt("a" * 32, 0, failure_reason="boom")
    store.start_attempt("a" * 32, 1, restored_checkpoint_id=None, restored_from=None)
    _checkpoint(store, "a" * 32, 2, duration=30,
                tasks=[{"vertex": 1, "subtask": s, "sync_ms": 1.0, "async_ms": 1.0,
                        "alignment_ms": float(s * 10)} for s in range(3)])
    _checkpoint(store, "a" * 32, 3)  # stays pending below
    store.add_pending_checkpoint("a" * 32, 4, kind="SAVEPOINT", trigger_time=T0,
                                 location="/sp/savepoint-aaaaaa-4")

    stats = checkpoint_statistics(store, "early")
    assert stats["counts"] == {"total": 4, "completed": 2, "failed": 1, "in_progress": 1,
                               "restored": 0, "restarts": 1, "savepoints": 0}
    assert stats["latest"]["restored"] is None
    assert stats["latest"]["savepoint"] is None
    assert stats["latest"]["failed"]["failure_reason"] == "expired before completing"
    assert stats["latest"]["completed"]["checkpoint_id"] == 3
    assert stats["summary"]["end_to_end_duration_ms"]["max"] == 30
    assert stats["summary"]["alignment_duration_ms"] == {
        "count": 4, "min": 0, "avg": 7.5, "max": 20, "p50": 5, "p90": 17, "p99": 19.7}


def test_restore_from_a_savepoint_counts_as_restored(store):
    store.create_job(job_id="b" * 32, job_name="upgraded", parallelism=1,
                     restored_from="/sp/savepoint-0123ab-7")
    store.start_attempt("b" * 32, 0, restored_checkpoint_id=7,
                        restored_from="/sp/savepoint-0123ab-7")
    _checkpoint(store, "b" * 32, 8)
    stats = checkpoint_statistics(store, "b" * 8)  # an id prefix resolves too
    assert stats["counts"]["restored"] == 1 and stats["counts"]["restarts"] == 0
    restored = stats["latest"]["restored"]
    assert restored["restored_checkpoint_id"] == 7 and restored["is_savepoint"] is True


def test_statistics_of_an_unknown_job_raise_lookup_error(store):
    with pytest.raises(LookupError, match="no job matches"):
        checkpoint_statistics(store, "nope")


def test_report_of_a_job_without_checkpoints_still_renders(store, tmp_path):
    store.create_job(job_id="c" * 32, job_name="<b>fresh</b>", parallelism=1)
    page = render_report(store, "c" * 32, tmp_path / "r.html").read_text()
    assert "&lt;b&gt;fresh&lt;/b&gt;" in page and "<b>fresh" not in page  # escaped
    assert page.count('<img class="chart"') == 3
    assert "No completed checkpoint yet." in page
    png = render_report(store, "c" * 32, tmp_path / "r.png", fmt="png").read_bytes()
    assert png.startswith(b"\x89PNG")
