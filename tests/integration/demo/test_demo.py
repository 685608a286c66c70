"""`make demo` keeps working: the upgrade workflow on the embedded defaults, end to end."""

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_make_demo_upgrades_v1_to_v2_through_a_savepoint(tmp_path):
    env = dict(os.environ, CKPT_DEMO_DIR=str(tmp_path / "demo"))
    out = subprocess.run([sys.executable, "-m", "airflow_checkpoint_provider.demo_upgrade"],
                         env=env, text=True, capture_output=True, timeout=380)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "STOPPED with savepoint" in out.stdout
    assert "at parallelism 2 (v1: 1)" in out.stdout
    assert "first checkpoint after the restore" in out.stdout
    assert "Demo OK" in out.stdout
    # progress while the DAG runs: the task states as Airflow records them (issue 54)
    assert "task stop_v1: success" in out.stdout and "task start_v2: success" in out.stdout
