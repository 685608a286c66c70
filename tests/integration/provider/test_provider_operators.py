"""Operators called directly (a minimal task-instance stand-in), and the provider's
registration with Airflow."""

from __future__ import annotations

import pytest
from provider_helpers import EXAMPLE, events, start_job
from savepoint_helpers import FakeTI

import airflow_checkpoint_provider
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator


def _submit(tmp_path, **kwargs) -> SubmitCheckpointedJobOperator:
    kwargs.setdefault("wait_for", "running")
    kwargs.setdefault("task_id", "submit")
    return SubmitCheckpointedJobOperator(
        pipeline=f"{EXAMPLE}:build_v2", job_name="versioned-sum",
        runner="local", log_dir=str(tmp_path / "logs"),
        report_dir=str(tmp_path / "reports"), **kwargs)


@pytest.mark.timeout(120)
def test_submit_reconnects_to_a_running_job_of_the_same_name(metadata_url, tmp_path):
    running = start_job(metadata_url, tmp_path)
    ti = FakeTI("d", "submit")

    job_id = _submit(tmp_path).execute({"ti": ti})

    assert job_id == running and ti.xcom["job_id"] == running
    store = MetadataStore(metadata_url)
    assert [j.job_id for j in store.list_jobs("versioned-sum")] == [running]
    store.close()


@pytest.mark.timeout(120)
def test_submit_starts_a_new_job_when_the_running_ones_heartbeat_is_stale(metadata_url, tmp_path):
    store = MetadataStore(metadata_url)
    store.create_job(job_id="ghost", job_name="versioned-sum", parallelism=1)
    store.set_job_status("ghost", "RUNNING")  # its process died without a word
    ti = FakeTI("d", "submit")

    job_id = _submit(tmp_path, heartbeat_timeout=0).execute({"ti": ti})

    assert job_id not in ("ghost", None)
    assert job_id == SubmitCheckpointedJobOperator.job_id_for({"ti": ti}, 1)
    job = store.get_job(job_id)
    assert job.status == "RUNNING" and job.version == "v2"
    assert ti.xcom["_link_CheckpointHistoryLink"].endswith(f"/checkpoints/jobs/{job_id}")
    # report_dir: a static copy of the job's report page (the one `ckpt report` renders)
    page = (tmp_path / "reports" / f"versioned-sum-{job_id}-checkpoints.html").read_text()
    assert job_id in page and "<table" in page
    store.close()


def test_unknown_wait_for_is_refused():
    with pytest.raises(ValueError, match="wait_for"):
        SubmitCheckpointedJobOperator(task_id="x", pipeline="m:f", job_name="j", wait_for="soon")


def test_airflow_lists_the_provider_its_hooks_and_links(airflow_db):
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    pm = ProvidersManager()
    info = pm.providers["airflow-checkpoint-provider"]
    assert info.version == airflow_checkpoint_provider.__version__
    hooks = ProvidersManagerTaskRuntime().hooks
    assert hooks["checkpoint_metadata"].hook_class_name.endswith("CheckpointMetadataHook")
    assert ("airflow_checkpoint_provider.links.checkpoint.CheckpointHistoryLink"
            in pm.extra_links_class_names)
    assert any(t.trigger_class_name.startswith("airflow_checkpoint_provider.triggers.checkpoint")
               for t in pm.trigger)


@pytest.mark.timeout(120)
def test_deferrable_submit_waits_for_the_first_checkpoint_in_its_trigger(metadata_url, tmp_path,
                                                                         monkeypatch):
    from airflow.sdk.exceptions import TaskDeferred

    # the first checkpoint comes well after the job is seen RUNNING (polled every 2 s):
    # the operator checks once before it defers, and a checkpoint already there ends it
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "6000")
    # (the first checkpoint's delay is random up to the interval unless fixed)
    monkeypatch.setenv("CKPT_EXAMPLE_INITIAL_DELAY_MS", "6000")
    ti = FakeTI("d", "submit")
    op = _submit(tmp_path, wait_for="first_checkpoint", deferrable=True, poll_interval=0.2,
                 wait_timeout=60)

    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti})
    [event] = events(deferred.value.trigger)
    assert deferred.value.method_name == "execute_complete"
    job_id = op.execute_complete({"ti": ti}, event)

    assert job_id == ti.xcom["job_id"] and event["status"] == "success"
    store = MetadataStore(metadata_url)
    chk = store.get_checkpoint(job_id, ti.xcom["checkpoint_id"])
    assert chk.status in ("COMPLETED", "SUBSUMED") and chk.location == ti.xcom["checkpoint_location"]
    store.close()
