"""Spark's Python workers and spark-submitted drivers import the installed pyspark (with its
bytecode), not the source-only ``pyspark.zip`` Spark puts first on their PYTHONPATH."""

import importlib
import os

from airflow_checkpoint_provider.engine.runners.spark import daemon
from airflow_checkpoint_provider.engine.runners.spark.daemon import prefer_installed_pyspark
from airflow_checkpoint_provider.engine.runners.spark.session import DAEMON_MODULE


def _site(root, *packages):
    for name in packages:
        os.makedirs(root / name)
    lib = root / "pyspark" / "python" / "lib"
    os.makedirs(lib, exist_ok=True)
    return str(lib)


def test_the_zips_of_the_installed_pyspark_leave_the_path_and_the_rest_keeps_its_order(tmp_path):
    lib = _site(tmp_path / "site", "pyspark", "py4j")
    own = [f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip"]
    other = "/opt/spark/python/lib/pyspark.zip"  # another Spark's, named first by the user
    path = [*own, other, "/work/app", str(tmp_path / "site")]
    assert prefer_installed_pyspark(path) == own
    assert path == [other, "/work/app", str(tmp_path / "site")]


def test_a_zip_whose_package_is_not_installed_beside_stays(tmp_path):
    lib = _site(tmp_path / "site", "pyspark")  # py4j only in its zip
    path = [f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip", str(tmp_path / "site")]
    assert prefer_installed_pyspark(path) == [f"{lib}/pyspark.zip"]
    assert path == [f"{lib}/py4j-0.10.9.9-src.zip", str(tmp_path / "site")]


def test_without_an_installed_pyspark_nothing_changes(tmp_path):
    path = ["/opt/spark/python/lib/pyspark.zip", str(tmp_path)]
    assert prefer_installed_pyspark(path) == []
    assert path == ["/opt/spark/python/lib/pyspark.zip", str(tmp_path)]


def test_the_session_names_the_daemon_module_that_spark_runs():
    """``spark.python.daemon.module`` is run by the executors as ``python -m``: the name the
    session sets is this module, and it has the entry point."""
    assert importlib.import_module(DAEMON_MODULE) is daemon
    assert callable(daemon.main)
