"""The checkpoint-history plugin served by a real api-server process, rendered by headless
Chromium: the JSON API, a job's page (charts) and an upgrade chain (v1 -> v2 -> v3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from airflow_checkpoint_provider.engine.catalog import MetadataStore, upgrade_database

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _fill(url: str) -> list[str]:
    """Three versions of a job, each restored from the previous one's savepoint."""
    upgrade_database(url)
    ids, restored = [], None
    with MetadataStore(url) as store:
        for n, version in enumerate(("v1", "v2", "v3")):
            job_id = f"job{n}{'0' * 29}"
            store.create_job(job_id=job_id, job_name="orders", parallelism=n + 1,
                             version=version, restored_from=restored)
            store.start_attempt(job_id, 0, restored_checkpoint_id=None, restored_from=restored)
            for chk in range(1 + 10 * n, 6 + 10 * n):
                at = T0 + timedelta(minutes=chk)
                kind = "SAVEPOINT" if chk == 5 + 10 * n else "CHECKPOINT"
                store.add_pending_checkpoint(job_id, chk, kind=kind, trigger_time=at,
                                             location=f"/ckpt/{job_id}/chk-{chk}")
                store.complete_checkpoint(job_id, chk, complete_time=at + timedelta(seconds=1),
                                          duration_ms=100 * chk, state_size=1000 * chk,
                                          checkpointed_size=100, task_stats=[])
            restored = f"/ckpt/{job_id}/chk-{5 + 10 * n}"
            store.set_job_status(job_id, "STOPPED" if n < 2 else "RUNNING")
            ids.append(job_id)
    return ids


def _get(base: str, path: str, token: str | None = None):
    """GET with Airflow's bearer token (the plugin is behind Airflow's auth manager)."""
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"}
                                 if token else {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.read().decode()


def _saved(base: str, path: str, token: str, tmp_path, name: str) -> str:
    """The page fetched with the token, as a file:// URL for Chromium (which has no way to
    send the token): the pages are self-contained (inline charts)."""
    target = tmp_path / f"{name}.html"
    target.write_text(_get(base, path, token)[1])
    return target.as_uri()


def _render(url: str, profile: str) -> tuple[str, str]:
    """Chromium's DOM after the page ran, and its log (console messages)."""
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=3000", "--dump-dom", url],
        capture_output=True, text=True, timeout=90)
    return out.stdout, out.stderr


@pytest.mark.timeout(300)
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_the_api_server_serves_job_pages_and_upgrade_chains(tmp_path):
    from airflow_deployment import AirflowDeployment

    url = f"sqlite:///{tmp_path}/metadata.db"
    ids = _fill(url)
    airflow = AirflowDeployment(str(tmp_path / "airflow"), f"sqlite:///{tmp_path}/airflow.db",
                                env={"AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT": json.dumps(
                                    {"conn_type": "checkpoint_metadata", "extra": {"url": url}})})
    try:
        airflow.start(components=("api-server",))
        base = airflow.base
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            _get(base, "/checkpoints/api/jobs")  # issue 42: no login, no data
        assert anonymous.value.code == 401
        token = airflow.token()

        status, body = _get(base, "/checkpoints/api/jobs", token)
        assert status == 200 and {j["job_id"] for j in json.loads(body)} == set(ids)
        status, body = _get(base, f"/checkpoints/api/chains/{ids[1]}", token)
        assert [j["job_id"] for j in json.loads(body)["chain"]] == ids  # walked both ways
        status, body = _get(base, f"/checkpoints/api/jobs/{ids[0]}", token)
        assert [c["checkpoint_id"] for c in json.loads(body)["checkpoints"]] == [1, 2, 3, 4, 5]
        with pytest.raises(urllib.error.HTTPError) as missing:
            _get(base, "/checkpoints/api/jobs/nope", token)
        assert missing.value.code == 404
        assert "sqlite" not in _get(base, "/checkpoints/api/jobs", token)[1]  # no DB URL leaks

        # the UI's navigation lists the view (plugins endpoint of the REST API)
        plugins = airflow.get("/api/v2/plugins")["plugins"]
        ours = next(p for p in plugins if p["name"] == "checkpoint_history")
        assert ours["external_views"][0]["href"] == "/checkpoints/"

        dom, log = _render(_saved(base, f"/checkpoints/jobs/{ids[2]}", token, tmp_path, "job"),
                           str(tmp_path / "chrome1"))
        assert "Checkpoints of job orders" in dom
        assert dom.count('class="chart"') >= 2 and "data:image/png;base64," in dom
        chain_dom, chain_log = _render(
            _saved(base, f"/checkpoints/chains/{ids[2]}", token, tmp_path, "chain"),
            str(tmp_path / "chrome2"))
        assert all(i in chain_dom for i in ids) and chain_dom.count('class="series"') == 3
        for text in (log, chain_log):
            assert "CONSOLE" not in text and "Uncaught" not in text, text[-2000:]
    finally:
        airflow.stop()
    assert not os.path.exists(tmp_path / "metadata.db-journal")
