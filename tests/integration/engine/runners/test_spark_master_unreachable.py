"""An unreachable Spark master (issue 54 item 6): the job is refused within 30 s with one
line naming the URL, not a Java stack after minutes of registration retries. Both ways a
job reaches Spark: ``ckpt run --runner spark --master URL`` and ``spark-submit --master URL
launch.py`` (what the submit hook runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from ports import closed_port
from repo_paths import SUPPORT_DIR

from airflow_checkpoint_provider.engine.errors import SparkMasterUnreachableError
from airflow_checkpoint_provider.engine.runners.spark.session import (
    check_master_reachable,
    master_addresses,
)

SUPPORT = str(SUPPORT_DIR)  # the helper modules


@pytest.fixture
def url() -> Iterator[str]:
    """A standalone master URL where nothing listens, for the test (:func:`closed_port`)."""
    with closed_port() as port:
        yield f"spark://127.0.0.1:{port}"


def _env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SUPPORT, *(p for p in sys.path if p)]),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "CKPT_METADATA_URL": f"sqlite:///{tmp_path}/m.db", "SPARK_LOCAL_IP": "127.0.0.1"}


def _one_line_naming(output: str, url: str) -> None:
    """The error is one line (``Error: Spark master URL is unreachable ...``); the JVM's
    start-up warnings may come around it, a stack trace may not."""
    [line] = [ln for ln in output.splitlines() if "unreachable" in ln]
    assert line.startswith("Error: ") and url in line, output[-3000:]
    assert "at org.apache" not in output and "Traceback" not in output, output[-3000:]


def test_master_addresses_of_standalone_urls():
    assert master_addresses("spark://a:7078,b") == [("a", 7078), ("b", 7077)]
    assert master_addresses("local[2]") == [] and master_addresses("yarn") == []


def test_check_names_the_url_and_what_each_address_said(url):
    t0 = time.monotonic()
    with pytest.raises(SparkMasterUnreachableError, match=r"Spark master spark://127\.0\.0\.1:"
                       r"\d+ is unreachable \(127\.0\.0\.1:\d+: connection refused"):
        check_master_reachable(url, seconds=2)
    assert time.monotonic() - t0 < 10


@pytest.mark.timeout(120)
def test_ckpt_run_with_an_unreachable_master_fails_in_one_line(tmp_path, url):
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "run",
         "pipelines_ref:v1", "--runner", "spark", "--master", url],
        capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=100)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    _one_line_naming(proc.stdout + proc.stderr, url)
    assert elapsed < 30, elapsed


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("spark-submit", path=os.path.dirname(sys.executable)) is None,
                    reason="spark-submit not in the venv")
def test_spark_submit_with_an_unreachable_master_fails_in_one_line(tmp_path, url):
    from airflow_checkpoint_provider.engine import launch

    t0 = time.monotonic()
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "spark-submit"), "--master", url,
         "--conf", "spark.ui.enabled=false", launch.__file__, "pipelines_ref:v1"],
        capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=170)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    _one_line_naming(proc.stdout + proc.stderr, url)
    assert elapsed < 60, elapsed  # the JVM's start included; the check itself is 15 s
