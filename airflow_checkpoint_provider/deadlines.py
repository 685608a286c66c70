"""Airflow 3 Deadline Alerts for checkpointed jobs.

A Deadline Alert (``DAG(deadline=DeadlineAlert(...))``, Airflow 3.1+) fires its callback
in the triggerer when a DAG run has not finished by ``reference + interval``. Two alerts a
DAG author adds in one line:

* :func:`savepoint_deadline` — on a savepoint DAG (``dags/scheduled_savepoints.py``): the run
  has not finished (its savepoint has not completed) ``within`` after it was queued;
* :func:`checkpoint_age_deadline` — on a freshness DAG (``dags/checkpoint_freshness.py``)
  whose task waits for a checkpoint completed after the run started: no checkpoint
  completed within ``max_age``, i.e. the job's newest checkpoint is older than that.

Both call :func:`report_missed_deadline`, which reads the job's state from the metadata DB
and logs one warning with the figures (job status, newest checkpoint and its age, newest
savepoint); pass ``notify`` (the dotted path of an async callable taking ``message=`` and
``**kwargs``) to also send it somewhere (Slack, PagerDuty, ...).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference

from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook

log = logging.getLogger(__name__)


def _age(record: Any) -> str:
    when = getattr(record, "complete_time", None) or getattr(record, "trigger_time", None)
    if when is None:
        return "age unknown"
    return f"{(datetime.now(UTC) - when).total_seconds():.0f} s old"


def describe_job_health(store: Any, job_name: str) -> dict[str, Any]:
    """The figures a missed deadline reports (blocking: call it in a thread)."""
    jobs = store.list_jobs(job_name=job_name)
    job = jobs[0] if jobs else None
    chk = store.latest_completed_checkpoint(job_name=job_name, kind="CHECKPOINT")
    sp = store.latest_completed_checkpoint(job_name=job_name, kind="SAVEPOINT")
    return {
        "job_name": job_name, "job_id": job.job_id if job else None,
        "status": job.status if job else "no job",
        "latest_checkpoint": None if chk is None else
        {"checkpoint_id": chk.checkpoint_id, "location": chk.location, "age": _age(chk)},
        "latest_savepoint": None if sp is None else
        {"checkpoint_id": sp.checkpoint_id, "location": sp.location, "age": _age(sp)},
    }


async def report_missed_deadline(*, job_name: str, what: str,
                                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                                 notify: str | None = None, context: Any = None) -> str:
    """The callback of the alerts below: log (and optionally send) what the job looks like."""
    hook = CheckpointMetadataHook(checkpoint_conn_id=checkpoint_conn_id)
    try:
        health = await hook.arun(describe_job_health, job_name)
    except Exception as exc:  # noqa: BLE001 - the alert still says what was missed
        health = {"job_name": job_name, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        await hook.aclose()
    chk, sp = health.get("latest_checkpoint"), health.get("latest_savepoint")
    message = (f"Deadline missed: {what} of job {job_name} "
               f"({health.get('status', 'unknown')}); newest checkpoint: "
               + (f"{chk['checkpoint_id']} ({chk['age']})" if chk else "none")
               + "; newest savepoint: " + (f"{sp['checkpoint_id']} ({sp['age']})" if sp else "none")
               + (f"; {health['error']}" if "error" in health else ""))
    log.warning("%s", message)
    if notify:
        from airflow.sdk._shared.module_loading import import_string

        await import_string(notify)(message=message, health=health)
    return message


def _alert(job_name: str, interval: timedelta, what: str, notify: str | None,
           checkpoint_conn_id: str) -> DeadlineAlert:
    kwargs: dict[str, Any] = {"job_name": job_name, "what": what,
                              "checkpoint_conn_id": checkpoint_conn_id}
    if notify:
        kwargs["notify"] = notify
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=interval,
                         callback=AsyncCallback(report_missed_deadline, kwargs=kwargs),
                         name=f"{what} ({job_name})")


def savepoint_deadline(job_name: str, within: timedelta, *, notify: str | None = None,
                       checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                       ) -> DeadlineAlert:
    """Alert when a savepoint DAG run has not finished ``within`` after it was queued."""
    return _alert(job_name, within, "a savepoint has not completed", notify, checkpoint_conn_id)


def checkpoint_age_deadline(job_name: str, max_age: timedelta, *, notify: str | None = None,
                            checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                            ) -> DeadlineAlert:
    """Alert when a freshness DAG run (waiting for a checkpoint newer than its start) has not
    finished within ``max_age``: the job's newest checkpoint is older than ``max_age``."""
    return _alert(job_name, max_age, f"no checkpoint completed within {max_age}", notify,
                  checkpoint_conn_id)
