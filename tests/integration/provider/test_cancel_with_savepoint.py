"""CancelJobOperator(savepoint_first=True): a job is stopped with a savepoint when it can be,
and cancelled anyway when the savepoint fails."""

from __future__ import annotations

import os

import pytest
from provider_helpers import start_job
from savepoint_helpers import FakeTI

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.control import CancelJobOperator


@pytest.fixture(autouse=True)
def _example_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CKPT_EXAMPLE_DIR", str(tmp_path / "example"))


@pytest.mark.timeout(120)
def test_savepoint_first_stops_the_job_with_a_savepoint(metadata_url, tmp_path):
    job_id = start_job(metadata_url, tmp_path)
    ti = FakeTI("d", "submit")
    assert CancelJobOperator(task_id="cancel", job=job_id, savepoint_first=True).execute(
        {"ti": ti}) == job_id
    store = MetadataStore(metadata_url)
    assert store.get_job(job_id).status == "STOPPED"
    [savepoint] = store.list_checkpoints(job_id, kind="SAVEPOINT")
    assert savepoint.status == "COMPLETED" and ti.xcom["savepoint_path"] == savepoint.location
    assert os.path.isfile(os.path.join(savepoint.location, "_metadata"))
    store.close()


@pytest.mark.timeout(120)
def test_a_failed_savepoint_does_not_stop_the_cancellation(metadata_url, tmp_path):
    job_id = start_job(metadata_url, tmp_path)
    blocked = tmp_path / "example" / "savepoints" / "full-disk"  # a file, not a directory
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("x")
    ti = FakeTI("d", "submit")
    CancelJobOperator(task_id="cancel", job=job_id, savepoint_first=True,
                      directory=str(blocked)).execute({"ti": ti})
    store = MetadataStore(metadata_url)
    assert store.get_job(job_id).status == "CANCELED"
    assert [c.status for c in store.list_checkpoints(job_id, kind="SAVEPOINT")] == ["FAILED"]
    assert ti.xcom["savepoint_path"] is None
    store.close()
