"""Sensors on the metadata DB, each deferrable through a trigger of :mod:`..triggers.checkpoint`.

A sensor succeeds when its condition holds, fails at once (not at the timeout) when the job
ended or failed in a way that makes the condition impossible — with the job's own failure
reason — and raises :class:`AirflowSensorTimeout` when ``timeout`` passes. The sensor's
XCom value is the event payload (``job_id``, ``checkpoint_id``, ``location``, ...).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_checkpoint_provider.assets import (
    CHECKPOINTS_ALIAS,
    emit_snapshot_event,
    snapshot_extra,
    with_alias_outlet,
)
from airflow_checkpoint_provider.engine.client import JobStatus
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook, checked_job_ref
from airflow_checkpoint_provider.ownership import DagAccess, allowed_dags, dag_access
from airflow_checkpoint_provider.triggers.checkpoint import (
    CheckpointCompletedTrigger,
    ControlRequestTrigger,
    JobStateTrigger,
)
from airflow_checkpoint_provider.triggers.conditions import (
    ERROR,
    SUCCESS,
    TIMEOUT,
    Outcome,
    check_checkpoint_completed,
    check_control_request,
    check_job_state,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger


class _MetadataSensor(BaseSensorOperator):
    """Poke a condition; with ``deferrable=True`` wait for it in the triggerer.

    A sensor waits only for jobs of its own DAG, or of the DAGs its author lists in
    ``allowed_owner_dags`` (not templated), or of no DAG: a job of another DAG fails it
    with :class:`~airflow_checkpoint_provider.ownership.JobOwnershipError`."""

    def __init__(self, *, checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 deferrable: bool | None = None,
                 allowed_owner_dags: Sequence[str] | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 2.0)
        super().__init__(**kwargs)
        self.checkpoint_conn_id = checkpoint_conn_id
        self.deferrable = (conf.getboolean("operators", "default_deferrable", fallback=False)
                           if deferrable is None else deferrable)
        self.allowed_owner_dags = sorted(allowed_dags(allowed_owner_dags))

    @property
    def access(self) -> DagAccess | None:
        return dag_access(self, self.allowed_owner_dags)

    @property
    def trigger_access(self) -> dict[str, Any] | None:
        access = self.access
        return None if access is None else access.serialize()

    def condition(self, store: Any) -> Outcome | None:
        raise NotImplementedError

    def trigger(self, end_time: float) -> BaseTrigger:
        raise NotImplementedError

    def poke(self, context: Context) -> PokeReturnValue | bool:
        outcome = self.facts()
        if outcome is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._result(outcome.to_event()))

    def facts(self) -> Outcome | None:
        """The condition, read from the metadata DB now."""
        hook = CheckpointMetadataHook(checkpoint_conn_id=self.checkpoint_conn_id)
        try:
            return self.condition(hook.get_conn())
        finally:
            hook.close()

    def execute(self, context: Context) -> Any:
        # ``job`` is templated (a DAG run's conf): refuse what cannot name a job at once
        if hasattr(self, "job"):  # (a request sensor names a request id, not a job)
            checked_job_ref(self.job or "", f"{self.task_id}: job")
        # Facts first, on every try: a retry after Airflow lost this task's deferral (the
        # scheduler marked it failed while the condition held) decides on the metadata DB,
        # never on the earlier try's bookkeeping.
        outcome = self.facts()
        if outcome is not None:
            return self.settled(context, outcome.to_event())
        if not self.deferrable:
            return super().execute(context)
        self.defer(trigger=self.trigger(time.time() + float(self.timeout)),
                   method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        status = (event or {}).get("status")
        if status == TIMEOUT:
            try:  # it may have held by the time the timeout event ran
                outcome = self.facts()
            except Exception as exc:  # noqa: BLE001 - the DB cannot say otherwise: timed out
                self.log.warning("Could not re-check the metadata DB at the timeout: %s", exc)
                outcome = None
            if outcome is not None:
                return self.settled(context, outcome.to_event())
            raise AirflowSensorTimeout(event["message"])
        if status in (SUCCESS, ERROR):
            return self._result(event)
        raise AirflowException(f"unknown trigger event status {status!r}: {event!r}")

    def settled(self, context: Context, event: dict[str, Any]) -> Any:
        """The condition was decided by a direct read of the metadata DB."""
        return self._result(event)

    def _result(self, event: dict[str, Any]) -> dict[str, Any]:
        if event["status"] != SUCCESS:
            # a fact of the metadata DB (the job ended without it...): retrying cannot help
            raise AirflowFailException(event["message"])
        self.log.info("%s", event["message"])
        return event


class JobStateSensor(_MetadataSensor):
    """
    Wait until a job is in one of ``target_states``.

    :param job: job id, id prefix or job name (its newest job). Templated.
    :param target_states: statuses to wait for (default ``["RUNNING"]``).
    :param failure_states: statuses that fail the sensor at once (default ``FAILED``,
        ``CANCELED``); any other end state not targeted fails it too.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    template_fields: Sequence[str] = ("job",)

    def __init__(self, *, job: str, target_states: Sequence[str] = (JobStatus.RUNNING,),
                 failure_states: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.target_states = list(target_states)
        self.failure_states = None if failure_states is None else list(failure_states)

    def condition(self, store: Any) -> Outcome | None:
        return check_job_state(store, self.job, target_states=self.target_states,
                               failure_states=self.failure_states, access=self.access)

    def trigger(self, end_time: float) -> BaseTrigger:
        return JobStateTrigger(job=self.job, target_states=self.target_states,
                               failure_states=self.failure_states, access=self.trigger_access,
                               checkpoint_conn_id=self.checkpoint_conn_id,
                               poll_interval=self.poke_interval, end_time=end_time)


class CheckpointCompletedSensor(_MetadataSensor):
    """
    Wait for completed checkpoints of a job: newer than a checkpoint id or a time, after a
    restore, and at least ``min_count`` of them (a health gate: "K checkpoints in time").

    :param job: job id, id prefix or job name (its newest job). Templated.
    :param kind: ``"CHECKPOINT"``, ``"SAVEPOINT"`` or ``None`` (any).
    :param after_checkpoint_id: only checkpoints with a higher id. Templated.
    :param after_time: only checkpoints triggered at or after this time (datetime or
        ISO-8601 string; naive means UTC). Templated.
    :param after_restore: only checkpoints triggered after the job's latest (re)start, which
        must have restored a savepoint or checkpoint (fails at once if it restored nothing).
    :param min_count: how many matching completed checkpoints to wait for. Templated.
    :param require_running: the job must also be RUNNING when they are there (health gate).
    :param emit_asset: when satisfied, emit an asset event of the newest checkpoint seen
        (``checkpoint://<job_name>/checkpoints``, or ``/savepoints`` for a savepoint; extras
        as the savepoint operators') through the ``checkpoint-checkpoints`` alias outlet
        (default ``False``).
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    template_fields: Sequence[str] = ("job", "after_checkpoint_id", "after_time", "min_count")

    def __init__(self, *, job: str, kind: str | None = "CHECKPOINT",
                 after_checkpoint_id: int | str | None = None,
                 after_time: datetime | str | None = None, after_restore: bool = False,
                 min_count: int | str = 1, require_running: bool = False,
                 emit_asset: bool = False, **kwargs: Any) -> None:
        super().__init__(**with_alias_outlet(kwargs, CHECKPOINTS_ALIAS, emit_asset))
        self.emit_asset = emit_asset
        self.job = job
        self.kind = kind
        self.after_checkpoint_id = after_checkpoint_id
        self.after_time = after_time
        self.after_restore = after_restore
        self.min_count = min_count
        self.require_running = require_running

    def _after_id(self) -> int | None:
        value = self.after_checkpoint_id
        return None if value in (None, "", "None") else int(value)  # type: ignore[arg-type]

    def _after_time(self) -> str | None:
        value = self.after_time
        if value in (None, "", "None"):
            return None
        when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.isoformat()

    def condition(self, store: Any) -> Outcome | None:
        after_time = self._after_time()
        return check_checkpoint_completed(
            store, self.job, kind=self.kind, after_checkpoint_id=self._after_id(),
            after_time=datetime.fromisoformat(after_time) if after_time else None,
            after_restore=self.after_restore, min_count=int(self.min_count),
            require_running=self.require_running, access=self.access)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        result = super().poke(context)
        if self.emit_asset and isinstance(result, PokeReturnValue) and result.is_done:
            self._emit(context, result.xcom_value)
        return result

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        result = super().execute_complete(context, event)
        if self.emit_asset:
            self._emit(context, result)
        return result

    def settled(self, context: Context, event: dict[str, Any]) -> Any:
        result = self._result(event)
        if self.emit_asset:
            self._emit(context, result)
        return result

    def _emit(self, context: Context, event: dict[str, Any]) -> None:
        hook = CheckpointMetadataHook(checkpoint_conn_id=self.checkpoint_conn_id)
        try:
            store = hook.get_conn()
            job = store.get_job(event["job_id"])
            record = store.get_checkpoint(job.job_id, int(event["checkpoint_id"]))
        finally:
            hook.close()
        kind = record.kind if record is not None else (self.kind or "CHECKPOINT")
        extra = snapshot_extra(job_id=job.job_id, job_name=job.job_name,
                               checkpoint_id=event["checkpoint_id"], location=event["location"],
                               kind=kind, record=record)
        asset = emit_snapshot_event(context, CHECKPOINTS_ALIAS, extra)
        if asset is not None:
            self.log.info("Asset event %s: %s %s of job %s", asset.uri, kind.lower(),
                          event["checkpoint_id"], job.job_id)

    def trigger(self, end_time: float) -> BaseTrigger:
        return CheckpointCompletedTrigger(
            job=self.job, kind=self.kind, after_checkpoint_id=self._after_id(),
            after_time=self._after_time(), after_restore=self.after_restore,
            min_count=int(self.min_count), require_running=self.require_running,
            access=self.trigger_access, checkpoint_conn_id=self.checkpoint_conn_id,
            poll_interval=self.poke_interval, end_time=end_time)


class ControlRequestSensor(_MetadataSensor):
    """
    Wait until a control request (checkpoint, savepoint, stop, cancel) finished; fail when it
    FAILED. The XCom value holds its result (``checkpoint_id``, ``location``, ...).

    :param request_id: the control request id (e.g. XCom ``request_id`` of a savepoint task
        run with ``deferrable``). Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    template_fields: Sequence[str] = ("request_id",)

    def __init__(self, *, request_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.request_id = request_id

    def condition(self, store: Any) -> Outcome | None:
        return check_control_request(store, self.request_id, access=self.access)

    def trigger(self, end_time: float) -> BaseTrigger:
        return ControlRequestTrigger(request_id=self.request_id, access=self.trigger_access,
                                     checkpoint_conn_id=self.checkpoint_conn_id,
                                     poll_interval=self.poke_interval, end_time=end_time)
