"""The blue-green cut-over in one deferral: blue stops with a savepoint, the fenced green
restores it in place, green commits at once (issue 54 item 2).

Before, ``stop_blue`` (a stop-with-savepoint) and ``promote_green`` (a ``PROMOTE`` request)
were two tasks: between blue's last commit and green's first sat a trigger event, a task
resuming in a worker, the next task's scheduling and start, its own deferral and trigger
-- seconds each on a loaded scheduler. :func:`check_cutover` advances the whole cut-over
from the metadata DB at each poll of one trigger, so nothing of Airflow lies on that path:

1. blue's ``STOP_WITH_SAVEPOINT`` request (submitted by the operator) must succeed; its
   result names the savepoint. A failed stop ends the cut-over (blue keeps running, green
   stays fenced and is never asked);
2. the ``PROMOTE`` request of green is submitted as soon as the savepoint completed (while
   blue still commits and ends: the job master's promotion waits up to
   ``OWNER_WAIT_SECONDS`` for it, so green restores the moment blue has ended);
3. once the promoted attempt runs, a ``CHECKPOINT`` request makes green's first commit
   (a two-phase-commit sink publishes on a completed checkpoint) come at once, not after a
   checkpoint interval;
4. the event: the savepoint, whether green was promoted (``promoted``; a refused promotion
   is ``False`` with its reason, after blue reached STOPPED, so that the DAG can resubmit
   green from the savepoint) and the request ids.

Every write carries an idempotency key derived from the task instance's, so a poll that runs
twice (a triggerer restart, a retried task) finds the requests of the first instead of
submitting others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_checkpoint_provider.engine.client import JobStatus
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.triggers.checkpoint import _MetadataPollTrigger
from airflow_checkpoint_provider.triggers.conditions import (
    ERROR,
    SUCCESS,
    Outcome,
    check_control_request,
    current_job,
)

#: what blue must be before the cut-over is over (a stop ends STOPPED; a bounded job may
#: have FINISHED meanwhile)
BLUE_ENDED = (JobStatus.STOPPED, JobStatus.FINISHED)


def check_cutover(store: Any, *, stop_request_id: str | None, snapshot: str | None,
                  green_job_id: str | None, key: str, blue_job_id: str | None = None,
                  unfence: bool = True, checkpoint_after: bool = True,
                  access: Any = None) -> Outcome | None:
    """One step of the cut-over (module docstring, steps 1-4); ``None``: not yet.

    :param stop_request_id: blue's stop request (``None`` with ``snapshot``: blue already
        stopped with that savepoint).
    :param snapshot: the savepoint green restores when the stop's result is not needed.
    :param green_job_id: the fenced green (``None``: no promotion, only the stop).
    :param key: the idempotency key prefix of the requests this step submits.
    :param blue_job_id: blue (read from the stop request when there is one).
    """
    payload: dict[str, Any] = {"stop_request_id": stop_request_id, "job_id": blue_job_id}
    # 1. blue's stop savepoint
    if stop_request_id is not None:
        stop = check_control_request(store, stop_request_id, access=access)
        if stop is None:
            return None
        if stop.status != SUCCESS:
            return Outcome(ERROR, stop.message, {**stop.payload, **payload, "promoted": False})
        payload.update(stop.payload)
        snapshot = stop.payload.get("location")
    payload["location"] = snapshot
    blue_ended = _blue_ended(store, payload)
    if green_job_id is None:
        if blue_ended is None:
            return None
        return blue_ended if blue_ended.status != SUCCESS else Outcome(
            SUCCESS, f"blue stopped with its savepoint {snapshot}",
            {**payload, "promoted": None})
    # 2. green restores the savepoint in place (idempotent: the key finds the first request)
    promote_id = _submit_once(store, green_job_id, "PROMOTE",
                              {"snapshot": snapshot, "unfence": unfence}, f"{key}:promote")
    if not isinstance(promote_id, str):  # green ended meanwhile
        return _not_promoted(store, payload, f"green {green_job_id} takes no PROMOTE: "
                             f"{promote_id}")
    payload["promote_request_id"] = promote_id
    promote = check_control_request(store, promote_id, then_job_states=[JobStatus.RUNNING],
                                    access=access)
    if promote is None:
        return None
    if promote.status != SUCCESS:
        return _not_promoted(store, payload, promote.message)
    # 3. green's first commit now, not one checkpoint interval after its restore
    if checkpoint_after:  # (green ended meanwhile: no request; its own status says why)
        first = _submit_once(store, green_job_id, "CHECKPOINT", {}, f"{key}:first-commit")
        payload["checkpoint_request_id"] = first if isinstance(first, str) else None
    blue_ended = _blue_ended(store, payload)
    if blue_ended is None:  # a promotion waits for blue to end: not expected, but exact
        return None
    # 4. the event
    return Outcome(SUCCESS, f"green {green_job_id} restored blue's final savepoint {snapshot} "
                   f"in place and publishes; {blue_ended.message}",
                   {**payload, "promoted": True, "green_job_id": green_job_id})


def _submit_once(store: Any, job_id: str, action: str, params: dict[str, Any],
                 key: str) -> str | Exception:
    """The id of the request under ``key`` (submitted now if there is none yet), or why the
    job takes none."""
    earlier = store.find_control_request(key)
    if earlier is not None:
        return str(earlier.request_id)
    try:
        return str(store.submit_control_request(job_id, action, params, idempotency_key=key))
    except (ValueError, LookupError) as exc:
        return exc


def _blue_ended(store: Any, payload: dict[str, Any]) -> Outcome | None:
    """Success once blue (the stop's job) is STOPPED or FINISHED; ``None`` before."""
    job_id = payload.get("job_id")
    if job_id is None:
        return Outcome(SUCCESS, "blue had stopped before", {})
    job = current_job(store, job_id)  # a blue that died after its savepoint: LOST, an error
    if job is None or job.status in BLUE_ENDED:
        payload["job_status"] = None if job is None else job.status
        return Outcome(SUCCESS, f"blue {job_id} is {payload['job_status']}", {})
    if job.is_terminal:
        return Outcome(ERROR, f"blue {job.job_name} ({job_id}) ended {job.status} after its "
                       f"stop savepoint: {job.failure_reason or 'no reason given'}", {})
    return None


def _not_promoted(store: Any, payload: dict[str, Any], why: str) -> Outcome | None:
    """A refused promotion: success with ``promoted=False`` once blue ended (the DAG then
    submits green again from the savepoint), ``None`` until then."""
    ended = _blue_ended(store, payload)
    if ended is None:
        return None
    if ended.status != SUCCESS:
        return Outcome(ERROR, f"{ended.message}; the promotion: {why}",
                       {**payload, "promoted": False})
    return Outcome(SUCCESS, f"blue stopped with its savepoint {payload.get('location')}; green "
                   f"was not promoted in place: {why}",
                   {**payload, "promoted": False, "not_promoted_reason": why})


class CutOverTrigger(_MetadataPollTrigger):
    """
    Fire when the cut-over of :func:`check_cutover` is over: blue stopped with a savepoint
    and (with ``green_job_id``) the fenced green restored it in place, or was refused.

    :param stop_request_id: blue's ``STOP_WITH_SAVEPOINT`` request.
    :param snapshot: the savepoint to promote when blue already stopped (no stop request).
    :param green_job_id: the fenced green job (``None``: stop only).
    :param key: idempotency key prefix of the requests the trigger submits.
    :param blue_job_id: blue's job id.
    :param unfence: green publishes after the restore.
    :param checkpoint_after: request a checkpoint of green right after its restore.
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls (the first 30 s poll every 0.2 s).
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("stop_request_id", "key", "snapshot", "green_job_id", "blue_job_id",
                         "unfence", "checkpoint_after")

    def __init__(self, *, stop_request_id: str | None, key: str,
                 snapshot: str | None = None, green_job_id: str | None = None,
                 blue_job_id: str | None = None, unfence: bool = True, checkpoint_after: bool = True,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 0.5, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.stop_request_id = stop_request_id
        self.snapshot = snapshot
        self.green_job_id = green_job_id
        self.blue_job_id = blue_job_id
        self.key = key
        self.unfence = unfence
        self.checkpoint_after = checkpoint_after

    def _what(self) -> str:
        stop = (f"blue's stop request {self.stop_request_id}" if self.stop_request_id
                else f"blue's savepoint {self.snapshot}")
        green = f" and green {self.green_job_id}'s promotion" if self.green_job_id else ""
        return f"the cut-over ({stop}{green})"

    def _check(self, store: Any) -> Outcome | None:
        return check_cutover(store, stop_request_id=self.stop_request_id,
                             snapshot=self.snapshot, green_job_id=self.green_job_id,
                             key=self.key, blue_job_id=self.blue_job_id,
                             unfence=self.unfence,
                             checkpoint_after=self.checkpoint_after, access=self.dag_access)


__all__: Sequence[str] = ("CutOverTrigger", "check_cutover")
