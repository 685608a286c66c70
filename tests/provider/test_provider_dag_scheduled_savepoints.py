"""DAG scheduled_savepoints end to end with dag.test() (local runner, real SQLite metadata DB)."""

from __future__ import annotations

import os

import pytest
from provider_helpers import completed_checkpoints, run_dag, start_job, wait_for, xcom

from airflow_checkpoint_provider.engine.catalog import MetadataStore

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.timeout(150)
def test_each_run_takes_a_savepoint_and_retention_disposes_the_older_ones(
        airflow_db, metadata_url, tmp_path):
    store = MetadataStore(metadata_url)
    job = start_job(metadata_url, tmp_path)
    wait_for(lambda: completed_checkpoints(store, job), 60, "a checkpoint")
    conf = {"job_name": "versioned-sum", "savepoint_dir": str(tmp_path / "example" / "savepoints"),
            "max_count": 1, "max_age_hours": 72}

    runs = [run_dag(airflow_db, "scheduled_savepoints", conf) for _ in range(2)]

    for state, tis, _ in runs:
        assert tis == {"savepoint": "success", "retention": "success"}
        assert state == "success"
    first, second = (xcom(dr, "savepoint") for _, _, dr in runs)
    assert first != second
    assert xcom(runs[0][2], "retention") == []
    assert xcom(runs[1][2], "retention") == [first]
    rows = {c.location: c for c in store.list_checkpoints(job, kind="SAVEPOINT")}
    assert rows[first].status == "DISCARDED" and not os.path.exists(first)
    assert rows[second].status == "COMPLETED"
    assert os.path.isfile(os.path.join(second, "_metadata"))
    assert xcom(runs[1][2], "savepoint", key="savepoint_path") == second
    assert store.get_job(job).status == "RUNNING"
    store.close()
