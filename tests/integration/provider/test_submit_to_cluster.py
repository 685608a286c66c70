"""Jobs submitted through the provider's submit hook run on the Spark cluster the connection
names: the standalone master's application id, slots on its worker executors."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.packaging import EXECUTOR_REQUIREMENTS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]


def _cluster_connection(monkeypatch, cluster) -> None:
    host, port = cluster.url.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": host, "port": int(port)}))


@pytest.mark.timeout(300)
def test_submit_hook_runs_the_job_on_the_standalone_cluster(metadata_url, tmp_path, monkeypatch,
                                                             spark_cluster):

    _cluster_connection(monkeypatch, spark_cluster)
    job_id = uuid.uuid4().hex
    hook = _running_sum_hook(metadata_url, job_id, "running-sum-cluster", tmp_path)
    assert "--master" in hook.command() and spark_cluster.url in hook.command()

    hook.submit_blocking()

    job, placement = _finished_on_cluster(metadata_url, job_id)
    assert placement and len(placement) == job.parallelism
    for slot in placement:
        assert slot["executor_id"] not in (None, "driver") and slot["executor_id"].isdigit(), slot
        # the executor's working directory is this cluster's worker dir for this application
        assert slot["work_dir"].startswith(spark_cluster.workdir), slot
        assert f"/{job.spark_app_id}/" in slot["work_dir"] + "/", slot


@pytest.fixture(scope="session")
def bare_executor_python(tmp_path_factory) -> str:
    """A separate venv with only the engine's third-party dependencies (not this project):
    the Python of a cluster that never installed airflow-checkpoint-provider."""
    import importlib.metadata as md
    import os
    import subprocess
    import sys

    venv = tmp_path_factory.mktemp("bare-executor") / "venv"
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    subprocess.run([uv, "venv", "-q", "--python", sys._base_executable, str(venv)], check=True,
                   timeout=120)
    python = str(venv / "bin" / "python")
    pins = [f"{name}=={md.version(name)}" for name in EXECUTOR_REQUIREMENTS]
    subprocess.run([uv, "pip", "install", "-q", "--python", python, *pins], check=True,
                   timeout=300)
    return python


@pytest.mark.timeout(420)
def test_executors_without_the_project_receive_the_code_as_py_files(
        metadata_url, tmp_path, monkeypatch, spark_cluster, bare_executor_python):
    import subprocess


    probe = subprocess.run([bare_executor_python, "-c", "import airflow_checkpoint_provider"],
                           capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "the bare executor Python must not have the project"
    _cluster_connection(monkeypatch, spark_cluster)
    job_id = uuid.uuid4().hex
    hook = _running_sum_hook(metadata_url, job_id, "running-sum-shipped", tmp_path,
                             ship_code=True, code_cache_dir=str(tmp_path / "code"),
                             python=bare_executor_python)
    assert "--py-files" in hook.command()

    hook.submit_blocking()

    _job, placement = _finished_on_cluster(metadata_url, job_id)
    assert placement and all(s["python"] == bare_executor_python for s in placement), placement
    assert all(s["executor_id"].isdigit() for s in placement), placement


def _running_sum_hook(metadata_url: str, job_id: str, job_name: str, tmp_path, *,
                      python: str | None = None, **options):
    """The submit hook for the example running-sum job (5,000 records) on the cluster."""
    from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook

    # one executor with both cores (not one 1-core executor per worker): one executor JVM
    # and pyspark daemon fewer per submission, the slots still on a worker's executor
    conf = {"spark.executor.memory": "512m", "spark.cores.max": "2", "spark.executor.cores": "2"}
    if python is not None:
        conf["spark.pyspark.python"] = python
    return CheckpointSubmitHook(
        pipeline="airflow_checkpoint_provider.examples.running_sum:build", job_id=job_id,
        job_name=job_name, metadata_url=metadata_url, runner="spark", conf=conf,
        env_vars={"CKPT_EXAMPLE_DIR": str(tmp_path / "example"), "CKPT_EXAMPLE_RECORDS": "5000",
                  "CKPT_EXAMPLE_KEYS": "20"}, **options)


def _finished_on_cluster(metadata_url: str, job_id: str):
    """The job's row and its first attempt's placement, after checking that it FINISHED as
    an application of the standalone master (not a local[*] one in the spark-submit
    process)."""
    with MetadataStore(metadata_url) as store:
        job = store.get_job(job_id)
        assert job.status == "FINISHED", job.failure_reason
        assert job.spark_app_id.startswith("app-"), job.spark_app_id
        return job, store.list_attempts(job_id)[0].placement
