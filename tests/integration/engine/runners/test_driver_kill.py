"""SIGKILL of the driver (the job master's process): its slots stop by themselves, the job
becomes LOST once its heartbeat is stale, and ``restore="latest"`` then commits exactly the
output of a failure-free run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from pipelines import (
    check_exactly_once,
    descendant_pids,
    expected_running_sums,
    process_alive,
    running_sum_pipeline,
)
from repo_paths import SUPPORT_DIR
from sqlalchemy import text

from airflow_checkpoint_provider.engine.catalog import MetadataSchemaError, MetadataStore

N, KEYS, SEED = 30_000, 40, 11
SUPPORT = str(SUPPORT_DIR)  # the helper modules

DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from pipelines import running_sum_pipeline
running_sum_pipeline({root!r}, num_records={n}, num_keys={keys}, seed={seed}, rate=3000,
                     interval_ms=100).run()
"""


def _open_when_created(url: str, deadline: float) -> MetadataStore:
    """The driver's DB, once the driver created its file and schema."""
    while True:
        try:
            return MetadataStore(url, migrate=False)
        except MetadataSchemaError:  # no file yet, or the schema is being created
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _completed(store: MetadataStore) -> int:
    return sum(1 for j in store.list_jobs() for c in store.list_checkpoints(j.job_id)
               if c.status in ("COMPLETED", "SUBSUMED"))


def _start_and_kill_driver(workdir) -> tuple[MetadataStore, list[int]]:
    """A running-sum job's driver process, SIGKILLed after 3 completed checkpoints; returns
    the job's metadata store and the driver's slot pids."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(tests=SUPPORT, root=str(workdir), n=N, keys=KEYS,
                                             seed=SEED)],
        env={**os.environ, "PYTHONPATH": SUPPORT})
    try:
        deadline = time.monotonic() + 90
        store = _open_when_created(f"sqlite:///{workdir}/meta.db", deadline)
        while _completed(store) < 3 and time.monotonic() < deadline:
            assert driver.poll() is None, "the job ended before the kill"
            time.sleep(0.1)
        assert _completed(store) >= 3
        slots = descendant_pids(driver.pid, b"engine.runtime.host.slot")
        assert slots, "the driver's slot processes"
        driver.send_signal(signal.SIGKILL)  # no clean-up of any kind
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
    return store, slots


@pytest.mark.timeout(180)
def test_a_killed_driver_is_lost_and_restore_latest_commits_exactly_once(workdir, monkeypatch):
    store, slots = _start_and_kill_driver(workdir)
    # the slots notice the lost coordinator and exit on their own
    deadline = time.monotonic() + 10
    while any(process_alive(p) for p in slots) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(process_alive(p) for p in slots), "slots outlived their driver"
    (dead,) = store.list_jobs()
    assert dead.status == "RUNNING"  # nobody recorded the end: the row still says RUNNING

    # a driver on another host is not provably gone from here: its lease decides
    with store._engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET driver_host = 'another-host'"))
    monkeypatch.setenv("CKPT_HEARTBEAT_TIMEOUT_S", "2")
    time.sleep(2.5)  # the dead driver's heartbeat is now stale
    result = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED,
                                  interval_ms=100).run(restore="latest")

    assert result.status == "FINISHED" and result.restored_from
    assert result.restored_from.startswith(str(workdir / "ckpt" / "running-sum" / dead.job_id))
    lost = store.get_job(dead.job_id)
    assert lost.status == "LOST" and "no heartbeat" in lost.failure_reason
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))
    store.close()


@pytest.mark.timeout(180)
def test_a_restart_on_the_drivers_host_takes_the_name_at_once(workdir, monkeypatch):
    """Issue 51, item 3: with the default 60 s heartbeat timeout, ``restore="latest"`` right
    after a driver's SIGKILL was refused with ``JobNameInUseError`` for a minute. On the
    same host the killed driver is provably gone: the restart takes the name at once."""
    monkeypatch.delenv("CKPT_HEARTBEAT_TIMEOUT_S", raising=False)
    store, _ = _start_and_kill_driver(workdir)
    killed_at = time.monotonic()
    (dead,) = store.list_jobs()
    assert dead.status == "RUNNING" and dead.driver_process

    result = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED,
                                  interval_ms=100).run(restore="latest")

    restarted = store.get_job(result.job_id)
    print(f"restart created {(restarted.created_at - store.get_job(dead.job_id).updated_at)}"
          f" after the dead job was declared LOST; whole restart {time.monotonic() - killed_at:.1f} s")
    assert result.status == "FINISHED" and result.restored_from
    lost = store.get_job(dead.job_id)
    assert lost.status == "LOST" and "driver process" in lost.failure_reason
    # declared LOST by the restart itself, well before the 60 s lease could have expired
    assert (lost.updated_at - dead.heartbeat_at).total_seconds() < 30
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))
    store.close()
