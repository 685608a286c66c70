"""A job's row names its driver process; a restart on the same host takes the name of a job
whose driver is provably gone at once, and otherwise says how long it waits and why
(issue 51, item 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import text

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.catalog.driver import (
    DriverProcess,
    _boot_id,
    _start_ticks,
    this_process,
)
from airflow_checkpoint_provider.engine.errors import JobNameInUseError


@pytest.fixture
def store(tmp_path):
    with MetadataStore(f"sqlite:///{tmp_path}/meta.db") as s:
        yield s


def _process_of(proc: subprocess.Popen) -> str:
    return f"{proc.pid}:{_start_ticks(proc.pid)}:{_boot_id()}"


def _set_driver(store, job_id: str, host: str, process: str) -> None:
    with store._engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET driver_host = :h, driver_process = :p "
                          "WHERE job_id = :j"), {"h": host, "p": process, "j": job_id})


def test_this_process_is_alive_and_a_dead_or_reused_pid_is_gone():
    me = this_process()
    assert me.process.startswith(f"{__import__('os').getpid()}:") and not me.is_gone()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    recorded = DriverProcess(me.host, _process_of(proc))
    proc.wait()
    assert recorded.is_gone()  # no such process any more
    pid, start, boot = me.process.split(":")
    assert DriverProcess(me.host, f"{pid}:{int(start) + 1}:{boot}").is_gone()  # reused pid
    assert DriverProcess(me.host, f"{pid}:{start}:another-boot").is_gone()  # rebooted
    # nothing is provable about another host, or a row without a process
    assert not DriverProcess("another-host", recorded.process).is_gone()
    assert not DriverProcess(me.host, "").is_gone()


def test_a_job_whose_driver_is_gone_frees_its_name_at_once(store):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    store.create_job(job_id="old", job_name="orders", parallelism=1)
    store.set_job_status("old", "RUNNING")
    store.heartbeat("old")  # a fresh heartbeat: the lease has not expired
    _set_driver(store, "old", this_process().host, _process_of(proc))
    proc.wait()

    store.create_job(job_id="new", job_name="orders", parallelism=1, exclusive_name=True)

    old = store.get_job("old")
    assert old.status == "LOST" and f"driver process ({proc.pid} on" in old.failure_reason
    assert store.get_job("new").status == "CREATED"


def test_a_job_killed_while_created_frees_its_name_too(store):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    store.create_job(job_id="old", job_name="orders", parallelism=1)
    _set_driver(store, "old", this_process().host, _process_of(proc))
    proc.wait()
    store.create_job(job_id="new", job_name="orders", parallelism=1, exclusive_name=True)
    assert store.get_job("old").status == "LOST"


def test_a_live_or_remote_driver_keeps_its_name_and_the_refusal_says_how_long(store):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.create_job(job_id="live", job_name="orders", parallelism=1)
        store.set_job_status("live", "RUNNING")
        store.heartbeat("live")
        _set_driver(store, "live", this_process().host, _process_of(proc))
        with pytest.raises(JobNameInUseError, match=r"its driver on host .* is not provably "
                                                    r"gone .* free in about \d+ s"):
            store.create_job(job_id="new", job_name="orders", parallelism=1,
                             exclusive_name=True)
        _set_driver(store, "live", "another-host", _process_of(proc))
        proc.kill()
        proc.wait()
        with pytest.raises(JobNameInUseError, match="on host another-host"):
            store.create_job(job_id="new", job_name="orders", parallelism=1,
                             exclusive_name=True)
        assert store.get_job("live").status == "RUNNING"
    finally:
        proc.kill()
