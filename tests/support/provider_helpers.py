"""Helpers of the provider tests: start jobs, wait, clean up, read DAG runs."""

from __future__ import annotations

import time
import uuid
import warnings
from contextlib import contextmanager
from datetime import timedelta

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
ACTIVE = ("CREATED", "RUNNING", "RESTARTING")


def cancel_active_jobs(url: str, timeout: float = 30.0) -> None:
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    store = MetadataStore(url)
    try:
        # rows without a heartbeat were never run by a job process (or it died at once)
        jobs = [j for j in store.list_jobs() if j.status in ACTIVE and j.heartbeat_at]
        for job in jobs:
            try:
                store.submit_control_request(job.job_id, "CANCEL", {})
            except ValueError:
                pass  # ended meanwhile
        deadline = time.monotonic() + timeout
        while jobs and time.monotonic() < deadline:
            jobs = [j for j in jobs if store.get_job(j.job_id).status in ACTIVE]
            time.sleep(0.2)
        if jobs:  # e.g. a launcher that died before its job ran leaves the row CREATED
            warnings.warn(f"jobs still active after cancel: {[j.job_id for j in jobs]}",
                          stacklevel=1)
    finally:
        store.close()


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def start_job(url: str, tmp_path, *, pipeline: str = f"{EXAMPLE}:build_v1",
              job_name: str = "versioned-sum", runner: str = "local", **options) -> str:
    """Start a job detached through the submit hook (runner local by default); its job id."""
    from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook

    job_id = uuid.uuid4().hex
    hook = CheckpointSubmitHook(pipeline=pipeline, job_id=job_id, job_name=job_name,
                                metadata_url=url, runner=runner, log_dir=str(tmp_path / "logs"),
                                **options)
    info = hook.submit_detached(timeout=120)
    assert info["status"] == "RUNNING", info
    return job_id


def running_job(url: str, tmp_path, store, *, job_name: str = "versioned-sum") -> str:
    """:func:`start_job` (v1 of the example, local runner), once it completed a checkpoint."""
    job_id = start_job(url, tmp_path, job_name=job_name)
    wait_for(lambda: completed_checkpoints(store, job_id), 60, f"a checkpoint of {job_name}")
    return job_id


def completed_checkpoints(store, job_id: str, kind: str | None = "CHECKPOINT") -> list:
    return [c for c in store.list_checkpoints(job_id, kind=kind)
            if c.status in ("COMPLETED", "SUBSUMED")]


#: Seconds between the tries of a task in :func:`run_dag` (the DAGs say 1 s): the scenarios
#: that fail a retried task on purpose (a refused cut-over, a lost deferral) wait for every try
#: with their jobs running. dag.test() polls every second, so a retry waits 1 s at least.
TEST_RETRY_DELAY = timedelta(seconds=0.5)


@contextmanager
def _short_retry_delays(dag):
    """Every task of ``dag`` retries after :data:`TEST_RETRY_DELAY` (restored afterwards:
    the DAG object is the session's)."""
    saved = {t.task_id: t.retry_delay for t in dag.tasks}
    try:
        for t in dag.tasks:
            if t.retries:
                t.retry_delay = TEST_RETRY_DELAY
        yield
    finally:
        for t in dag.tasks:
            t.retry_delay = saved[t.task_id]


@contextmanager
def _no_dag_folder_resync():
    """dag.test() parses the DAG folder and writes every DAG of it to Airflow's DB again on
    each call (~0.7 CPU-s, for DAG files changed since: apache/airflow#64884); the session
    fixture ``airflow_db`` wrote them once and nothing changes them during the tests."""
    import airflow.dag_processing.dagbag as dagbag

    real = dagbag.sync_bag_to_db
    dagbag.sync_bag_to_db = lambda *args, **kwargs: None
    try:
        yield
    finally:
        dagbag.sync_bag_to_db = real


def run_dag(bag, dag_id: str, conf: dict):
    """``dag.test()`` the DAG; return ``(dag_run_state, {task_id: state}, dag_run)``."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    dag = bag.get_dag(dag_id)
    with _short_retry_delays(dag), _no_dag_folder_resync():
        dr = dag.test(run_conf=conf)
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id,
                                                 TaskInstance.run_id == dr.run_id).all()
        states = {ti.task_id: (None if ti.state is None else str(ti.state)) for ti in tis}
    return str(dr.state), states, dr


def xcom(dr, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter(XComModel.dag_id == dr.dag_id,
                                              XComModel.run_id == dr.run_id,
                                              XComModel.task_id == task_id,
                                              XComModel.key == key).first()
        return None if row is None else XComModel.deserialize_value(row)


def events(trigger) -> list[dict]:
    """Every event a trigger's ``run()`` yields, run to its end on a fresh event loop."""
    import asyncio

    async def collect():
        return [e.payload async for e in trigger.run()]

    return asyncio.run(collect())
