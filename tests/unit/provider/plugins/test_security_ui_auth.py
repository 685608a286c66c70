"""Issue 42, item 8: the plugin's pages and JSON API answered anyone (job names, checkpoint
locations, failure reasons), ``/openapi.json`` was open, and a schema error's 503 named the
DB URL. Now every route needs Airflow's login (auth manager: session cookie or bearer token)
and DAG read access; no OpenAPI schema; a 503 names nothing."""

from __future__ import annotations

import json

import pytest
from test_security_xss import JOB_ID, _hostile_db, token

ROUTES = ["/", "/jobs/v1job", "/chains/v1job", "/api/jobs", "/api/jobs/v1job", "/api/chains/v1job"]

pytestmark = pytest.mark.usefixtures("airflow_db")  # tokens: revoked_token table


@pytest.fixture
def app(tmp_path, monkeypatch):
    from airflow.api_fastapi.app import init_auth_manager

    from airflow_checkpoint_provider.plugins import checkpoint_ui

    init_auth_manager()  # as the api-server does at start
    url = _hostile_db(tmp_path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_CKPT_AUTH",
        json.dumps({"conn_type": "checkpoint_metadata", "extra": {"url": url}}),
    )
    monkeypatch.setenv("CKPT_UI_CONN_ID", "ckpt_auth")
    monkeypatch.setattr(checkpoint_ui, "_STORE", {})
    return checkpoint_ui.app


@pytest.mark.timeout(120)
def test_anonymous_requests_get_nothing(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as anonymous:
        for route in ROUTES:
            resp = anonymous.get(route)
            assert resp.status_code == 401, (route, resp.status_code)
            assert "v1job" not in resp.text and JOB_ID not in resp.text
        assert anonymous.get("/openapi.json").status_code in (401, 404)
        forged = anonymous.get("/api/jobs", headers={"Authorization": "Bearer not-a-jwt"})
        assert forged.status_code in (401, 403)


@pytest.mark.timeout(120)
def test_a_user_without_dag_read_access_is_refused_and_a_viewer_reads(app):
    from fastapi.testclient import TestClient

    with TestClient(app, cookies={"_token": token(None)}) as nobody:
        assert nobody.get("/api/jobs").status_code == 403
    with TestClient(app, headers={"Authorization": f"Bearer {token('viewer')}"}) as viewer:
        for route in ROUTES:
            assert viewer.get(route).status_code == 200, route
        assert viewer.get("/openapi.json").status_code == 404


@pytest.mark.timeout(60)
def test_a_schema_error_names_no_db(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from airflow_checkpoint_provider.plugins import checkpoint_ui

    missing = f"sqlite:///{tmp_path}/absent/meta.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CKPT_GONE",
        json.dumps({"conn_type": "checkpoint_metadata", "extra": {"url": missing}}),
    )
    monkeypatch.setenv("CKPT_UI_CONN_ID", "ckpt_gone")
    monkeypatch.setattr(checkpoint_ui, "_STORE", {})
    with TestClient(checkpoint_ui.app, cookies={"_token": token("viewer")}) as viewer:
        resp = viewer.get("/api/jobs")
    assert resp.status_code == 503
    assert "absent" not in resp.text and "sqlite" not in resp.text
