"""Spark failover frees its cores (issue 35 #3): a failed attempt's barrier stage is
cancelled, its slot processes end (killed by the driver, or by themselves once their
coordinator is gone), and the next attempt starts on the cores they held.

Each test runs real Spark in local mode (bounded: 1-3 min each on a loaded 2-core machine).
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest
from pipelines import check_exactly_once, expected_running_sums
from spark_kills import kill_check, kill_check_session, stuck_pipeline

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.runners.spark import session_for

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.usefixtures("spark_env")]


@pytest.mark.timeout(900)  # without the fix: 3 restarts x the 120 s start-up timeout
def test_a_stuck_slot_holding_its_core_does_not_block_the_next_attempt(workdir, monkeypatch):
    """local[3], 3 slots; in the first attempt that runs, slot 1 gets stuck in user code (a
    sleep loop) and the others fail. Spark's own kill of a Python task comes only after
    ``spark.python.task.killTimeout`` (set to an hour here: a slot that ignores
    cancellation), so the stuck slot keeps one of the 3 cores and a restart that needs all
    3 can never start -- unless the failover frees it: the driver kills the noted slot
    process at once. (The other way a stuck slot's process ends, by itself once its
    coordinator is gone, is the same slot code on every runner: test_slot_orphan_exit.py
    proves it on a stuck slot, test_driver_kill.py on running ones. A Spark variant of
    this test freed by the self-exit alone was dropped as a duplicate of them, 1-3 min.)"""
    monkeypatch.setenv("CKPT_SLOT_ORPHAN_EXIT_SECONDS", "3600")  # not what frees it here
    spark = session_for(
        "local[3]", "test-stuck-slot", extra_conf={"spark.python.task.killTimeout": "3600s"}
    )
    try:
        p = stuck_pipeline(str(workdir), restarts=3)
        result = p.run("spark", spark=spark, kill_slots=True, release_seconds=30)
        assert os.path.exists(workdir / "stuck.pid"), "no attempt got stuck"
        attempts = MetadataStore(p.metadata_url).list_attempts(result.job_id)
        reasons = [a.failure_reason for a in attempts]
        # without the fix every restart ends "only 0 of 3 slots started within 120 s" (the
        # stuck slot keeps its core for an hour) and the job FAILS
        assert result.status == "FINISHED", reasons
        assert any("subtask 1 is stuck" in (r or "") for r in reasons), reasons
        check_exactly_once(str(workdir / "out"), expected_running_sums(5000, 30, 3))
    finally:
        spark.stop()


@pytest.mark.timeout(600)
def test_sigkilled_pyspark_workers_and_daemon_during_checkpoints_end_exactly_once(
    workdir, monkeypatch
):
    """The bounded kill check: 2 SIGKILLs of this Spark's Python processes (slot workers
    or the pyspark daemon) 1.5-4 s apart while the job checkpoints every 200 ms; the job
    finishes exactly once. (The 20-run loop: ``tests/support/spark_kills.py``.)"""
    monkeypatch.setenv("CKPT_KILL_CHECK", "")  # restored (removed) after the test
    spark = kill_check_session("test-spark-kills")
    try:
        out = kill_check(
            str(workdir), spark, kills=2, num_records=40_000, rate=6000, seed=5, timeout=300
        )
        assert out["killed"], out
    finally:
        spark.stop()


@pytest.mark.timeout(400)
def test_cores_still_held_fail_the_restart_with_the_stage_named(workdir, monkeypatch):
    """Nothing frees the stuck slot's core (driver kill off, self-exit after an hour, Spark's
    kill after an hour): each restart fails after ``release_seconds`` with
    SlotsNotReleasedError naming the stage, instead of submitting a stage that cannot
    start and waiting out the start-up timeout."""
    from airflow_checkpoint_provider.engine.errors import JobFailedError

    monkeypatch.setenv("CKPT_SLOT_ORPHAN_EXIT_SECONDS", "3600")
    spark = session_for(
        "local[3]", "test-cores-held", extra_conf={"spark.python.task.killTimeout": "3600s"}
    )
    marker = workdir / "stuck.pid"
    try:
        p = stuck_pipeline(str(workdir), restarts=2)
        with pytest.raises(
            JobFailedError, match=r"barrier stage still runs .* \(stage \d+: \d+ task"
        ):
            p.run("spark", spark=spark, kill_slots=False, release_seconds=5)
        reasons = [
            a.failure_reason
            for a in MetadataStore(p.metadata_url).list_attempts(
                MetadataStore(p.metadata_url).list_jobs()[0].job_id
            )
        ]
        assert any("subtask 1 is stuck" in (r or "") for r in reasons), reasons
        assert "cannot start the job's slots" in (reasons[-1] or ""), reasons
    finally:
        if marker.exists():  # the stuck Python worker: nothing else ends it
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(marker.read_text().split()[0]), signal.SIGKILL)
        spark.stop()
