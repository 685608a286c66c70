"""A DAG run's conf is untrusted: a job name or reference with a trailing newline (which
``re.match`` with ``$`` used to accept) is refused by the operators and sensors with a clear
error before anything is looked up or started (issue 25, item 6)."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from savepoint_helpers import FakeTI
from test_provider_operators import _submit

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.sensors.checkpoint import JobStateSensor

BAD = ["versioned-sum\n", "versioned-sum\r\n", "versioned-sum\n../x"]


@pytest.mark.parametrize("name", BAD)
def test_submit_refuses_a_job_name_with_a_newline_and_starts_nothing(metadata_url, tmp_path, name):
    op = _submit(tmp_path)
    op.job_name = name  # as rendered from "{{ dag_run.conf['job_name'] }}"
    with pytest.raises(AirflowException, match=r"submit: job_name .*must match"):
        op.execute({"ti": FakeTI("d", "submit")})
    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("name", BAD)
def test_control_operators_and_sensors_refuse_a_job_reference_with_a_newline(metadata_url,
                                                                             name):
    with MetadataStore(metadata_url) as store:
        store.create_job(job_id="j1", job_name="versioned-sum", parallelism=1)
        store.set_job_status("j1", "RUNNING")
    op = TriggerSavepointOperator(task_id="savepoint", job=name)
    with pytest.raises(AirflowException, match="must match"):
        op.execute({"ti": FakeTI("d", "submit")})
    sensor = JobStateSensor(task_id="running", job=name, timeout=1)
    with pytest.raises(AirflowException, match="running: job .*must match"):
        sensor.execute({"ti": FakeTI("d", "submit")})
    with MetadataStore(metadata_url) as store:
        assert store.list_control_requests("j1") == []
