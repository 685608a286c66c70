"""Stop a job for an upgrade, in one of three upgrade modes, and say what to restore from.

The modes follow the Flink Kubernetes Operator's ``upgradeMode``:

``savepoint``
    Stop the job with a savepoint (:class:`StopWithSavepointOperator`). If the savepoint
    fails the task fails and the job keeps running.
``last-state``
    Cancel the job and restore from its latest completed checkpoint (or savepoint, if that
    is newer). Refused, before the job is touched, when there is none or it is older than
    ``max_checkpoint_age``. Works when the job cannot take a savepoint (restarting, failed,
    lost). Exactly-once still holds: what the job wrote after that checkpoint was never
    committed, and the new job commits the checkpoint's pending transactions on restore.
``savepoint-or-last-state``
    ``savepoint`` when the job is RUNNING; ``last-state`` when it is not, or when the
    savepoint fails or times out. The fallback is logged as a warning and pushed to XCom
    (``upgrade_mode_used``, ``fallback_reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.engine.client import (
    ACTIVE_JOB_STATUSES,
    JobStatus,
    pin_checkpoint,
    unpin_savepoint,
)
from airflow_checkpoint_provider.operators.control import (
    StopWithSavepointOperator,
    TriggerSavepointOperator,
)
from airflow_checkpoint_provider.operators.savepoints import dag_run_holder
from airflow_checkpoint_provider.triggers.conditions import SUCCESS
from airflow_checkpoint_provider.triggers.standby import check_standby_ready

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_checkpoint_provider.engine.client import CheckpointRecord, JobRecord

SAVEPOINT, LAST_STATE, SAVEPOINT_OR_LAST_STATE = "savepoint", "last-state", "savepoint-or-last-state"
UPGRADE_MODES = (SAVEPOINT, LAST_STATE, SAVEPOINT_OR_LAST_STATE)


class StopForUpgradeOperator(StopWithSavepointOperator):
    """
    Stop a job so that its next version can take over its state; the return value is the
    snapshot (savepoint or checkpoint directory) to restore the next version from.

    XCom: return value = the snapshot; ``upgrade_mode_used`` (``savepoint`` or
    ``last-state``), ``fallback_reason`` (why ``savepoint-or-last-state`` fell back, else
    ``None``), ``checkpoint_id``, ``job_id``; ``savepoint_path`` when a savepoint was taken.

    :param job: job id, id prefix or job name (its newest job). Templated.
    :param upgrade_mode: ``savepoint``, ``last-state`` or ``savepoint-or-last-state`` (see the
        module documentation). Templated.
    :param max_checkpoint_age: seconds; ``last-state`` refuses a checkpoint triggered longer
        ago than this (the work to replay from the sources grows with it). ``None``: any
        age. Templated.
    :param directory: savepoint directory (default: the job's savepoint directory). Templated.
    :param drain: end the input first (flush bounded and timer work) before the savepoint.
    :param timeout: seconds to wait for the savepoint (then for the job to end), and for
        a cancellation.
    :param standby_job: the id of the standby that is to restore the stop's savepoint
        (``restore="standby:JOB"``): the job is stopped only while that standby is still
        ready to take over (``READY``, its launcher running); a standby that failed, was
        withdrawn or whose process exited fails this task and the job keeps running,
        instead of an outage nobody takes over. A retry that finds its earlier try's stop
        request does not ask again. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    template_fields: Sequence[str] = (*StopWithSavepointOperator.template_fields,
                                      "upgrade_mode", "max_checkpoint_age", "standby_job")

    def __init__(self, *, job: str, upgrade_mode: str = SAVEPOINT,
                 max_checkpoint_age: float | str | None = None,
                 standby_job: str | None = None, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.upgrade_mode = upgrade_mode
        self.max_checkpoint_age = max_checkpoint_age
        self.standby_job = standby_job

    def _check_standby(self, context: Context) -> None:
        """Refuse the stop when ``standby_job`` will not take over (see the parameter)."""
        if self.standby_job in (None, "", "None"):
            return
        store = self.hook.get_conn()
        if store.find_control_request(self.idempotency_key(context)) is not None:
            return  # an earlier try stopped (or stops) the job: the standby may have taken over
        outcome = check_standby_ready(store, str(self.standby_job))
        if outcome is None or outcome.status != SUCCESS:
            why = (outcome.message if outcome is not None
                   else f"standby job {self.standby_job} is not up")
            raise AirflowException(f"not stopping job {self.job}, it keeps running: {why}")

    def _mode(self) -> str:
        if self.upgrade_mode not in UPGRADE_MODES:
            raise AirflowException(f"upgrade_mode {self.upgrade_mode!r} is not one of "
                                   f"{', '.join(UPGRADE_MODES)}")
        return self.upgrade_mode

    def _max_age(self) -> float | None:
        if self.max_checkpoint_age in (None, "", "None"):
            return None
        try:
            age = float(self.max_checkpoint_age)  # type: ignore[arg-type]
        except ValueError:
            raise AirflowException(f"max_checkpoint_age must be seconds, got "
                                   f"{self.max_checkpoint_age!r}") from None
        if age <= 0:
            raise AirflowException(f"max_checkpoint_age must be > 0 seconds, got {age}")
        return age

    def execute(self, context: Context) -> Any:
        mode = self._mode()
        self._max_age()  # validated before anything happens
        self._check_standby(context)
        ti = context["ti"]
        if mode == LAST_STATE:
            return self._last_state(context, reason=None)
        if mode == SAVEPOINT_OR_LAST_STATE:
            earlier = self.hook.get_conn().find_control_request(self.idempotency_key(context))
            job = self._job() if earlier is None else None
            if job is not None and job.status != JobStatus.RUNNING:
                return self._last_state(context, reason=f"job {job.job_name} ({job.job_id}) is "
                                        f"{job.status}, it cannot take a savepoint")
        ti.xcom_push(key="upgrade_mode_used", value=SAVEPOINT)
        ti.xcom_push(key="fallback_reason", value=None)
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if (event or {}).get("status") == SUCCESS or self._mode() != SAVEPOINT_OR_LAST_STATE:
            return super().execute_complete(context, event)
        return self._last_state(context, reason=f"the savepoint failed: "
                                f"{(event or {}).get('message') or event}")

    # -- last-state -------------------------------------------------------------------------
    def _job(self) -> JobRecord:
        try:
            return self.hook.resolve_job(self.job)
        except LookupError as exc:
            raise AirflowException(f"upgrade: {exc}") from exc

    def _latest(self, job: JobRecord) -> CheckpointRecord | None:
        return self.hook.get_conn().latest_completed_checkpoint(job_id=job.job_id, kind=None)

    def _last_state(self, context: Context, *, reason: str | None) -> Any:
        """Check the latest checkpoint's age, then cancel the job (if it is still active)
        and finish in :meth:`last_state_complete`."""
        ti = context["ti"]
        job = self._job()
        if reason:
            self.log.warning("Upgrade of %s falls back to last-state: %s", job.job_name, reason)
        ti.xcom_push(key="upgrade_mode_used", value=LAST_STATE)
        ti.xcom_push(key="fallback_reason", value=reason)
        ti.xcom_push(key="job_id", value=job.job_id)
        self._check_age(job, self._latest(job))
        if job.status not in ACTIVE_JOB_STATUSES:
            self.log.info("Job %s (%s) is %s already: nothing to cancel", job.job_name,
                          job.job_id, job.status)
            return self.last_state_complete(context, {"status": SUCCESS, "job_id": job.job_id,
                                                      "message": f"job is {job.status}"})
        request_id = self.find_or_submit(context, job.job_id, "CANCEL", {},
                                         key_suffix="last-state")
        if request_id is None:  # it ended meanwhile
            return self.last_state_complete(context, {"status": SUCCESS, "job_id": job.job_id,
                                                      "message": "job ended"})
        self.log.info("Cancelling job %s (%s) for a last-state upgrade (request %s)",
                      job.job_name, job.job_id, request_id)
        return self.wait_for_request(context, request_id, then_job_states=[JobStatus.CANCELED],
                                     timeout=self.timeout, method_name="last_state_complete")

    def last_state_complete(self, context: Context, event: dict[str, Any]) -> str:
        """The job is no longer running: hand over its newest completed checkpoint (one
        may have completed while it was being cancelled)."""
        job_id = (event or {}).get("job_id")
        job = self.hook.get_conn().get_job(job_id) if job_id else None
        if job is None or not job.is_terminal:  # a job that ended otherwise will do as well
            self.check_event(event)
        if job is None:
            raise AirflowException(f"upgrade: job {job_id!r} is not in the metadata DB")
        latest = self._latest(job)  # the one checked before the cancel, or a newer one
        if latest is None:
            raise AirflowException(f"job {job.job_name} ({job.job_id}) has no completed "
                                   "checkpoint any more")
        ti = context["ti"]
        ti.xcom_push(key="checkpoint_id", value=latest.checkpoint_id)
        ti.xcom_push(key="job_id", value=job.job_id)
        self.log.info("Last-state upgrade of %s (%s, now %s): restore from %s %d at %s",
                      job.job_name, job.job_id, job.status, latest.kind.lower(),
                      latest.checkpoint_id, latest.location)
        return latest.location

    def _check_age(self, job: JobRecord, latest: CheckpointRecord | None) -> None:
        if latest is None:
            raise AirflowException(
                f"last-state upgrade of job {job.job_name} ({job.job_id}) is impossible: it has "
                f"no completed checkpoint (job {job.status}); the job was not touched")
        age = (datetime.now(UTC) - latest.trigger_time).total_seconds()
        limit = self._max_age()
        if limit is not None and age > limit:
            raise AirflowException(
                f"last-state upgrade of job {job.job_name} ({job.job_id}) refused: its latest "
                f"completed checkpoint {latest.checkpoint_id} is {age:.0f} s old "
                f"(max_checkpoint_age {limit:.0f} s)")


HANDOVER_MODES = (SAVEPOINT, LAST_STATE)
#: how long a last-state hand-over pins blue's checkpoint when ``pin_seconds`` is not set
LAST_STATE_PIN_SECONDS = 3600.0
PIN_ATTEMPTS = 5


class HandoverSnapshotOperator(TriggerSavepointOperator):
    """
    The snapshot a new version (green) starts from while the running job (blue) keeps
    running: a fresh savepoint (``handover="savepoint"``) or blue's latest completed
    checkpoint (``handover="last-state"``: nothing is asked of blue, so it works while blue
    cannot take a savepoint, and costs no extra snapshot). The return value is the snapshot's
    path; XCom ``handover_used``, ``checkpoint_id``, ``job_id`` (and ``pin_holder``).

    A last-state hand-over pins blue's checkpoint for this DAG run (``pin_seconds``, default
    one hour; :class:`~.savepoints.UnpinSavepointsOperator` releases it earlier): blue keeps
    checkpointing and would otherwise delete it ``retained`` intervals later, possibly
    before green restored it.

    :param handover: ``savepoint`` or ``last-state``. Templated.
    :param max_checkpoint_age: seconds; ``last-state`` refuses an older checkpoint (green
        would replay more input to catch up). ``None``: any age. Templated.
    Other parameters: :class:`TriggerSavepointOperator`.
    """

    template_fields: Sequence[str] = (*TriggerSavepointOperator.template_fields, "handover",
                                      "max_checkpoint_age")

    def __init__(self, *, handover: str = SAVEPOINT,
                 max_checkpoint_age: float | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handover = handover
        self.max_checkpoint_age = max_checkpoint_age

    def execute(self, context: Context) -> Any:
        if self.handover not in HANDOVER_MODES:
            raise AirflowException(f"handover {self.handover!r} is not one of "
                                   f"{', '.join(HANDOVER_MODES)}")
        ti = context["ti"]
        ti.xcom_push(key="handover_used", value=self.handover)
        if self.handover == SAVEPOINT:
            return super().execute(context)
        try:  # parsed before anything is pinned: a bad value must not leave a pin held
            limit = None if self.max_checkpoint_age in (None, "", "None") else float(
                self.max_checkpoint_age)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise AirflowException(f"{self.task_id}: max_checkpoint_age must be a number of "
                                   f"seconds or empty, not {self.max_checkpoint_age!r}") from exc
        try:
            job = self.hook.resolve_job(self.job)
        except LookupError as exc:
            raise AirflowException(f"handover: {exc}") from exc
        latest = self._pin_latest(context, job)
        age = (datetime.now(UTC) - latest.trigger_time).total_seconds()
        if limit is not None and age > limit:
            unpin_savepoint(self.hook.get_conn(), holder=dag_run_holder(context),
                            path=latest.location)
            raise AirflowException(
                f"last-state handover from job {job.job_name} ({job.job_id}) refused: its "
                f"latest completed checkpoint {latest.checkpoint_id} is {age:.0f} s old "
                f"(max_checkpoint_age {limit:.0f} s)")
        ti.xcom_push(key="checkpoint_id", value=latest.checkpoint_id)
        ti.xcom_push(key="job_id", value=job.job_id)
        ti.xcom_push(key="pin_holder", value=dag_run_holder(context))
        self.log.info("Last-state handover from %s (%s, %s): %s %d at %s (%.0f s old)",
                      job.job_name, job.job_id, job.status, latest.kind.lower(),
                      latest.checkpoint_id, latest.location, age)
        return latest.location

    def _pin_latest(self, context: Context, job: JobRecord) -> CheckpointRecord:
        """Blue's newest completed checkpoint, pinned for this DAG run (``pin_seconds``, by
        default :data:`LAST_STATE_PIN_SECONDS`): blue goes on checkpointing and would
        otherwise delete it ``retained`` intervals later, before green restored it. A
        checkpoint subsumed before the pin took effect is replaced by the newer one."""
        store = self.hook.get_conn()
        ttl = (LAST_STATE_PIN_SECONDS if self.pin_seconds in (None, "", "None", 0)
               else float(self.pin_seconds))  # type: ignore[arg-type]
        for _ in range(PIN_ATTEMPTS):
            latest = store.latest_completed_checkpoint(job_id=job.job_id, kind=None)
            if latest is None:
                raise AirflowException(f"last-state handover from job {job.job_name} "
                                       f"({job.job_id}) is impossible: it has no completed "
                                       "checkpoint")
            if latest.kind == "SAVEPOINT":  # never subsumed by checkpoint retention
                return latest
            if pin_checkpoint(store, job.job_id, latest.checkpoint_id,
                              holder=dag_run_holder(context), ttl_seconds=ttl,
                              reason=f"last-state hand-over from {job.job_name}") is not None:
                return latest
        raise AirflowException(
            f"last-state handover from job {job.job_name} ({job.job_id}): its newest completed "
            f"checkpoint was subsumed before it could be pinned, {PIN_ATTEMPTS} times (are its "
            "checkpoints faster than the metadata DB answers?); use handover='savepoint'")
