"""What sensors, triggers and operators wait for, as plain functions of the metadata store.

Each ``check_*`` function reads the metadata DB once and returns ``None`` (not yet: poll
again) or an :class:`Outcome` — ``success`` or ``error`` with a message that carries the
job's own failure reason. Sensors call them in ``poke()``, triggers in a worker thread
(``CheckpointMetadataHook.arun``), operators in their synchronous wait loops: one
definition of every condition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_checkpoint_provider.engine.client import (
    ACTIVE_JOB_STATUSES,
    CheckpointStatus,
    ControlRequestStatus,
    JobRecord,
    JobStatus,
    MetadataStore,
    StabilityCriteria,
    assess_stability,
    checkpoint_consumer_lag,
    driver_is_gone,
    early_verdict,
    heartbeat_timeout,
)
from airflow_checkpoint_provider.hooks.launcher import find_launch
from airflow_checkpoint_provider.ownership import DagAccess

#: Event statuses a trigger may fire; ``execute_complete`` fails on anything else.
SUCCESS, ERROR, TIMEOUT = "success", "error", "timeout"
#: Checkpoint statuses of checkpoints that did complete (SUBSUMED = completed, then retired).
DONE_CHECKPOINT_STATUSES = (CheckpointStatus.COMPLETED, CheckpointStatus.SUBSUMED)


@dataclass(frozen=True)
class Outcome:
    status: str
    message: str
    payload: dict[str, Any] = field(default_factory=dict)

    def to_event(self) -> dict[str, Any]:
        return {**self.payload, "status": self.status, "message": self.message}


def current_job(store: MetadataStore, job: str,
                access: DagAccess | None = None) -> JobRecord | None:
    """The job, after declaring it LOST if it is active without a recent heartbeat, or its
    driver's process on this host is gone (a dead driver must not keep a wait going until
    its timeout). A job ``access`` may not see raises
    :class:`~airflow_checkpoint_provider.ownership.JobOwnershipError`."""
    try:
        # by id, id prefix or name; for a name the active job of that name (v1 restarted
        # after a failed v2), else the newest
        rec = store.resolve_job(job)
    except LookupError:
        return None
    if access is not None:
        access.check(rec, "wait for")
    if rec.status in ACTIVE_JOB_STATUSES:
        last = rec.heartbeat_at or rec.created_at
        stale = (datetime.now(UTC) - last).total_seconds() > heartbeat_timeout()
        # write only when it is stale or its driver is provably gone (the engine's rule)
        if ((stale or driver_is_gone(rec.driver_host, rec.driver_process))
                and store.mark_lost_jobs(rec.job_name)):
            rec = store.get_job(rec.job_id) or rec
    return rec


def check_not_started(store: MetadataStore, job: str, kind: str = "job") -> Outcome | None:
    """For a wait on job ``job`` that has no row yet: an error once it provably never will
    -- it is a standby that failed or was withdrawn, or the process that launched it exited
    (on this host: :mod:`~airflow_checkpoint_provider.hooks.launcher`); ``None``: it may
    still come (or ``job`` is a name, or it has a row now). ``kind`` names it in the
    message (``"standby job"``)."""
    launch = find_launch(job)
    exited = launch is not None and launch.exited()  # before the rows: written before it exits
    if store.get_job(job) is not None:
        return None
    standby = store.get_standby(job)
    name = (standby.job_name if standby is not None and standby.job_name
            else launch.job_name if launch is not None else "")
    who = f"{kind} {name} ({job})" if name else f"{kind} {job}"
    payload: dict[str, Any] = {"job_id": job, "job_name": name or None}
    if standby is not None:
        payload["standby_status"] = standby.status
        if standby.is_terminal:
            return Outcome(ERROR, f"{who} is {standby.status}: "
                                  f"{standby.detail or 'no reason recorded'} (a standby of job "
                                  f"{standby.waits_for_job_id or '?'} without a job row: it will "
                                  "not run)", payload)
    if exited:
        assert launch is not None
        state = (f"said {standby.status} as a standby of job {standby.waits_for_job_id}, but"
                 if standby is not None else "has no job row and")
        return Outcome(ERROR, f"{who} {state} will not run: {launch.describe_exit()}",
                       payload)
    return None


def describe_job(job: JobRecord) -> str:
    reason = f": {job.failure_reason}" if job.failure_reason else ""
    return f"job {job.job_name} ({job.job_id}) is {job.status}{reason}"


def check_job_state(store: MetadataStore, job: str, *, target_states: list[str],
                    failure_states: list[str] | None = None,
                    access: DagAccess | None = None) -> Outcome | None:
    """Success once ``job`` (id, id prefix or name) is in one of ``target_states``; error when
    it is in ``failure_states`` (default: FAILED, CANCELED) or ended in a state not targeted."""
    rec = current_job(store, job, access)
    if rec is None:
        return check_not_started(store, job)
    payload = {"job_id": rec.job_id, "job_name": rec.job_name, "job_status": rec.status,
               "failure_reason": rec.failure_reason}
    if rec.status in target_states:
        return Outcome(SUCCESS, describe_job(rec), payload)
    failing = [JobStatus.FAILED, JobStatus.CANCELED] if failure_states is None else failure_states
    if rec.status in failing or rec.is_terminal:
        return Outcome(ERROR, f"{describe_job(rec)} (waited for {', '.join(target_states)})",
                       payload)
    return None


def check_checkpoint_completed(store: MetadataStore, job: str, *, kind: str | None = "CHECKPOINT",
                               after_checkpoint_id: int | None = None,
                               after_time: datetime | None = None, after_restore: bool = False,
                               min_count: int = 1, require_running: bool = False,
                               access: DagAccess | None = None) -> Outcome | None:
    """Success once ``job`` has ``min_count`` completed checkpoints of ``kind`` (``None``: any)
    newer than ``after_checkpoint_id`` / triggered after ``after_time`` and, with
    ``after_restore``, triggered after the job's latest (re)start that restored state; with
    ``require_running`` the job must also be RUNNING at that moment (a health gate).
    Error when the job ended (or is not active any more) before that."""
    rec = current_job(store, job, access)
    if rec is None:
        return check_not_started(store, job)
    not_before = after_time
    if after_restore:
        attempts = store.list_attempts(rec.job_id)
        current = attempts[-1] if attempts else None
        if current is None or (not current.restored_from and rec.status == JobStatus.RESTARTING):
            if rec.status in ACTIVE_JOB_STATUSES:
                return None  # not started yet, or between attempts
            return Outcome(ERROR, f"{describe_job(rec)} before any attempt restored state",
                           {"job_id": rec.job_id, "job_status": rec.status,
                            "failure_reason": rec.failure_reason})
        if not current.restored_from:
            return Outcome(ERROR, f"{describe_job(rec)}; its attempt {current.attempt} did not "
                           "restore any state, so no checkpoint can follow a restore",
                           {"job_id": rec.job_id, "job_status": rec.status})
        if not_before is None or current.started_at > not_before:
            not_before = current.started_at
    done = [c for c in store.list_checkpoints(rec.job_id, kind=kind)
            if c.status in DONE_CHECKPOINT_STATUSES
            and (after_checkpoint_id is None or c.checkpoint_id > after_checkpoint_id)
            and (not_before is None or c.trigger_time >= not_before)]
    if len(done) >= max(1, min_count) and (rec.status == JobStatus.RUNNING or not require_running):
        newest = done[-1]
        return Outcome(
            SUCCESS,
            f"job {rec.job_name} ({rec.job_id}) completed {len(done)} checkpoint(s); newest "
            f"{newest.checkpoint_id} at {newest.location}",
            {"job_id": rec.job_id, "checkpoint_id": newest.checkpoint_id,
             "location": newest.location, "count": len(done), "job_status": rec.status})
    if rec.status not in ACTIVE_JOB_STATUSES:
        return Outcome(ERROR, f"{describe_job(rec)} after {len(done)} of {min_count} "
                       "expected completed checkpoint(s)",
                       {"job_id": rec.job_id, "job_status": rec.status,
                        "failure_reason": rec.failure_reason, "count": len(done)})
    return None


def check_control_request(store: MetadataStore, request_id: str, *,
                          then_job_states: list[str] | None = None,
                          access: DagAccess | None = None) -> Outcome | None:
    """Success when the request SUCCEEDED (payload: its result) and, with
    ``then_job_states``, its job has also reached one of those statuses (a stop: STOPPED);
    error when the request FAILED or the job ended in another status."""
    req = store.get_control_request(request_id)
    if req is None:
        return Outcome(ERROR, f"no control request with id {request_id!r}",
                       {"request_id": request_id})
    if access is not None:
        owner = store.get_job(req.job_id)
        if owner is not None:
            access.check(owner, "read the control requests of")
    if not req.is_done:
        # a job that died answers nothing: declared LOST (silent, or its driver's process
        # gone), which fails its open requests; one that ended without answering fails here
        job = current_job(store, req.job_id)
        if job is None or not job.is_terminal:
            return None
        req = store.get_control_request(request_id) or req
        if not req.is_done:
            return Outcome(ERROR, f"{req.action} request {request_id} was never answered: "
                           f"{describe_job(job)}",
                           {"request_id": request_id, "job_id": req.job_id,
                            "action": req.action, "job_status": job.status})
    result = dict(req.result or {})
    payload = {"request_id": request_id, "job_id": req.job_id, "action": req.action, **result}
    if req.status == ControlRequestStatus.SUCCEEDED:
        where = f" at {result['location']}" if result.get("location") else ""
        message = f"{req.action} request {request_id} of job {req.job_id} succeeded{where}"
        if then_job_states:
            job = current_job(store, req.job_id)  # a job that died on the way is declared LOST
            if job is None or job.status not in then_job_states:
                if job is not None and job.is_terminal:
                    return Outcome(ERROR, f"{message}, but then {describe_job(job)} (waited "
                                   f"for {', '.join(then_job_states)})",
                                   {**payload, "job_status": job.status})
                return None
            payload["job_status"] = job.status
            message += f"; {describe_job(job)}"
        return Outcome(SUCCESS, message, payload)
    job = store.get_job(req.job_id)
    why = req.error or "no reason given"
    if job is not None and job.failure_reason and job.failure_reason not in why:
        why = f"{why} (job {job.status}: {job.failure_reason})"
    return Outcome(ERROR, f"{req.action} request {request_id} of job {req.job_id} failed: "
                   f"{why}", payload)


def check_stability(store: MetadataStore, job_id: str, *, since: datetime,
                    criteria: dict[str, Any], baseline_job_id: str | None = None,
                    now: datetime | None = None,
                    access: DagAccess | None = None) -> Outcome | None:
    """The stability verdict on ``job_id`` once ``criteria["window_s"]`` passed since
    ``since`` (success if stable, else error); before that, an error only when waiting cannot
    help (the job ended or restarted too often), else ``None``. The payload's ``verdict``
    holds every criterion with its figure and bound."""
    crit = StabilityCriteria.from_dict(criteria)
    now = now or datetime.now(UTC)
    current_job(store, job_id, access)  # declares a silent job LOST
    if (now - since).total_seconds() < crit.window_s:
        verdict = early_verdict(store, job_id, since=since, criteria=crit)
        if verdict is None:
            return None
    else:
        verdict = assess_stability(store, job_id, since=since, until=now, criteria=crit,
                                   baseline_job_id=baseline_job_id)
    return Outcome(SUCCESS if verdict.ok else ERROR, verdict.describe(),
                   {"job_id": job_id, "verdict": verdict.to_dict()})


def check_kafka_caught_up(store: MetadataStore, job: str, *, max_lag: int, for_seconds: float,
                          after_time: datetime | None = None,
                          access: DagAccess | None = None) -> Outcome | None:
    """Success once ``job`` (id, id prefix or name) is RUNNING and its Kafka consumer lag
    (the sum over every partition of its Kafka sources, recorded with each completed
    checkpoint: :mod:`~airflow_checkpoint_provider.engine.connectors.kafka.lag`) was at most
    ``max_lag`` records at every completed checkpoint triggered over the last
    ``for_seconds`` or more: the newest checkpoints, back to the first whose lag was at most
    ``max_lag`` with none above it since, span at least ``for_seconds`` between their
    trigger times. The span is measured between checkpoints, never against the clock: a job
    that stopped checkpointing proves nothing new. An unknown lag (a partition without a
    fetch response yet) breaks the span as a lag above the bound does.

    Only checkpoints triggered at or after ``after_time`` count. Error when the job ended,
    or when a completed checkpoint recorded no Kafka lag at all (no ``KafkaSource``: the
    wait could never end)."""
    rec = current_job(store, job, access)
    if rec is None:
        return check_not_started(store, job)
    payload: dict[str, Any] = {"job_id": rec.job_id, "job_name": rec.job_name,
                               "job_status": rec.status}
    if rec.status not in ACTIVE_JOB_STATUSES:
        return Outcome(ERROR, f"{describe_job(rec)} before its Kafka consumer lag stayed at "
                       f"most {max_lag} records for {for_seconds:g} s",
                       {**payload, "failure_reason": rec.failure_reason})
    done = [c for c in store.list_checkpoints(rec.job_id)
            if c.status in DONE_CHECKPOINT_STATUSES
            and (after_time is None or c.trigger_time >= after_time)]
    lags = [(c, checkpoint_consumer_lag(c)) for c in done]
    if done and all(lag is None for _, lag in lags):
        return Outcome(ERROR, f"job {rec.job_name} ({rec.job_id}) completed checkpoint "
                       f"{done[-1].checkpoint_id} without a Kafka consumer lag: it reads no "
                       "Kafka topic (KafkaSource), so it can never be caught up", payload)
    run = []  # the newest checkpoints with a known lag of at most max_lag
    for c, lag in reversed(lags):
        if lag is None or lag.total is None or lag.total > max_lag:
            break
        run.append((c, lag))
    if not run or rec.status != JobStatus.RUNNING:
        return None
    (first, _), (newest, latest) = run[-1], run[0]
    span = (newest.trigger_time - first.trigger_time).total_seconds()
    if span < for_seconds:
        return None
    return Outcome(
        SUCCESS,
        f"job {rec.job_name} ({rec.job_id}) caught up: Kafka consumer lag at most {max_lag} "
        f"records at checkpoints {first.checkpoint_id} to {newest.checkpoint_id} ({span:.1f} s, "
        f"at least {for_seconds:g} s); at checkpoint {newest.checkpoint_id}: {latest.describe()}",
        {**payload, "checkpoint_id": newest.checkpoint_id, "total_lag": latest.total,
         "partitions": latest.by_topic_partition(),
         "caught_up_since": first.trigger_time.isoformat(), "seconds": round(span, 3)})
