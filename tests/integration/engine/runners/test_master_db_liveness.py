"""The job master and its metadata DB row (issue 25, item 8): a start-up failure after the
job row exists ends the row FAILED with the reason (it does not hold the job's name for the
heartbeat timeout), and a SQLite lock held by another process for longer than the busy
timeout does not stall the job master's loop (before: ~150 s without a heartbeat)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from pipelines import Background, metric_value, running_sum_pipeline, scrape_metrics

from airflow_checkpoint_provider.engine.catalog import MetadataStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_a_start_up_failure_after_the_job_row_ends_it_failed_and_frees_the_name(workdir):
    p = running_sum_pipeline(str(workdir), num_records=300, source_parallelism=1,
                             keyed_parallelism=1)
    with socket.socket() as taken:  # the coordinator's port is in use: start-up fails
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(OSError):
            p.run(coordinator_port=taken.getsockname()[1])
    store = MetadataStore(p.metadata_url)
    try:
        [failed] = store.list_jobs(p.name)
        assert failed.status == "FAILED", failed
        assert failed.failure_reason.startswith("start-up failed: OSError"), failed
        with pytest.raises(ValueError, match="is FAILED"):  # `ckpt cancel` answers at once
            store.submit_control_request(failed.job_id, "CANCEL", {})
        assert p.run().status == "FINISHED"  # the name is free at once, not after 60 s
    finally:
        store.close()


_LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("UPDATE jobs SET version = version")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
print("released", flush=True)
"""

BUSY_S, LOCK_S = 2.0, 16.0


@pytest.mark.timeout(240)
def test_a_sqlite_lock_longer_than_the_busy_timeout_does_not_stall_the_job_master(
        workdir, monkeypatch):
    """Another process holds the SQLite write lock for 16 s, eight times the busy timeout
    (2 s here). The job master's loop must keep serving its slots: the records counters it
    updates from the slots' reports (once a second) never stop for more than 7 s (its
    longest wait for the DB is MUST_WAIT_S = 2 s per stall, plus a report interval and
    sampling). Before the fix the loop sat in one DB call for the whole lock (5 retries of
    the busy timeout, then the next call). Once the lock is released, heartbeats and
    checkpoints resume within 10 s, and the job ends normally."""
    monkeypatch.setenv("CKPT_SQLITE_BUSY_TIMEOUT_S", str(BUSY_S))
    port = _free_port()
    p = running_sum_pipeline(str(workdir), num_records=10**9, rate=2000, source_parallelism=1,
                             keyed_parallelism=1, interval_ms=500)
    bg = Background(p, metrics_port=port)
    job = bg.wait_running(min_checkpoints=1, timeout=90)
    db_file = str(workdir / "meta.db")

    def records() -> float:
        return metric_value(scrape_metrics(port), "ckpt_records_in_total", operator="sum")

    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, db_file, str(LOCK_S)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        samples = []
        start = time.monotonic()
        while time.monotonic() - start < LOCK_S - 1.0:
            samples.append((time.monotonic(), records()))
            time.sleep(0.25)
        assert locker.stdout.readline().strip() == "released"
        released = time.monotonic()
    finally:
        locker.kill()
        locker.wait()
    stalls, last_change = [], samples[0][0]
    for (_, before), (t, value) in zip(samples, samples[1:], strict=False):
        if value != before:
            stalls.append(t - last_change)
            last_change = t
    stalls.append(samples[-1][0] - last_change)
    assert max(stalls) < 7.0, f"the job master's loop stalled {max(stalls):.1f} s"

    # after the lock: heartbeats and checkpoints resume
    store = MetadataStore(p.metadata_url)
    try:
        before = {c.checkpoint_id for c in store.list_checkpoints(job.job_id)}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            beat = store.get_job(job.job_id).heartbeat_at
            new = [c for c in store.list_checkpoints(job.job_id)
                   if c.checkpoint_id not in before and c.status in ("COMPLETED", "SUBSUMED")]
            if beat is not None and beat.timestamp() > time.time() - (time.monotonic() - released) and new:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("no heartbeat or completed checkpoint after the lock ended")
    finally:
        store.close()
    assert bg.request(job.job_id, "CANCEL").status == "SUCCEEDED"
    assert bg.result().status == "CANCELED"
