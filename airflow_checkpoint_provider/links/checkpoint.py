"""Extra link from submit / savepoint tasks to the job's checkpoint history in the Airflow UI.

The link points at the checkpoint-history plugin served by the api-server
(``/checkpoints/jobs/<job_id>``, see :mod:`airflow_checkpoint_provider.plugins.checkpoint_ui`):
one page per job, live from the metadata DB, reachable from any browser that reaches the
api-server (prefixed with ``[api] base_url`` when it is set). The task stores the URL in
XCom when it knows the job. ``report_dir`` additionally writes a static HTML snapshot of the
checkpoint table there (for archives); the link does not depend on it.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context
    from airflow.sdk.types import TaskInstanceKey

    from airflow_checkpoint_provider.engine.client import MetadataStore

class CheckpointHistoryLink(BaseOperatorLink):
    """Link to a report of the checkpoints of the job the task submitted or savepointed."""

    name = "Checkpoint history"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

    @staticmethod
    def url_for(job_id: str) -> str:
        """The job's page in the Airflow UI's checkpoint-history plugin."""
        from airflow.sdk import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return f"{base}/checkpoints/jobs/{job_id}"

    @classmethod
    def persist(cls, context: Context, store: MetadataStore, job_id: str,
                report_dir: str | None = None) -> str:
        """Store the URL of ``job_id``'s page for the link (and, with ``report_dir``, write
        a static snapshot of its checkpoint table there); return the URL."""
        if report_dir:
            write_history_report(store, job_id, report_dir)
        url = cls.url_for(job_id)
        context["ti"].xcom_push(key=cls().xcom_key, value=url)
        return url


def write_history_report(store: MetadataStore, job_id: str, report_dir: str | None = None) -> str:
    """Write ``<report_dir>/<job_name>-<job_id>-checkpoints.html`` (the page of ``ckpt
    report`` and of the UI plugin, as of now; ``0600`` in a directory created ``0700``);
    return its absolute path. The job's name and id come from the metadata DB: a name that
    is not a valid job name (``../x``, a slash) is replaced by ``job``, an invalid id is
    refused (:class:`InvalidNameError`), and the file must land inside ``report_dir``."""
    from airflow_checkpoint_provider.engine.client import (
        InvalidNameError,
        ReportData,
        makedirs_private,
        render_report_html,
        user_temp_dir,
        validate_job_id,
        validate_job_name,
    )

    data = ReportData.load(store, job_id)
    report_dir = os.path.abspath(report_dir) if report_dir else user_temp_dir("checkpoint-reports")
    makedirs_private(report_dir)
    validate_job_id(data.job.job_id, "job id (from the metadata DB)")
    try:
        name = validate_job_name(data.job.job_name, "job name (from the metadata DB)")
    except InvalidNameError:
        name = "job"
    path = os.path.join(report_dir, f"{name}-{data.job.job_id}-checkpoints.html")
    if os.path.dirname(os.path.abspath(path)) != report_dir:  # defence in depth
        raise InvalidNameError(f"report path {path!r} escapes {report_dir!r}")
    fd, tmp = tempfile.mkstemp(dir=report_dir, prefix=".report-", suffix=".tmp")  # 0600
    with os.fdopen(fd, "w") as f:
        f.write(render_report_html(data))
    os.replace(tmp, path)
    return path
