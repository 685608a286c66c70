"""``make test`` (``pytest --dist loadgroup``) keeps grouped tests on one worker
(tests/conftest.py): the probe tests below share a module-scoped fixture, so they are one
group; run in two xdist workers, every probe must report the same worker. (With pytest's
nodeid derived from ``item._id``, xdist's own ``@group`` suffix was lost and every group,
the Spark cluster's and the benchmarks' too, was silently ignored.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from repo_paths import REPO_ROOT

OUT = os.environ.get("CKPT_XDIST_PROBE_OUT")
ROOT = str(REPO_ROOT)


@pytest.fixture(scope="module")
def shared():
    return object()


def _record(name: str) -> None:
    with open(OUT, "a") as f:
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'none')} {name}\n")


@pytest.mark.skipif(OUT is None, reason="run by test_grouped_tests_run_on_one_worker")
@pytest.mark.parametrize("n", range(4))
def test_probe(shared, n):
    _record(f"probe{n}")


@pytest.mark.skipif(OUT is None, reason="run by test_the_longest_scope_runs_first")
@pytest.mark.timeout(600)  # what makes it the longest scope: a long test declares a timeout
def test_long_probe():
    _record("long")


def _run_probes(tmp_path, select: str, workers: int) -> list[tuple[str, str]]:
    """Run the probes ``-k select`` in ``workers`` xdist workers: (worker, probe) in order."""
    out = tmp_path / "workers"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
         "--dist", "loadgroup", os.path.abspath(__file__), "-k", select],
        env={**os.environ, "CKPT_XDIST_PROBE_OUT": str(out)}, cwd=ROOT, capture_output=True,
        text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [tuple(line.split()) for line in out.read_text().splitlines()]


@pytest.mark.timeout(240)
def test_grouped_tests_run_on_one_worker(tmp_path):
    workers = [w for w, _ in _run_probes(tmp_path, "test_probe", 2)]
    assert len(workers) == 4 and len(set(workers)) == 1, workers
    assert workers[0].startswith("gw"), workers


@pytest.mark.timeout(240)
def test_the_longest_scope_runs_first(tmp_path):
    """The scheduler hands out the longest scope first (tests/conftest.py longest_first):
    the one test with a 600 s timeout, collected last, runs before the group of four short
    probes (xdist's own order, most tests first, ran the group first: a suite's longest
    tests started last and ran on after the rest had finished)."""
    ran = [name for _, name in _run_probes(tmp_path, "probe", 1)]
    assert ran == ["long", "probe0", "probe1", "probe2", "probe3"], ran


_SHOW_GROUPS = '''
import pytest

def pytest_configure(config):
    config.option.loadgroup = True  # what xdist sets in a worker of --dist loadgroup

@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    for item in session.items:
        print("NODE", item.nodeid)
'''


@pytest.mark.timeout(240)
def test_the_deployments_and_the_other_cluster_tests_are_two_groups(tmp_path):
    """tests/deployment/cluster (real Airflow on its Spark cluster) is one group with one deployment
    (three groups with a deployment each slowed a full run on 2 cores); the other tests on a standalone cluster are another, so they need not wait behind them
    (a worker starts its own cluster). Both use the spark_cluster fixture: the folder
    decides first (it once put the deployments into the other group)."""
    (tmp_path / "show_groups.py").write_text(_SHOW_GROUPS)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-p",
         "show_groups", "tests/deployment/cluster", "tests/integration/engine/runners/test_spark_runner.py",
         "tests/integration/provider/test_submit_to_cluster.py"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(tmp_path)])}, cwd=ROOT,
        capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    nodes = [line.split(" ", 1)[1] for line in proc.stdout.splitlines()
             if line.startswith("NODE ")]
    groups = {n.split("::")[0]: n.rsplit("@", 1)[1] for n in nodes if "@" in n}
    tests = {n.rsplit("@", 1)[0].split("::")[1]: n.rsplit("@", 1)[1] for n in nodes if "@" in n}
    # the deployments on one worker, one deployment (tests/conftest.py _GROUPED_DIRS)
    assert {tests[t] for t in tests if "real_airflow" in t or "scheduled_savepoint" in t
            } == {"spark-cluster"}, tests
    assert groups["tests/deployment/cluster/test_postgres_blue_green_deployment.py"] == "spark-cluster", groups
    assert groups["tests/integration/provider/test_submit_to_cluster.py"] == "spark-cluster-jobs", groups
    killed = next(n for n in nodes if "killed_executor" in n)
    assert killed.endswith("@spark-cluster-jobs"), killed


@pytest.mark.timeout(240)
def test_the_bench_tests_share_no_group_and_the_vector_join_jobs_do(tmp_path):
    """The ``bench`` group kept every test of the benchmarks on one worker (~17 min, the suite's
    second serial floor) for the smoke tests' one shared results folder; each smoke test now
    has its own folder and renders it, so none is grouped, not even by module (but the one on
    the session's standalone cluster, in that cluster's group). The vectorized join jobs share their failure-free runs (a session fixture) in a group."""
    (tmp_path / "show_groups.py").write_text(_SHOW_GROUPS)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-p",
         "show_groups", "tests/integration/bench/test_bench_smoke.py", "tests/unit/bench/nexmark/test_nexmark_source.py",
         "tests/integration/bench/test_nexmark_q13_q19.py", "tests/integration/engine/operators/test_vector_joins.py"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(tmp_path)])}, cwd=ROOT,
        capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    nodes = [line.split(" ", 1)[1] for line in proc.stdout.splitlines()
             if line.startswith("NODE ")]
    bench = [n for n in nodes if "/bench/" in n.split("::")[0]]
    # except the scaling scenario: it runs on the session's standalone cluster, so it is in
    # that cluster's group (one cluster start fewer)
    scaling = [n for n in bench if "scaling_scenario_measures_parallelism" in n]
    assert len(scaling) == 1 and scaling[0].endswith("@spark-cluster-jobs"), scaling
    rest = [n for n in bench if n not in scaling]
    assert len(rest) > 13 and not any("@" in n for n in rest), rest
    jobs = [n for n in nodes if "sigkill" in n or "savepoint_restores_at" in n
            or "commits_the_rows_of_the_row_path" in n]
    assert len(jobs) == 6 and all(n.endswith("@vector-joins-jobs") for n in jobs), jobs
