"""Triggers polling the metadata DB of checkpointed jobs without blocking the event loop.

Every trigger evaluates one condition of :mod:`.conditions` in a worker thread
(:meth:`CheckpointMetadataHook.arun`), sleeps between polls with ``asyncio.sleep`` (an
adaptive interval, :func:`poll_delay`: every ``FAST_POLL_SECONDS`` during the first
``FAST_PHASE_SECONDS`` of the wait, when the steps of an upgrade or cut-over usually end,
then every ``poll_interval``), and yields exactly one event ``{"status", "message", ...}`` —
``success``, ``error`` (with the job's own failure reason) or ``timeout`` (``end_time``,
seconds since the epoch, passed) — then returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_checkpoint_provider.engine.client import CLIENT_POLL_SECONDS
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.ownership import DagAccess
from airflow_checkpoint_provider.triggers.conditions import (
    ERROR,
    TIMEOUT,
    Outcome,
    check_checkpoint_completed,
    check_control_request,
    check_job_state,
    check_stability,
)

#: the poll interval at the start of a wait: a stop, a promotion, a job start end within
#: seconds, and a fixed ``poll_interval`` (1-2 s) added up to that much latency per step
FAST_POLL_SECONDS = CLIENT_POLL_SECONDS  # the engine's clients (ckpt) poll as often
#: how long a wait polls every ``FAST_POLL_SECONDS`` before it falls back to ``poll_interval``
FAST_PHASE_SECONDS = 30.0


def poll_delay(waited: float, poll_interval: float) -> float:
    """Seconds to sleep before the next poll of a wait that began ``waited`` seconds ago:
    ``FAST_POLL_SECONDS`` (or ``poll_interval`` if shorter) for the first
    ``FAST_PHASE_SECONDS``, then ``poll_interval``. One indexed query per poll: at 5 polls/s
    a waiting task costs the metadata DB little."""
    if waited < FAST_PHASE_SECONDS:
        return min(poll_interval, FAST_POLL_SECONDS)
    return poll_interval


class _MetadataPollTrigger(BaseTrigger):
    """Poll one condition until it holds, fails or ``end_time`` passes."""

    #: the subclass's own constructor kwargs, as :meth:`serialize` lists them
    serialized_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, checkpoint_conn_id: str, poll_interval: float,
                 end_time: float | None, access: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.checkpoint_conn_id = checkpoint_conn_id
        self.poll_interval = poll_interval
        self.end_time = end_time
        #: the DAG this trigger waits for (:meth:`DagAccess.serialize`): a job of another
        #: DAG fails the wait (``None``: any job)
        self.access = access or None

    def _kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"checkpoint_conn_id": self.checkpoint_conn_id,
                               "poll_interval": self.poll_interval, "end_time": self.end_time}
        if self.access:
            out["access"] = self.access
        return out

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The trigger's classpath and exactly its constructor kwargs (Airflow stores them in
        its DB and builds the trigger again from them): ``serialized_fields``, then the poll
        settings."""
        cls = type(self)
        return (f"{cls.__module__}.{cls.__qualname__}",
                {**{name: getattr(self, name) for name in self.serialized_fields},
                 **self._kwargs()})

    @property
    def dag_access(self) -> DagAccess | None:
        return DagAccess.from_kwargs(self.access)

    def _check(self, store: Any) -> Outcome | None:  # runs in a worker thread
        raise NotImplementedError

    def _what(self) -> str:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = CheckpointMetadataHook(checkpoint_conn_id=self.checkpoint_conn_id)
        started = time.monotonic()
        try:
            while True:
                outcome = await hook.arun(self._check)
                if outcome is not None:
                    yield TriggerEvent(outcome.to_event())
                    return
                if self.end_time is not None and time.time() >= self.end_time:
                    yield TriggerEvent({"status": TIMEOUT,
                                        "message": f"timed out waiting for {self._what()}"})
                    return
                await asyncio.sleep(poll_delay(time.monotonic() - started, self.poll_interval))
        except Exception as exc:  # report, do not crash the triggerer
            yield TriggerEvent({"status": ERROR, "message": f"while waiting for {self._what()}: "
                                f"{type(exc).__name__}: {exc}"})
            return
        finally:
            await hook.aclose()


class JobStateTrigger(_MetadataPollTrigger):
    """
    Fire when a job reaches one of ``target_states``.

    :param job: job id, id prefix or job name (its newest job).
    :param target_states: job statuses that mean success (e.g. ``["RUNNING"]``).
    :param failure_states: statuses that mean error (default ``FAILED``, ``CANCELED``); any
        other terminal status not targeted is an error too.
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("job", "target_states", "failure_states")

    def __init__(self, *, job: str, target_states: list[str],
                 failure_states: list[str] | None = None,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 2.0, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.job = job
        self.target_states = list(target_states)
        self.failure_states = None if failure_states is None else list(failure_states)

    def _what(self) -> str:
        return f"job {self.job} to be {' or '.join(self.target_states)}"

    def _check(self, store: Any) -> Outcome | None:
        return check_job_state(store, self.job, target_states=self.target_states,
                               failure_states=self.failure_states, access=self.dag_access)


class CheckpointCompletedTrigger(_MetadataPollTrigger):
    """
    Fire when a job has completed ``min_count`` checkpoints matching the criteria.

    :param job: job id, id prefix or job name (its newest job).
    :param kind: ``CHECKPOINT``, ``SAVEPOINT`` or ``None`` (any).
    :param after_checkpoint_id: count only checkpoints with a higher id.
    :param after_time: count only checkpoints triggered at or after this ISO-8601 time.
    :param after_restore: count only checkpoints triggered after the job's latest (re)start,
        which must have restored state (a savepoint or checkpoint).
    :param min_count: how many matching completed checkpoints are needed.
    :param require_running: the job must also be RUNNING (not restarting or ended).
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("job", "kind", "after_checkpoint_id", "after_time", "after_restore", "min_count", "require_running")

    def __init__(self, *, job: str, kind: str | None = "CHECKPOINT",
                 after_checkpoint_id: int | None = None, after_time: str | None = None,
                 after_restore: bool = False, min_count: int = 1,
                 require_running: bool = False,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 2.0, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.job = job
        self.kind = kind
        self.after_checkpoint_id = after_checkpoint_id
        self.after_time = after_time
        self.after_restore = after_restore
        self.min_count = min_count
        self.require_running = require_running

    def _what(self) -> str:
        return f"{self.min_count} completed {(self.kind or 'checkpoint').lower()}(s) of job {self.job}"

    def _check(self, store: Any) -> Outcome | None:
        after_time = datetime.fromisoformat(self.after_time) if self.after_time else None
        return check_checkpoint_completed(
            store, self.job, kind=self.kind, after_checkpoint_id=self.after_checkpoint_id,
            after_time=after_time, after_restore=self.after_restore, min_count=self.min_count,
            require_running=self.require_running, access=self.dag_access)


class ControlRequestTrigger(_MetadataPollTrigger):
    """
    Fire when a control request (checkpoint, savepoint, stop, cancel) finished and, with
    ``then_job_states``, its job reached one of those statuses (one deferral for a stop).

    :param request_id: the id :meth:`MetadataStore.submit_control_request` returned.
    :param then_job_states: after the request succeeded, also wait for the job to be in one
        of these statuses (e.g. ``["STOPPED", "FINISHED"]``).
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("request_id", "then_job_states")

    def __init__(self, *, request_id: str, then_job_states: list[str] | None = None,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 1.0, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.request_id = request_id
        self.then_job_states = None if then_job_states is None else list(then_job_states)

    def _what(self) -> str:
        then = (f" and its job to be {' or '.join(self.then_job_states)}"
                if self.then_job_states else "")
        return f"control request {self.request_id}{then}"

    def _check(self, store: Any) -> Outcome | None:
        return check_control_request(store, self.request_id,
                                     then_job_states=self.then_job_states,
                                     access=self.dag_access)


class StabilityTrigger(_MetadataPollTrigger):
    """
    Fire with the stability verdict on a job once its window passed (or earlier, when the
    job ended or restarted more often than allowed): ``success`` if stable, else ``error``;
    the event's ``verdict`` has every criterion with its figure.

    :param job_id: the job to judge.
    :param since: start of the window, ISO-8601.
    :param criteria: :class:`~airflow_checkpoint_provider.engine.client.StabilityCriteria`
        as a dict.
    :param baseline_job_id: the job whose throughput is the reference (blue).
    :param checkpoint_conn_id: the metadata DB connection.
    :param poll_interval: seconds between polls.
    :param end_time: give up (``timeout`` event) at this time, seconds since the epoch.
    """

    serialized_fields = ("job_id", "since", "criteria", "baseline_job_id")

    def __init__(self, *, job_id: str, since: str, criteria: dict[str, Any],
                 baseline_job_id: str | None = None,
                 checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 poll_interval: float = 2.0, end_time: float | None = None,
                 access: dict[str, Any] | None = None) -> None:
        super().__init__(checkpoint_conn_id=checkpoint_conn_id, poll_interval=poll_interval,
                         end_time=end_time, access=access)
        self.job_id = job_id
        self.since = since
        self.criteria = dict(criteria)
        self.baseline_job_id = baseline_job_id

    def _what(self) -> str:
        return f"the stability verdict on job {self.job_id}"

    def _check(self, store: Any) -> Outcome | None:
        return check_stability(store, self.job_id, since=datetime.fromisoformat(self.since),
                               criteria=self.criteria, baseline_job_id=self.baseline_job_id,
                               access=self.dag_access)
