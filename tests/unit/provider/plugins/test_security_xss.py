"""Issue 42, item 7: stored XSS. HTML in a job id, job name or checkpoint id was rendered
raw by the UI plugin (``/checkpoints/``, the job page's nav, ``/chains/<id>``, the per-task
statistics line) and by ``ckpt report``. Now every page is an autoescaping template: this
test fills every text column of the metadata DB with markup (through the store, then raw
SQL for what the store refuses) and renders every page of the plugin (FastAPI's test
client, the plugin's own app) and the report."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore, upgrade_database

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PAYLOADS = [
    '<script>alert("x")</script>',
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(2)>",
    "<iframe srcdoc='<b>'>",
]
#: what must never appear in a page: a tag or attribute a payload would inject
INJECTED = re.compile(r"<script>alert|<img src=x|<svg onload|<iframe srcdoc|onerror=alert\(1\)>")
JOB_ID = '"><img src=x onerror=alert(1)>'  # no '/', so it fits in one URL path segment

pytestmark = pytest.mark.usefixtures("airflow_db")  # tokens: revoked_token table


def _hostile_db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path}/meta.db"
    upgrade_database(url)
    with MetadataStore(url) as store:
        for n, job_id in enumerate(("v1job", JOB_ID)):
            store.create_job(
                job_id=job_id,
                job_name=PAYLOADS[0],
                parallelism=2,
                version=PAYLOADS[1],
                restored_from=PAYLOADS[2] if n else None,
            )
            store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=None)
            store.end_attempt(job_id, 0, failure_reason=PAYLOADS[3])
            store.start_attempt(job_id, 1, restored_checkpoint_id=1, restored_from=PAYLOADS[2])
            for chk in (1, 2, 3):
                at = T0 + timedelta(minutes=chk + 10 * n)
                store.add_pending_checkpoint(
                    job_id, chk, kind="CHECKPOINT", trigger_time=at, location=PAYLOADS[2]
                )
                if chk == 3:
                    store.fail_checkpoint(job_id, chk, reason=PAYLOADS[0])
                    continue
                store.complete_checkpoint(
                    job_id,
                    chk,
                    complete_time=at + timedelta(seconds=1),
                    duration_ms=100,
                    state_size=10,
                    checkpointed_size=5,
                    task_stats=[
                        {
                            "vertex": PAYLOADS[1],
                            "subtask": PAYLOADS[3],
                            "sync_duration_ms": 1,
                            "async_duration_ms": 2,
                            "alignment_duration_ms": 3,
                            "state_size": 10,
                        }
                    ],
                )
            store.set_job_status(job_id, "FAILED", failure_reason=PAYLOADS[3])
    with sqlite3.connect(tmp_path / "meta.db") as db:  # what the store would not write
        db.execute("UPDATE jobs SET spark_app_id = ?", (PAYLOADS[1],))
    return url


def _assert_inert(page: str, where: str) -> None:
    found = INJECTED.search(page)
    assert found is None, f"{where}: raw markup {found.group(0)!r} in the page"


@pytest.fixture
def client(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from airflow_checkpoint_provider.plugins import checkpoint_ui

    url = _hostile_db(tmp_path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_CKPT_XSS",
        json.dumps({"conn_type": "checkpoint_metadata", "extra": {"url": url}}),
    )
    monkeypatch.setenv("CKPT_UI_CONN_ID", "ckpt_xss")
    monkeypatch.setattr(checkpoint_ui, "_STORE", {})
    with TestClient(checkpoint_ui.app, cookies={"_token": token("viewer")}) as c:
        yield c


def token(role: str | None) -> str:
    """A JWT of Airflow's (simple) auth manager for a user of ``role``: the UI session."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return init_auth_manager().generate_jwt(SimpleAuthManagerUser(username=f"u-{role}", role=role))


@pytest.mark.timeout(120)
def test_every_plugin_page_renders_hostile_db_values_as_text(client):
    quoted = quote(JOB_ID, safe="")
    pages = {
        "/": None,
        f"/jobs/{quoted}": None,
        "/jobs/v1job": None,
        f"/chains/{quoted}": None,
        "/chains/v1job": None,
    }
    for path in pages:
        resp = client.get(path)
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:500])
        _assert_inert(resp.text, path)
        pages[path] = resp.text
    # the values are there, as text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in pages["/"]
    assert f'href="/checkpoints/chains/{quoted}"' in pages[f"/jobs/{quoted}"]
    assert "vertex &#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in pages["/jobs/v1job"]
    # the JSON API returns the values as they are (JSON, not HTML)
    assert client.get("/api/jobs").json()[0]["job_name"] == PAYLOADS[0]


@pytest.mark.timeout(60)
def test_a_hostile_id_in_the_url_is_not_reflected_as_markup(client):
    resp = client.get("/chains/" + quote("<svg onload=alert(2)>", safe=""))
    assert resp.status_code == 404
    # an error is JSON (FastAPI's), which a browser never renders as a page
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json()["detail"] == "no job with id '<svg onload=alert(2)>'"


@pytest.mark.timeout(120)
def test_ckpt_report_renders_hostile_db_values_as_text(tmp_path):
    from airflow_checkpoint_provider.engine.lifecycle.report import (
        ReportData,
        _task_table_html,
        render_html,
    )

    url = _hostile_db(tmp_path)
    with MetadataStore(url) as store:
        for job in ("v1job", JOB_ID):
            _assert_inert(render_html(ReportData.load(store, job)), f"report of {job}")
        latest = ReportData.load(store, "v1job").latest_completed_checkpoint()
    # SQLite keeps text in an INTEGER column: a checkpoint id from the DB is text too
    line = _task_table_html(dataclasses.replace(latest, checkpoint_id=PAYLOADS[1]))
    _assert_inert(line, "per-task statistics line")
    assert "checkpoint &#34;&gt;&lt;img" in line
