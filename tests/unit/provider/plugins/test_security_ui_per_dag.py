"""Issue 42, item 8 gap: a user sees only the jobs of DAGs they may read. Before, the
jobs table did not record the submitting DAG, so the plugin's check was "may read DAGs" in
general (a user allowed one DAG was refused everything, or, with general access, saw all).
Now ``SubmitCheckpointedJobOperator`` records ``jobs.dag_id`` (revision 0008) and the plugin
filters every page by the auth manager's ``get_authorized_dag_ids``: other DAGs' jobs and
jobs started outside Airflow are not listed, and their pages answer 404."""

from __future__ import annotations

import json

import pytest
from test_security_xss import token

pytestmark = pytest.mark.usefixtures("airflow_db")  # tokens: revoked_token table


@pytest.fixture
def app(tmp_path, monkeypatch):
    from airflow.api_fastapi.app import init_auth_manager

    from airflow_checkpoint_provider.engine.catalog import MetadataStore, upgrade_database
    from airflow_checkpoint_provider.plugins import checkpoint_ui

    manager = init_auth_manager()
    url = f"sqlite:///{tmp_path}/meta.db"
    upgrade_database(url)
    with MetadataStore(url) as store:
        for job_id, dag in (("job-a", "dag_a"), ("job-b", "dag_b"), ("job-cli", None)):
            if dag:
                store.reserve_job_owner(job_id, dag, "manual__1")
            store.create_job(job_id=job_id, job_name=job_id, parallelism=1)
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_PER_DAG", json.dumps(
        {"conn_type": "checkpoint_metadata", "extra": {"url": url}}))
    monkeypatch.setenv("CKPT_UI_CONN_ID", "ckpt_per_dag")
    monkeypatch.setattr(checkpoint_ui, "_STORE", {})

    # an auth manager with per-DAG permissions (FAB's, Keycloak's): user u-viewer may read
    # dag_a only; the simple auth manager has roles for every DAG
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
        return details is not None and details.id == "dag_a"

    def get_authorized_dag_ids(self, *, user, method="GET", session=None):
        return {"dag_a"}

    monkeypatch.setattr(type(manager), "is_authorized_dag", is_authorized_dag)
    monkeypatch.setattr(type(manager), "get_authorized_dag_ids", get_authorized_dag_ids)
    return checkpoint_ui.app


@pytest.mark.timeout(120)
def test_a_user_sees_only_the_jobs_of_dags_they_may_read(app):
    from fastapi.testclient import TestClient

    with TestClient(app, headers={"Authorization": f"Bearer {token('viewer')}"}) as user:
        jobs = user.get("/api/jobs")
        assert jobs.status_code == 200, jobs.text
        assert [(j["job_id"], j["dag_id"]) for j in jobs.json()] == [("job-a", "dag_a")]
        page = user.get("/")
        assert page.status_code == 200 and "job-a" in page.text
        assert "job-b" not in page.text and "job-cli" not in page.text
        for route in ("/api/jobs/job-a", "/jobs/job-a", "/chains/job-a", "/api/chains/job-a"):
            assert user.get(route).status_code == 200, route
        for job in ("job-b", "job-cli"):
            for route in (f"/api/jobs/{job}", f"/jobs/{job}", f"/chains/{job}",
                          f"/api/chains/{job}"):
                resp = user.get(route)
                assert resp.status_code == 404, (route, resp.status_code)


def test_the_submit_operator_records_its_dag(metadata_url, store, tmp_path):
    from datetime import datetime

    from airflow.sdk import DAG
    from savepoint_helpers import FakeTI

    from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

    with DAG("orders_dag", schedule=None, start_date=datetime(2026, 1, 1)):
        op = SubmitCheckpointedJobOperator(task_id="start", pipeline="m:f", job_name="x")
    # the reservation comes before the launch; the job's row takes it when it is created
    op.reserve_owner({"ti": FakeTI("orders_dag", "start")}, "c" * 32, None)
    store.create_job(job_id="c" * 32, job_name="x", parallelism=1)
    assert store.get_job("c" * 32).dag_id == "orders_dag"
