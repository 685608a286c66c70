"""``make test`` (``pytest -n 2 --dist loadgroup``) keeps grouped tests on one worker
(tests/conftest.py): the probe tests below share a module-scoped fixture, so they are one
group; run in two xdist workers, every probe must report the same worker. (With pytest's
nodeid derived from ``item._id``, xdist's own ``@group`` suffix was lost and every group,
the Spark cluster's and the benchmarks' too, was silently ignored.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

OUT = os.environ.get("CKPT_XDIST_PROBE_OUT")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def shared():
    return object()


@pytest.mark.skipif(OUT is None, reason="run by test_grouped_tests_run_on_one_worker")
@pytest.mark.parametrize("n", range(4))
def test_probe(shared, n):
    with open(OUT, "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\n")


@pytest.mark.timeout(240)
def test_grouped_tests_run_on_one_worker(tmp_path):
    out = tmp_path / "workers"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", f"{os.path.abspath(__file__)}::test_probe"],
        env={**os.environ, "CKPT_XDIST_PROBE_OUT": str(out)}, cwd=ROOT, capture_output=True,
        text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    workers = out.read_text().split()
    assert len(workers) == 4 and len(set(workers)) == 1, workers
    assert workers[0].startswith("gw"), workers
