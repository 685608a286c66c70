import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)  # shared test pipelines (tests/pipelines.py) importable by slots


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A temp dir holding checkpoints, output and the metadata DB of one test."""
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    return tmp_path


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A 2-worker Spark standalone cluster on 127.0.0.1 (started once per test session)."""
    from spark_cluster import StandaloneCluster

    cluster = StandaloneCluster(str(tmp_path_factory.mktemp("spark-cluster"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def spark_env(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
