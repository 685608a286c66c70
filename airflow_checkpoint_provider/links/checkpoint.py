"""Extra link from submit / savepoint tasks to the job's checkpoint history.

The task writes a small static HTML report of the job's checkpoints (the same columns as
``ckpt checkpoints JOB``) next to the job's logs and stores its ``file://`` URL in XCom;
the link shows that URL. The report is a snapshot taken when the task ran; the live view is
``ckpt checkpoints JOB_ID --db URL``, which the report prints at the top.
"""

from __future__ import annotations

import html
import os
import tempfile
from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from airflow_checkpoint_provider.engine.checkpoint.store import MetadataStore

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context
    from airflow.sdk.types import TaskInstanceKey

_COLUMNS = ("checkpoint_id", "kind", "status", "trigger_time", "duration_ms", "state_size",
            "location", "failure_reason")


class CheckpointHistoryLink(BaseOperatorLink):
    """Link to a report of the checkpoints of the job the task submitted or savepointed."""

    name = "Checkpoint history"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

    @classmethod
    def persist(cls, context: Context, store: MetadataStore, job_id: str,
                report_dir: str | None = None) -> str:
        """Write the report of ``job_id`` and store its URL for the link; return the URL."""
        url = "file://" + write_history_report(store, job_id, report_dir)
        context["ti"].xcom_push(key=cls().xcom_key, value=url)
        return url


def write_history_report(store: MetadataStore, job_id: str, report_dir: str | None = None) -> str:
    """Write ``<report_dir>/<job_name>-<job_id>-checkpoints.html``; return its absolute path."""
    job = store.get_job(job_id)
    if job is None:
        raise LookupError(f"no job with id {job_id!r}")
    report_dir = os.path.abspath(report_dir or os.path.join(tempfile.gettempdir(),
                                                            "checkpoint-reports"))
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, f"{job.job_name}-{job.job_id}-checkpoints.html")
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c.to_dict()[k] or ''))}</td>" for k in _COLUMNS)
        + "</tr>\n"
        for c in store.list_checkpoints(job_id))
    doc = (f"<!doctype html><meta charset=utf-8><title>Checkpoints of {html.escape(job.job_name)}"
           f"</title>\n<h1>Job {html.escape(job.job_name)} ({job.job_id})</h1>\n"
           f"<p>Status {job.status}; restored from {html.escape(str(job.restored_from))}. Live: "
           f"<code>ckpt checkpoints {job.job_id} --db {html.escape(_redacted(store.url))}</code></p>\n"
           "<table border=1><tr>" + "".join(f"<th>{k}</th>" for k in _COLUMNS) + "</tr>\n"
           + rows + "</table>\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(doc)
    os.replace(tmp, path)
    return path


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
