"""Issue 42, item 4: ``ckpt run --detach`` re-ran itself with ``--db <URL>`` in its argv
(any local user's ``ps`` shows it, password included) even when the URL came from
``$CKPT_METADATA_URL``. Now the detached child gets the URL in its environment only.
Starts a real detached job (local runner, a few seconds) and reads the child's
``/proc/<pid>/cmdline``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.errors import EngineError
from airflow_checkpoint_provider.engine.lifecycle.detach import start_detached

REF = "airflow_checkpoint_provider.examples.versioned_sum:build_v1"


@pytest.mark.timeout(180)
def test_the_detached_child_has_no_db_url_in_its_argv(tmp_path):
    url = f"sqlite:///{tmp_path}/secret-name-meta.db"
    env = {
        **os.environ,
        "CKPT_METADATA_URL": url,
        "CKPT_EXAMPLE_DIR": str(tmp_path / "ex"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_checkpoint_provider.engine.cli",
            "run",
            REF,
            "--detach",
            "--runner",
            "local",
            "--job-name",
            "argv-check",
            "--json",
            "--log-file",
            str(tmp_path / "job.log"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout[proc.stdout.index("{") :])
    try:
        with open(f"/proc/{info['pid']}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        with open(f"/proc/{info['pid']}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        assert argv and not [a for a in argv if b"secret-name-meta" in a], argv
        assert b"--db" not in argv
        assert f"CKPT_METADATA_URL={url}".encode() in environ  # where it belongs
        assert os.stat(tmp_path / "job.log").st_mode & 0o077 == 0
    finally:
        with MetadataStore(url) as store:
            store.submit_control_request(info["job_id"], "CANCEL", {})
            deadline = time.monotonic() + 60
            while (
                store.get_job(info["job_id"]).status in ("CREATED", "RUNNING", "RESTARTING")
                and time.monotonic() < deadline
            ):
                time.sleep(0.3)


def test_start_detached_refuses_a_db_url_in_argv(tmp_path):
    with pytest.raises(EngineError, match="not as --db in argv"):
        start_detached(
            None,
            ["run", REF, "--db", "postgresql://u:pw@h/db"],
            job_id="j",  # type: ignore[arg-type]
            log_file=str(tmp_path / "l.log"),
            timeout=1,
        )
