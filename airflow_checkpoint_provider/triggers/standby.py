"""Waiting for a standby job (``restore="standby:JOB"``) to be ready for the hand-over.

A standby has no ``jobs`` row while it waits (the job it takes over owns the name); it says
``READY`` in the catalog's ``standbys`` table once its application is up and it only waits
for that job to end (``engine.client.StandbyRecord``). :func:`check_standby_ready` is the
condition, :class:`StandbyReadyTrigger` polls it in the triggerer without blocking the
event loop (as the triggers of :mod:`.checkpoint` do).

A standby that dies before it says anything leaves no row: the wait then asks the record
of its launcher (:mod:`~airflow_checkpoint_provider.hooks.launcher`) and fails within a poll
of its exit, naming the job and showing its log's last lines, instead of at the timeout.
"""

from __future__ import annotations

from typing import Any

from airflow_checkpoint_provider.engine.client import (
    ACTIVE_JOB_STATUSES,
    MetadataStore,
    StandbyStatus,
)
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.triggers.checkpoint import _MetadataPollTrigger
from airflow_checkpoint_provider.triggers.conditions import (
    ERROR,
    SUCCESS,
    Outcome,
    check_not_started,
    current_job,
)


def check_standby_ready(store: MetadataStore, job_id: str) -> Outcome | None:
    """``success`` once standby ``job_id`` is ``READY`` (or already took over and runs);
    ``error`` when it was withdrawn or failed, its job ended or went silent (LOST), or the
    process that launched it exited before it took over (provable on the launcher's host:
    :func:`~airflow_checkpoint_provider.triggers.conditions.check_not_started`); ``None``:
    not up yet."""
    job = current_job(store, job_id)  # a silent job, or one whose driver is gone, is declared LOST
    if job is not None and job.status not in ACTIVE_JOB_STATUSES:
        return Outcome(ERROR, f"standby job {job.job_name} ({job_id}) ended {job.status} after "
                              f"taking over: {job.failure_reason or 'no reason recorded'}",
                       {"job_id": job_id, "job_name": job.job_name})
    if job is None and (gone := check_not_started(store, job_id, "standby job")) is not None:
        return gone  # failed, withdrawn, or its launcher exited (before or after READY)
    standby = store.get_standby(job_id)
    if standby is None:
        return None
    payload = {"job_id": job_id, "job_name": standby.job_name,
               "standby_status": standby.status,
               "waits_for_job_id": standby.waits_for_job_id,
               "ready_at": standby.ready_at.isoformat()}
    if standby.status == StandbyStatus.READY:
        return Outcome(SUCCESS, f"standby job {standby.job_name} ({job_id}) is ready: it "
                                f"waits for job {standby.waits_for_job_id} to end", payload)
    if standby.status == StandbyStatus.TAKEN_OVER:
        return Outcome(SUCCESS, f"standby job {standby.job_name} ({job_id}) already took "
                                f"over from job {standby.waits_for_job_id}, restoring "
                                f"{standby.restore_location}", payload)
    return Outcome(ERROR, f"standby job {standby.job_name} ({job_id}) is {standby.status}: "
                          f"{standby.detail or 'no reason recorded'}", payload)


class StandbyReadyTrigger(_MetadataPollTrigger):
    """
    Fire when standby job ``job_id`` is ready for the hand-over (see
    :func:`check_standby_ready`).

    :param job_id: the id the standby runs under (the submit operator's ``job_id``).
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("job_id",)

    def __init__(self, *, job_id: str,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 2.0, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.job_id = job_id

    def _what(self) -> str:
        return f"standby job {self.job_id} to be ready"

    def _check(self, store: Any) -> Outcome | None:
        return check_standby_ready(store, self.job_id)
