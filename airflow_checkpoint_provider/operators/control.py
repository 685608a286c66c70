"""Operators that ask a running job to do something: savepoint, stop with savepoint, cancel.

Each inserts a control request in the metadata DB and waits until the job answered it
(``deferrable=True``: in the triggerer). The job's coordinator executes the request; Airflow
never talks to the Spark driver.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.assets import (
    SAVEPOINTS_ALIAS,
    emit_snapshot_event,
    snapshot_extra,
    with_alias_outlet,
)
from airflow_checkpoint_provider.engine.client import (
    ControlRequestRecord,
    ControlRequestStatus,
    JobStatus,
    absolute_location,
)
from airflow_checkpoint_provider.hooks.launcher import find_launch
from airflow_checkpoint_provider.links.checkpoint import CheckpointHistoryLink
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
from airflow_checkpoint_provider.triggers.checkpoint import ControlRequestTrigger
from airflow_checkpoint_provider.triggers.conditions import SUCCESS, check_control_request

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook


class _ControlRequestOperator(CheckpointBaseOperator):
    """Submit one control request for ``job`` and wait for its answer, in one deferral.

    Idempotent across Airflow retries and re-runs: the request carries an idempotency key
    derived from ``(dag_id, run_id, task_id, map_index)``. A later try of the same task
    instance (after a crash, a deferral race that marked a finished try failed, or a clear)
    finds the request its earlier try submitted and waits for that one: a stop that already
    stopped the job succeeds with its savepoint instead of failing on a STOPPED job.
    """

    action: str = ""
    #: after the request succeeded, also wait for the job to be in one of these statuses
    then_job_states: list[str] | None = None
    template_fields: Sequence[str] = ("job",)

    def __init__(self, *, job: str, timeout: float = 300.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.timeout = timeout

    def request_params(self) -> dict[str, Any]:
        return {}

    def submit(self, context: Context) -> str:
        """Insert the request (or find this task instance's earlier one); fail with the
        job's status if it takes no requests."""
        earlier, key = self._earlier_request(self.idempotency_key(context))
        if earlier is not None and earlier.status == ControlRequestStatus.FAILED:
            self.log.warning("The %s request %s of an earlier try of this task failed (%s): "
                             "submitting a new one", earlier.action, earlier.request_id,
                             earlier.error)
            earlier = None
        if earlier is not None:
            job_id, request_id = earlier.job_id, earlier.request_id
            self.log.info("Found %s request %s (%s) submitted by an earlier try of this task "
                          "for job %s: waiting for it instead of submitting another",
                          earlier.action, request_id, earlier.status, job_id)
        else:
            try:
                job = self.hook.resolve_job(self.job)
            except LookupError as exc:
                raise AirflowException(f"{self.action}: {exc}") from exc
            job_id = job.job_id
            try:
                request_id = self.hook.submit_control_request(
                    job_id, self.action, self.request_params(), idempotency_key=key)
            except ValueError:
                self.fail_with_job(job_id, f"cannot {self.action.lower()}")
            self.log.info("Submitted %s request %s for job %s (%s)", self.action, request_id,
                          job.job_name, job_id)
        context["ti"].xcom_push(key="job_id", value=job_id)
        context["ti"].xcom_push(key="request_id", value=request_id)
        self.job_id = job_id
        return request_id

    def _earlier_request(self, key: str) -> tuple[ControlRequestRecord | None, str]:
        """The newest request of this task instance (its tries resubmit under ``key``,
        ``key:2``, ``key:3``... after a FAILED one) and the key a new request would take."""
        store, earlier, n = self.hook.get_conn(), None, 1
        while True:
            candidate = key if n == 1 else f"{key}:{n}"
            found = store.find_control_request(candidate)
            if found is None:
                return earlier, candidate
            earlier, n = found, n + 1

    def execute(self, context: Context) -> Any:
        request_id = self.submit(context)
        return self.wait_for_request(context, request_id, then_job_states=self.then_job_states,
                                     timeout=self.timeout, method_name="execute_complete")

    def wait_for_request(self, context: Context, request_id: str, *,
                         then_job_states: list[str] | None, timeout: float,
                         method_name: str) -> Any:
        """Wait (deferred or polling) until the request is answered and its job is in one of
        ``then_job_states``; then call ``method_name(context, event)``."""
        return self.wait_until(
            context,
            check=lambda store: check_control_request(store, request_id,
                                                      then_job_states=then_job_states,
                                                      access=self.access),
            trigger=ControlRequestTrigger(request_id=request_id, then_job_states=then_job_states,
                                          access=None if self.access is None
                                          else self.access.serialize(),
                                          checkpoint_conn_id=self.checkpoint_conn_id,
                                          poll_interval=self.poll_interval,
                                          end_time=time.time() + timeout),
            method_name=method_name, timeout=timeout, what=f"control request {request_id}")

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        event = self.check_event(event)
        self.log.info("%s", event["message"])
        return self.on_request_succeeded(context, event)

    def on_request_succeeded(self, context: Context, event: dict[str, Any]) -> Any:
        return event.get("request_id")


@dataclass(frozen=True)
class _SavepointHandover:
    """What :class:`TriggerSavepointOperator` and :class:`StopWithSavepointOperator` do with
    the savepoint their request took (a collaborator each builds from its own parameters
    when the request succeeded): push its path and checkpoint id to XCom, pin it for the DAG
    run (``pin_seconds``), persist the checkpoint-history report of the extra link, and emit
    the savepoint's asset event (``emit_asset``).

    :param hook: the operator's metadata hook.
    :param log: the operator's logger.
    :param pin_seconds: the operator's ``pin_seconds`` (``None``, ``""``, ``"None"``, 0: no pin).
    :param emit_asset: the operator's ``emit_asset``.
    :param report_dir: the operator's ``report_dir`` (default
        ``<base_log_folder>/checkpoint-reports``).
    """

    hook: CheckpointMetadataHook
    log: Any  # the operator's ``self.log`` (the task log)
    pin_seconds: float | str | None
    emit_asset: bool
    report_dir: str | None

    def push(self, context: Context, event: dict[str, Any]) -> str:
        """Hand the savepoint of ``event`` over; returns its location."""
        location = event["location"]
        context["ti"].xcom_push(key="checkpoint_id", value=event.get("checkpoint_id"))
        context["ti"].xcom_push(key="savepoint_path", value=location)
        store = self.hook.get_conn()
        if self.pin_seconds not in (None, "", "None", 0):
            self._pin(context, store, location)
        report_dir = self.report_dir or CheckpointBaseOperator.airflow_log_dir(
            "checkpoint-reports")
        CheckpointHistoryLink.persist(context, store, event["job_id"], report_dir)
        if self.emit_asset:
            self._emit_savepoint_asset(context, store, event)
        return location

    def _pin(self, context: Context, store: Any, location: str) -> None:
        """Pin the savepoint for this DAG run (retention keeps it until the pin expires or
        :class:`UnpinSavepointsOperator` releases it). A failed pin is logged, not raised:
        the savepoint (or the stop) already happened."""
        from airflow_checkpoint_provider.engine.client import EngineError, pin_savepoint
        from airflow_checkpoint_provider.operators.savepoints import dag_run_holder

        try:
            pin = pin_savepoint(store, location, holder=dag_run_holder(context),
                                ttl_seconds=float(self.pin_seconds),  # type: ignore[arg-type]
                                reason=f"taken by task {context['ti'].task_id}")
        except (EngineError, ValueError) as exc:
            self.log.warning("Could not pin savepoint %s: %s", location, exc)
            return
        context["ti"].xcom_push(key="pinned_until", value=pin.expires_at.isoformat()
                                if pin.expires_at else None)
        self.log.info("Pinned savepoint %s for %s until %s", location, pin.holder,
                      pin.expires_at)

    def _emit_savepoint_asset(self, context: Context, store: Any, event: dict[str, Any]) -> None:
        """An event of ``checkpoint://<job_name>/savepoints`` through the task's
        ``checkpoint-savepoints`` alias outlet (see :mod:`airflow_checkpoint_provider.assets`)."""
        job = store.get_job(event["job_id"])
        checkpoint_id = event.get("checkpoint_id")
        record = (store.get_checkpoint(job.job_id, int(checkpoint_id))
                  if checkpoint_id is not None else None)
        extra = snapshot_extra(job_id=job.job_id, job_name=job.job_name,
                               checkpoint_id=checkpoint_id, location=event["location"],
                               kind="SAVEPOINT", record=record)
        asset = emit_snapshot_event(context, SAVEPOINTS_ALIAS, extra)
        if asset is not None:
            self.log.info("Asset event %s: savepoint %s of job %s", asset.uri, checkpoint_id,
                          job.job_id)


class TriggerSavepointOperator(_ControlRequestOperator):
    """
    Take a savepoint of a running job; the savepoint's path is the task's return value.

    XCom: return value and ``savepoint_path`` = savepoint directory, ``checkpoint_id``,
    ``job_id``, ``request_id``.

    :param job: job id, id prefix or job name (its newest job). Templated.
    :param directory: savepoint directory (default: the job's savepoint directory). Templated.
    :param timeout: seconds to wait for the savepoint.
    :param report_dir: where the checkpoint-history report of the extra link is written
        (default ``<base_log_folder>/checkpoint-reports``).
    :param emit_asset: emit an Airflow asset event of ``checkpoint://<job_name>/savepoints``
        (extras: job id, job name, checkpoint id, location, kind) through the
        ``checkpoint-savepoints`` asset alias outlet (default ``True``).
    :param pin_seconds: pin the savepoint for this DAG run for this many seconds: savepoint
        retention and dispose keep it meanwhile (default: no pin). XCom ``pinned_until``.
        Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    action = "SAVEPOINT"
    template_fields: Sequence[str] = ("job", "directory", "pin_seconds")
    operator_extra_links = (CheckpointHistoryLink(),)

    def __init__(self, *, job: str, directory: str | None = None, report_dir: str | None = None,
                 emit_asset: bool = True, pin_seconds: float | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(job=job, **with_alias_outlet(kwargs, SAVEPOINTS_ALIAS, emit_asset))
        self.directory = directory
        self.report_dir = report_dir
        self.emit_asset = emit_asset
        self.pin_seconds = pin_seconds

    def request_params(self) -> dict[str, Any]:
        return {"directory": absolute_location(self.directory)} if self.directory else {}

    def on_request_succeeded(self, context: Context, event: dict[str, Any]) -> str:
        return _SavepointHandover(hook=self.hook, log=self.log, pin_seconds=self.pin_seconds,
                                 emit_asset=self.emit_asset,
                                 report_dir=self.report_dir).push(context, event)


class StopWithSavepointOperator(_ControlRequestOperator):
    """
    Stop a running job with a savepoint: sources stop, sinks commit, the job ends STOPPED.

    The task waits (one deferral) for the savepoint and for the job to end; its return value
    (and XCom ``savepoint_path``) is the savepoint's path, to restore the next version from.
    A retry of the task finds its own earlier request (see :class:`_ControlRequestOperator`)
    and succeeds with the same savepoint once the job is STOPPED.

    :param job: job id, id prefix or job name (its newest job). Templated.
    :param directory: savepoint directory (default: the job's savepoint directory). Templated.
    :param drain: end the input first (flush bounded and timer work) before the savepoint.
    :param timeout: seconds to wait for the savepoint, and again for the job to end.
    :param report_dir: where the checkpoint-history report of the extra link is written
        (default ``<base_log_folder>/checkpoint-reports``).
    :param emit_asset: emit an asset event of ``checkpoint://<job_name>/savepoints``, as
        :class:`TriggerSavepointOperator` does (default ``True``).
    :param pin_seconds: pin the savepoint for this DAG run (the pending upgrade that restores
        from it) for this many seconds; retention and dispose keep it meanwhile (default one
        day; ``None``: no pin). XCom ``pinned_until``. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    action = "STOP_WITH_SAVEPOINT"
    then_job_states = [JobStatus.STOPPED, JobStatus.FINISHED]
    template_fields: Sequence[str] = ("job", "directory", "pin_seconds")
    operator_extra_links = (CheckpointHistoryLink(),)

    def __init__(self, *, job: str, directory: str | None = None, drain: bool = False,
                 report_dir: str | None = None, emit_asset: bool = True,
                 pin_seconds: float | str | None = 86400.0, **kwargs: Any) -> None:
        super().__init__(job=job, **with_alias_outlet(kwargs, SAVEPOINTS_ALIAS, emit_asset))
        self.emit_asset = emit_asset
        self.pin_seconds = pin_seconds
        self.directory = directory
        self.drain = drain
        self.report_dir = report_dir

    def request_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"drain": self.drain}
        if self.directory:
            params["directory"] = absolute_location(self.directory)
        return params

    def execute(self, context: Context) -> Any:
        stopped = self._stopped_meanwhile(context)
        if stopped is not None:
            return self.on_request_succeeded(context, stopped)
        return super().execute(context)

    def _stopped_meanwhile(self, context: Context) -> dict[str, Any] | None:
        """A retry whose earlier try's request is FAILED while its job is STOPPED: the job
        ended with a final savepoint after all (a job is STOPPED only by a completed
        stop-with-savepoint, and nothing completes after it). That savepoint is what this
        task exists to hand over, so it is the result, decided from the metadata DB; a new
        request would only fail on the STOPPED job, every retry alike."""
        earlier, _ = self._earlier_request(self.idempotency_key(context))
        if earlier is None or earlier.status != ControlRequestStatus.FAILED:
            return None
        store = self.hook.get_conn()
        job = store.get_job(earlier.job_id)
        if job is None or job.status != JobStatus.STOPPED:
            return None
        final = store.latest_completed_checkpoint(job_id=job.job_id, kind=None)
        if final is None or final.kind != "SAVEPOINT":
            return None
        self.log.warning(
            "The %s request %s of an earlier try of this task failed (%s), but job %s (%s) is "
            "STOPPED with its final savepoint %d at %s: that savepoint is the result",
            earlier.action, earlier.request_id, earlier.error, job.job_name, job.job_id,
            final.checkpoint_id, final.location)
        context["ti"].xcom_push(key="job_id", value=job.job_id)
        context["ti"].xcom_push(key="request_id", value=earlier.request_id)
        self.job_id = job.job_id
        return {"status": SUCCESS, "job_id": job.job_id, "request_id": earlier.request_id,
                "checkpoint_id": final.checkpoint_id, "location": final.location,
                "kind": final.kind, "job_status": job.status,
                "message": f"job {job.job_name} ({job.job_id}) is STOPPED with its final "
                           f"savepoint {final.location}"}

    def on_request_succeeded(self, context: Context, event: dict[str, Any]) -> str:
        return _SavepointHandover(hook=self.hook, log=self.log, pin_seconds=self.pin_seconds,
                                 emit_asset=self.emit_asset,
                                 report_dir=self.report_dir).push(context, event)


class CancelJobOperator(_ControlRequestOperator):
    """
    Cancel a running job; the task waits until the job is CANCELED.

    With ``savepoint_first=True`` (Flink's "savepoint on deletion") the job is first stopped
    with a savepoint, so that its state can be restored later; if that fails or times out
    (``savepoint_timeout``), the job is cancelled anyway and the log says so. XCom
    ``savepoint_path``: the savepoint, or ``None``.

    :param job: job id, id prefix or job name (its newest job). Templated.
    :param missing_ok: succeed (and say so in the log) when the job is unknown or already
        ended, e.g. in a clean-up path where the job may never have started.
    :param savepoint_first: stop with a savepoint first; cancel only if that fails.
    :param directory: savepoint directory (default: the job's savepoint directory). Templated.
    :param savepoint_timeout: seconds to wait for that savepoint.
    :param timeout: seconds to wait for the cancellation.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    action = "CANCEL"
    then_job_states = [JobStatus.CANCELED]
    template_fields: Sequence[str] = ("job", "directory")

    def __init__(self, *, job: str | None, missing_ok: bool = False,
                 savepoint_first: bool = False, directory: str | None = None,
                 savepoint_timeout: float = 300.0, **kwargs: Any) -> None:
        super().__init__(job=job or "", **kwargs)
        self.missing_ok = missing_ok
        self.savepoint_first = savepoint_first
        self.directory = directory
        self.savepoint_timeout = savepoint_timeout

    def execute(self, context: Context) -> Any:
        job = self.hook.find_job(self.job) if self.job and self.job != "None" else None
        if job is None and self.job and self.job != "None":
            job = self._withdraw_standby(self.job)
        if self.missing_ok and (job is None or job.is_terminal):
            self.log.info("Nothing to cancel: %s", f"job {job.job_name} ({job.job_id}) is "
                          f"already {job.status}" if job else f"no job {self.job!r}")
            return None
        context["ti"].xcom_push(key="savepoint_path", value=None)
        if self.savepoint_first and job is not None and not job.is_terminal:
            return self._stop_with_savepoint(context, job.job_id)
        return super().execute(context)

    def _withdraw_standby(self, job_id: str, timeout: float = 60.0) -> Any:
        """``job_id`` may be a standby still waiting for its hand-over (no job row): withdraw
        it and wait until it says so. Returns its job when it took over first (then it is
        cancelled as any job), else ``None``."""
        store = self.hook.get_conn()
        standby = store.request_standby_cancel(job_id)
        if standby is None:
            return None
        launch = find_launch(job_id)  # a standby whose process exited never answers
        deadline = time.monotonic() + timeout
        while standby is not None and standby.is_ready and time.monotonic() < deadline:
            gone = launch is not None and launch.exited()  # before the row: written first
            standby = store.get_standby(job_id)
            if gone and standby is not None and standby.is_ready:
                self.log.info("Standby job %s is gone (%s): nothing to withdraw, nothing "
                              "restored", job_id, launch.describe_exit(lines=0))
                return None
            time.sleep(0.1)
            standby = store.get_standby(job_id)
        if standby is not None and standby.status == "TAKEN_OVER":
            while (job := self.hook.find_job(job_id)) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            self.log.info("Standby job %s took over before it was withdrawn: cancelling it",
                          job_id)
            return job
        self.log.info("Withdrew standby job %s before its hand-over (%s): nothing restored",
                      job_id, standby.status if standby else "gone")
        return None

    def _stop_with_savepoint(self, context: Context, job_id: str) -> Any:
        params = {"directory": absolute_location(self.directory)} if self.directory else {}
        request_id = self.find_or_submit(context, job_id, "STOP_WITH_SAVEPOINT", params,
                                         key_suffix="savepoint")
        if request_id is None:  # it ended meanwhile
            return super().execute(context)
        return self.wait_for_request(context, request_id,
                                     then_job_states=StopWithSavepointOperator.then_job_states,
                                     timeout=self.savepoint_timeout,
                                     method_name="savepoint_complete")

    def savepoint_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if (event or {}).get("status") == SUCCESS:
            context["ti"].xcom_push(key="savepoint_path", value=event.get("location"))
            self.log.info("Stopped with a savepoint instead of cancelling: %s", event["message"])
            return event["job_id"]
        self.log.warning("The savepoint before cancelling failed (%s); cancelling without one",
                         (event or {}).get("message"))
        job = self.hook.find_job(self.job)
        if job is not None and job.is_terminal:
            self.log.info("Job %s (%s) is %s", job.job_name, job.job_id, job.status)
            return job.job_id
        return super().execute(context)

    def on_request_succeeded(self, context: Context, event: dict[str, Any]) -> str:
        return event["job_id"]
