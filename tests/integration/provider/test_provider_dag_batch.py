"""DAG checkpointed_batch with dag.test(): on real Spark (local[2], spark-submit through the
Spark provider's connection) and, with the local runner, a retry that resumes."""

from __future__ import annotations

import pytest
from provider_helpers import completed_checkpoints, run_dag, xcom

from airflow_checkpoint_provider.engine.catalog import MetadataStore

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_spark_submit_runs_the_job_to_its_end(airflow_db, metadata_url, tmp_path):
    conf = {"pipeline": "airflow_checkpoint_provider.examples.running_sum:build",
            "job_name": "running-sum", "runner": "spark",
            # $CKPT_EXAMPLE_DIR is the worker's (tmp_path/example: the metadata_url fixture)
            "job_env": {"CKPT_EXAMPLE_RECORDS": 20000, "CKPT_EXAMPLE_KEYS": 50}}

    state, tis, dr = run_dag(airflow_db, "checkpointed_batch", conf)

    assert tis == {"run_batch": "success"}
    assert state == "success"
    store = MetadataStore(metadata_url)
    job = store.get_job(xcom(dr, "run_batch"))
    assert job.status == "FINISHED" and job.job_name == "running-sum"
    assert job.spark_app_id and job.spark_app_id.startswith("local-")
    checkpoints = completed_checkpoints(store, job.job_id)
    assert checkpoints and xcom(dr, "run_batch", key="checkpoint_id") == max(
        c.checkpoint_id for c in store.list_checkpoints(job.job_id, status="COMPLETED"))
    link = xcom(dr, "run_batch", key="_link_CheckpointHistoryLink")
    assert link.endswith(f"/checkpoints/jobs/{job.job_id}")  # the api-server plugin page
    store.close()


@pytest.mark.timeout(150)
def test_a_retry_resumes_from_the_failed_jobs_latest_checkpoint(airflow_db, metadata_url, tmp_path,
                                                               capfd):
    conf = {"pipeline": "airflow_checkpoint_provider.examples.flaky_batch:build",
            "job_name": "flaky-batch", "runner": "local",
            "job_env": {}}

    state, tis, dr = run_dag(airflow_db, "checkpointed_batch", conf)

    assert tis == {"run_batch": "success"}
    assert state == "success"
    store = MetadataStore(metadata_url)
    second = store.get_job(xcom(dr, "run_batch"))
    first = next(j for j in store.list_jobs("flaky-batch") if j.job_id != second.job_id)
    assert first.status == "FAILED" and "injected failure" in first.failure_reason
    # where it failed, with the remote traceback, in the DB and in the failed try's task log
    where = "in phase processing of process 'Process: FailOnce', uid 'running-sum', subtask 1/1"
    assert where in first.failure_reason and "Remote traceback" in first.failure_reason
    out, err = capfd.readouterr()  # dag.test() writes the task log there
    failed = [line for line in (out + err).splitlines()
              if line.startswith("airflow.sdk.exceptions.AirflowException: job failed:")]
    assert failed and where in failed[-1], (out + err)[-3000:]
    assert "Remote traceback (task 1.0, slot 0):" in out + err
    assert second.status == "FINISHED"
    resumed = store.latest_completed_checkpoint(job_id=first.job_id, kind=None)
    assert resumed is not None and second.restored_from == resumed.location
    assert len(store.list_jobs("flaky-batch")) == 2
    store.close()
