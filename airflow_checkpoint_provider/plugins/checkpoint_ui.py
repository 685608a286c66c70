"""Checkpoint history inside the Airflow UI: an Airflow 3 plugin served by the api-server.

Mounted at ``/checkpoints`` (``fastapi_apps``) and listed in the UI's navigation
(``external_views``, "Checkpoints"):

* ``/checkpoints/`` -- the jobs of the metadata DB, newest first, with links;
* ``/checkpoints/jobs/{job_id}`` -- the job's checkpoint report (the page ``ckpt report``
  writes: duration, size and alignment charts, savepoints and restarts, per-task tables);
* ``/checkpoints/chains/{job_id}`` -- the upgrade chain the job belongs to (v1 -> v2 via a
  savepoint, blue -> green), with a chart of checkpoint durations across the chain;
* ``/checkpoints/api/jobs``, ``/api/jobs/{job_id}``, ``/api/chains/{job_id}`` -- the same as
  JSON.

The task extra link (:class:`~airflow_checkpoint_provider.links.checkpoint.CheckpointHistoryLink`)
points at the job page, so the link works from any browser that reaches the api-server.

Data comes from the ``checkpoint_metadata_default`` connection (``$CKPT_UI_CONN_ID``
overrides it), read-only: the hook never creates or migrates a DB.

Authentication and authorization: Airflow mounts plugin apps without its own checks, so
every route of this app depends on Airflow 3's auth manager -- the user of the UI's session
cookie (or an ``Authorization: Bearer`` token of ``/auth/token``), 401 without one, and 403
unless the auth manager lets that user read DAGs. A user who may read every DAG
(``is_authorized_dag(method="GET")``: the Viewer role and above) sees every job; one who may
read only some DAGs (``get_authorized_dag_ids``) sees the jobs those DAGs submitted
(``jobs.dag_id``, recorded by ``SubmitCheckpointedJobOperator``) and gets 404 for others. No OpenAPI schema is served, no route
writes, and a DB error answers 503 without naming the DB (details go to the api-server log).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

import jinja2
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from airflow_checkpoint_provider.settings import UI_CONN_ID

URL_PREFIX = "/checkpoints"
log = logging.getLogger(__name__)


def _hook():
    from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook

    return CheckpointMetadataHook(checkpoint_conn_id=UI_CONN_ID.get())


_STORE: dict[str, Any] = {}


def _store():
    """One store (one connection pool) per api-server process, not one per request."""
    hook = _hook()
    store = _STORE.get(hook.checkpoint_conn_id)
    if store is None:
        from airflow_checkpoint_provider.engine.client import MetadataSchemaError

        try:
            store = hook.get_conn()
        except MetadataSchemaError as exc:  # missing DB or old schema: the log says how
            log.error("Checkpoint history: metadata DB not usable: %s", exc)
            raise HTTPException(status_code=503, detail="the checkpoint metadata DB is not "
                                "ready; see the api-server log") from exc
        _STORE[hook.checkpoint_conn_id] = store
    return store


def _job_dict(job: Any) -> dict[str, Any]:
    return {"job_id": job.job_id, "job_name": job.job_name, "version": job.version,
            "status": job.status, "parallelism": job.parallelism,
            "restored_from": job.restored_from, "spark_app_id": job.spark_app_id,
            "failure_reason": job.failure_reason, "dag_id": getattr(job, "dag_id", None),
            "created_at": job.created_at.isoformat() if job.created_at else None,
            "page": f"{URL_PREFIX}/jobs/{job.job_id}",
            "chain": f"{URL_PREFIX}/chains/{job.job_id}"}


def _checkpoint_dict(c: Any) -> dict[str, Any]:
    return {"checkpoint_id": c.checkpoint_id, "kind": c.kind, "status": c.status,
            "trigger_time": c.trigger_time.isoformat() if c.trigger_time else None,
            "duration_ms": c.duration_ms, "state_size": c.state_size,
            "checkpointed_size": c.checkpointed_size, "location": c.location,
            "failure_reason": c.failure_reason}


def _get_job(store: Any, job_id: str) -> Any:
    job = store.get_job(job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job with id {job_id!r}")
    return job


def _chain(store: Any, job_id: str) -> list[Any]:
    from airflow_checkpoint_provider.engine.client import upgrade_chain

    _get_job(store, job_id)
    return upgrade_chain(store, job_id)


# Every page is a Jinja2 template with autoescaping: a value from the metadata DB (job name,
# id, version, status, location, failure reason) or from the URL is text, never markup.
_TEMPLATES = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
_TEMPLATES.filters["path"] = lambda value: quote(str(value), safe="")
_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
          "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
          "font-size:13px;text-align:left}th{background:#f3f3f3}a{color:#1a5fb4}")
_PAGE = _TEMPLATES.from_string(
    "<!doctype html><html><head><meta charset=utf-8><title>{{ title }}</title>"
    "<style>{{ style }}</style></head><body>{{ body }}</body></html>")
_JOBS = _TEMPLATES.from_string(
    "<h1>Checkpointed jobs</h1><table><tr><th>job</th><th>id</th><th>status</th>"
    "<th>version</th><th>created</th><th></th></tr>"
    "{% for j in jobs %}<tr><td><a href=\"{{ p }}/jobs/{{ j.job_id|path }}\">{{ j.job_name }}</a>"
    "</td><td>{{ j.job_id }}</td><td>{{ j.status }}</td><td>{{ j.version or '' }}</td>"
    "<td>{{ j.created_at.strftime('%Y-%m-%d %H:%M:%S') if j.created_at else '' }}</td>"
    "<td><a href=\"{{ p }}/chains/{{ j.job_id|path }}\">chain</a></td></tr>{% endfor %}</table>")
_NAV = _TEMPLATES.from_string(
    "<p><a href=\"{{ p }}/\">all jobs</a> · "
    "<a href=\"{{ p }}/chains/{{ job_id|path }}\">upgrade chain</a></p>")
_CHAIN = _TEMPLATES.from_string(
    "<p><a href=\"{{ p }}/\">all jobs</a></p><h1>Upgrade chain of job {{ job_id }}</h1>"
    "<table><tr><th>#</th><th>job</th><th>id</th><th>version</th><th>status</th>"
    "<th>parallelism</th><th>restored from</th></tr>"
    "{% for j in chain %}<tr><td>{{ loop.index }}</td><td><a href=\"{{ p }}/jobs/"
    "{{ j.job_id|path }}\">{{ j.job_name }}</a></td><td>{{ j.job_id }}</td>"
    "<td>{{ j.version or '' }}</td><td>{{ j.status }}</td><td>{{ j.parallelism }}</td>"
    "<td>{{ j.restored_from or '' }}</td></tr>{% endfor %}</table>"
    "<h2>Checkpoint durations</h2>{{ chart }}")
_CHART = _TEMPLATES.from_string(
    '<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{{ width }}" '
    'height="{{ height }}" role="img" aria-label="checkpoint durations">'
    '<line x1="{{ pad }}" y1="{{ height - pad }}" x2="{{ width - 10 }}" y2="{{ height - pad }}" '
    'stroke="#888"/><line x1="{{ pad }}" y1="10" x2="{{ pad }}" y2="{{ height - pad }}" '
    'stroke="#888"/><text x="{{ pad }}" y="{{ height - 12 }}" font-size="11">checkpoint '
    '{{ x0 }}</text><text x="{{ width - 110 }}" y="{{ height - 12 }}" font-size="11">'
    'checkpoint {{ x1 }}</text><text x="4" y="20" font-size="11">{{ "%.0f"|format(y1) }} ms'
    '</text>{% for s in series %}<polyline class="series" fill="none" stroke="{{ s.colour }}" '
    'stroke-width="1.5" points="{{ s.points }}"/><text x="{{ width - 200 }}" '
    'y="{{ 20 + 14 * loop.index0 }}" font-size="11" fill="{{ s.colour }}">{{ s.job_id[:12] }}'
    '</text>{% endfor %}</svg>')


def _page(title: str, body: Markup) -> HTMLResponse:
    return HTMLResponse(_PAGE.render(title=title, style=Markup(_STYLE), body=body))


def _duration_chart(points: list[tuple[int, float, str]]) -> Markup:
    """Inline SVG: checkpoint duration (ms) over checkpoint id, one colour per job."""
    width, height, pad = 720, 220, 40
    if not points:
        return Markup('<svg class="chart" width="720" height="40"><text x="10" y="25">no '
                      'completed checkpoints yet</text></svg>')
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y1 = max(ys) or 1.0
    colours = ["#1a5fb4", "#c01c28", "#26a269", "#e5a50a", "#613583", "#865e3c"]
    jobs = list(dict.fromkeys(p[2] for p in points))
    series = []
    for i, job_id in enumerate(jobs):
        coords = [(pad + (x - x0) * (width - pad - 20) / (x1 - x0),
                   height - pad - y * (height - pad - 20) / y1)
                  for x, y, j in points if j == job_id]
        series.append({"colour": colours[i % len(colours)], "job_id": str(job_id),
                       "points": " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)})
    return Markup(_CHART.render(width=width, height=height, pad=pad, x0=x0, x1=x1, y1=y1,
                                series=series))


@dataclass(frozen=True)
class _Access:
    """What a user may read: every DAG (``all_dags``), or the jobs of ``dag_ids``."""

    all_dags: bool
    dag_ids: frozenset[str]

    def sees(self, job: Any) -> bool:
        """A job submitted by a DAG the user may read; a job started outside Airflow (no
        DAG recorded) only with read access to every DAG."""
        dag_id = getattr(job, "dag_id", None)
        return self.all_dags or (dag_id is not None and dag_id in self.dag_ids)


async def _access(user: GetUserDep) -> _Access:
    """Airflow's login (401 without a valid session/token) and DAG read access (403 without
    any): every DAG, or the DAGs the auth manager lets this user read."""
    from airflow.api_fastapi.app import get_auth_manager

    manager = get_auth_manager()
    if manager.is_authorized_dag(method="GET", user=user):
        return _Access(True, frozenset())
    dag_ids = frozenset(manager.get_authorized_dag_ids(user=user, method="GET"))
    if not dag_ids:
        raise HTTPException(status_code=403, detail="reading the checkpoint history needs "
                            "read access to DAGs")
    return _Access(False, dag_ids)


AccessDep = Annotated[_Access, Depends(_access)]

app = FastAPI(title="Checkpoint history", docs_url=None, redoc_url=None, openapi_url=None,
              dependencies=[Depends(_access)])


def _visible_job(store: Any, job_id: str, access: _Access) -> Any:
    """The job, or 404 (also when the user may not read its DAG: its existence is not told)."""
    job = store.get_job(job_id)
    if job is None or not access.sees(job):
        raise HTTPException(status_code=404, detail=f"no job with id {job_id!r}")
    return job


def _visible_chain(store: Any, job_id: str, access: _Access) -> list[Any]:
    _visible_job(store, job_id, access)
    return [j for j in _chain(store, job_id) if access.sees(j)]


@app.get("/api/jobs")
def api_jobs(access: AccessDep, name: str | None = None) -> list[dict[str, Any]]:
    return [_job_dict(j) for j in _store().list_jobs(job_name=name) if access.sees(j)]


@app.get("/api/jobs/{job_id}")
def api_job(job_id: str, access: AccessDep) -> dict[str, Any]:
    store = _store()
    job = _visible_job(store, job_id, access)
    return {"job": _job_dict(job),
            "checkpoints": [_checkpoint_dict(c) for c in store.list_checkpoints(job_id)]}


@app.get("/api/chains/{job_id}")
def api_chain(job_id: str, access: AccessDep) -> dict[str, Any]:
    return {"job_id": job_id,
            "chain": [_job_dict(j) for j in _visible_chain(_store(), job_id, access)]}


@app.get("/", response_class=HTMLResponse)
def jobs_page(access: AccessDep) -> HTMLResponse:
    jobs = [j for j in _store().list_jobs() if access.sees(j)]
    body = Markup(_JOBS.render(p=URL_PREFIX, jobs=jobs))
    return _page("Checkpointed jobs", body)


@app.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: str, access: AccessDep) -> HTMLResponse:
    from airflow_checkpoint_provider.engine.client import ReportData, render_report_html

    store = _store()
    _visible_job(store, job_id, access)
    page = render_report_html(ReportData.load(store, job_id))  # autoescaped (engine/lifecycle/report.py)
    nav = _NAV.render(p=URL_PREFIX, job_id=job_id)
    return HTMLResponse(page.replace("<body>", "<body>" + nav, 1))


@app.get("/chains/{job_id}", response_class=HTMLResponse)
def chain_page(job_id: str, access: AccessDep) -> HTMLResponse:
    from airflow_checkpoint_provider.engine.client import CheckpointStatus

    store = _store()
    chain = _visible_chain(store, job_id, access)
    points = [(c.checkpoint_id, float(c.duration_ms or 0), j.job_id) for j in chain
              for c in store.list_checkpoints(j.job_id)
              if c.status in (CheckpointStatus.COMPLETED, CheckpointStatus.SUBSUMED)]
    body = Markup(_CHAIN.render(p=URL_PREFIX, job_id=job_id, chain=chain,
                                chart=_duration_chart(points)))
    return _page(f"Upgrade chain of {job_id}", body)


class CheckpointUIPlugin(AirflowPlugin):
    """Registers the checkpoint history app with the api-server and the UI's navigation."""

    name = "checkpoint_history"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Checkpoint history"}]
    external_views = [{"name": "Checkpoints", "href": f"{URL_PREFIX}/", "destination": "nav",
                       "url_route": "checkpoints"}]
