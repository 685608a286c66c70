"""A detached long-running job steered only through the metadata DB (as Airflow does)."""

import json
import os
import subprocess
import sys
import time

import pytest
from pipelines import process_alive

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

CKPT = [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli"]


def ckpt(*args, cwd, env, timeout=180):
    res = subprocess.run(
        [*CKPT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "runner",
    [["--runner", "local"], ["--runner", "spark", "--master", "local[3]"]],
    ids=["local", "spark"],
)
def test_detached_job_is_checkpointed_and_cancelled_through_the_db(workdir, runner):
    db = f"sqlite:///{workdir}/meta.db"
    env = dict(
        os.environ,
        CKPT_EXAMPLE_DIR=str(workdir),
        CKPT_EXAMPLE_RECORDS="1000000000",
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
    )
    out = ckpt(
        "run",
        "airflow_checkpoint_provider.examples.running_sum:build",
        "--detach",
        "--db",
        db,
        "--interval-ms",
        "60000",
        "--json",
        *runner,
        cwd=workdir,
        env=env,
    )
    info = json.loads(out[out.index("{") :])
    job_id = info["job_id"]
    store = MetadataStore(db)
    try:
        job = store.get_job(job_id)
        assert job.status == "RUNNING" and os.path.exists(info["log_file"])

        out = ckpt("checkpoint", job_id, "--db", db, "--json", cwd=workdir, env=env)
        req = json.loads(out)
        assert req["status"] == "SUCCEEDED"
        location = req["result"]["location"]
        assert load_snapshot(location).checkpoint_id == req["result"]["checkpoint_id"]
        row = store.get_checkpoint(job_id, req["result"]["checkpoint_id"])
        assert row.status == "COMPLETED" and row.kind == "CHECKPOINT"

        beat1 = store.get_job(job_id).heartbeat_at
        time.sleep(2.5)
        beat2 = store.get_job(job_id).heartbeat_at
        assert beat2 > beat1, "the running job heartbeats"

        ckpt("cancel", job_id[:8], "--db", db, cwd=workdir, env=env)
        deadline = time.monotonic() + 30
        while store.get_job(job_id).status != "CANCELED" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert store.get_job(job_id).status == "CANCELED"
        deadline = time.monotonic() + 30
        while process_alive(info["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not process_alive(info["pid"]), "the detached driver exits after cancel"
    finally:
        if process_alive(info["pid"]):
            os.kill(info["pid"], 9)
        store.close()
