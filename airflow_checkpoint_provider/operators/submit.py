"""Operator submitting a checkpointed job and waiting until it runs, checkpoints or ends."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.engine.client import (
    CheckpointOverrides,
    EngineError,
    InvalidNameError,
    JobStatus,
    Restore,
    RestoreKind,
    RunRequest,
    heartbeat_timeout,
    validate_job_name,
)
from airflow_checkpoint_provider.hooks.job_env import as_mapping, check_job_env, pipeline_env
from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook
from airflow_checkpoint_provider.links.checkpoint import CheckpointHistoryLink
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
from airflow_checkpoint_provider.triggers.checkpoint import (
    CheckpointCompletedTrigger,
    JobStateTrigger,
)
from airflow_checkpoint_provider.triggers.conditions import (
    ACTIVE_JOB_STATUSES,
    SUCCESS,
    check_checkpoint_completed,
    check_job_state,
    describe_job,
)
from airflow_checkpoint_provider.triggers.standby import (
    StandbyReadyTrigger,
    check_standby_ready,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_checkpoint_provider.engine.client import JobRecord

WAIT_FOR = ("running", "first_checkpoint", "finished", "standby_ready")
#: Job statuses a "finished" wait accepts: ended by itself or stopped with a savepoint.
ENDED_OK = [JobStatus.FINISHED, JobStatus.STOPPED]
#: every job status (the engine's enum: LOST included)
KNOWN_JOB_STATUSES = tuple(status.value for status in JobStatus)
#: statuses in which a just-launched job did not run: the task fails with the job's reason
DID_NOT_RUN = (JobStatus.FAILED.value, JobStatus.CANCELED.value, JobStatus.LOST.value)
_JOB_ID_NAMESPACE = uuid.UUID("5d1c8f1e-4a57-4c2b-9a43-6c6b7074a1f0")


class SubmitCheckpointedJobOperator(CheckpointBaseOperator):
    """
    Submit a checkpointed pipeline (spark-submit of the engine's entry point) and wait.

    * ``wait_for="running"``: start the job detached and succeed once it is RUNNING — for
      long-running jobs, controlled afterwards through the metadata DB (savepoint, stop, ...).
    * ``wait_for="first_checkpoint"``: also wait for its first completed checkpoint.
    * ``wait_for="finished"``: wait until the job ended (FINISHED, or STOPPED by a
      stop-with-savepoint). Blocking spark-submit unless ``detach`` or ``deferrable``.
    * ``wait_for="standby_ready"`` (with ``restore="standby:JOB"``): start the job as a
      standby of job ``JOB`` and succeed once its application is up and it only waits for
      ``JOB`` to end (``READY`` in the metadata DB's ``standbys``): stop ``JOB`` then, and
      the standby restores its final savepoint (or latest checkpoint) at once. Deferrable:
      the wait for ``READY`` runs in the triggerer (:class:`StandbyReadyTrigger`). A retry
      re-attaches to a standby of an earlier try that is still waiting.

    Durable: when ``reconnect`` is on and the newest job named ``job_name`` is still active
    with a heartbeat younger than ``heartbeat_timeout`` seconds, the task attaches to it
    instead of starting a second copy (e.g. after a worker died while the job kept running).

    Re-attach: the job's identity is its id, derived from the task instance (dag id, task
    id, run id, map index) and the try number, so it is known again to any later try or a
    restarted task without being stored anywhere. Before launching, the task looks for the
    jobs of its own tries (this one first, then earlier ones): one that is still active with
    a fresh heartbeat is re-attached to (its id goes to XCom, the wait goes on) instead of
    submitting again — a task killed as a zombie, or retried after a scheduler race, never
    starts a second copy of a long-running job. This works even when ``reconnect`` is off.

    Retries resume: the job id is derived from the task instance and its try number; on try
    N > 1 the job restores from the newest completed checkpoint (or savepoint) of the jobs
    started by tries 1..N-1 — a bounded job continues instead of recomputing. Without one,
    ``restore`` applies as on the first try.

    XCom: return value and ``job_id``; ``job_name``, ``log_file`` (detached), and after a
    checkpoint wait ``checkpoint_id`` / ``checkpoint_location``.

    :param pipeline: ``module:function`` returning the engine's ``Pipeline``. Templated.
    :param job_name: the job's name in the metadata DB (``--job-name``). Templated.
    :param restore: ``"latest"`` (newest completed checkpoint of any job of this name), a
        checkpoint or savepoint path, or ``None``. Templated.
    :param allow_non_restored_state: restore although the snapshot holds state of operators
        the pipeline no longer has.
    :param trust_snapshot: restore a snapshot that is not signed with the metadata DB's key
        (a savepoint relocated from another deployment, or written by ``ckpt state write``
        without ``--db``); without it such a snapshot is refused. The job's own checkpoints
        are signed either way.
    :param fence_sinks: run with fenced sinks (``--fence-sinks``): the job checkpoints and
        pre-commits, but publishes nothing (the validation run of an exactly-once blue-green
        upgrade). Templated (``"True"``/``"False"`` accepted).
    :param wait_for: ``"running"``, ``"first_checkpoint"`` or ``"finished"``.
    :param detach: start the job in its own session even for ``wait_for="finished"`` (the job
        survives a killed worker). Always on for the other ``wait_for`` values.
    :param runner: ``"spark"`` (spark-submit through the ``spark_conn_id`` connection) or
        ``"local"`` (the engine's local runner, no Spark). Templated.
    :param checkpoint_dir: checkpoint directory (overrides the pipeline's). Templated.
    :param savepoint_dir: the job's default savepoint directory. Templated.
    :param interval_ms: checkpoint interval override.
    :param restart: restart strategy override, e.g. ``"fixed:3:1000"``.
    :param reconnect: attach to an already running job of this name (see above).
    :param heartbeat_timeout: seconds after which a job's heartbeat counts as stale; default
        ``None``: the engine's own LOST timeout (``$CKPT_HEARTBEAT_TIMEOUT_S``, else 60 s, read
        when the task runs), so the operator and the engine agree on when a job is LOST.
    :param start_timeout: seconds a detached job may take to be RUNNING.
    :param wait_timeout: seconds to wait for the first checkpoint / the end (``None``: no
        limit; use ``execution_timeout`` for the task as a whole).
    :param spark_conn_id: the Spark connection (master, deploy mode).
    :param conf: Spark configuration. Templated.
    :param env_vars: environment of the job (e.g. options the pipeline reads). Templated.
    :param env_schema: the DAG author's ``{variable: JSON schema}`` for ``env_vars`` (e.g.
        :data:`~airflow_checkpoint_provider.params.EXAMPLE_ENV`): any other variable, or a
        value outside its schema (a path, a URL, an unbounded number), is refused before the
        job starts, naming the variable -- even if the DAG's params were loosened.
    :param env_from_connections: ``{variable: conn_id}``: the job gets the URI of each Airflow
        connection (resolved in the worker, masked in logs) in its environment, never in
        argv. Templated (e.g. ``"{{ params.cdc_conn_id }}"``); an id rendered empty sets
        nothing.
    :param allowed_connections: the connection ids ``env_from_connections`` may name (the DAG
        author's list): another id is refused before any lookup.
    :param spark_kwargs: more :class:`SparkSubmitHook` arguments (``executor_memory``, ...).
    :param ship_code: send the engine and the pipeline's package to the executors as
        ``--py-files`` archives, for clusters whose Python lacks this project (see
        :class:`~airflow_checkpoint_provider.hooks.submit.CheckpointSubmitHook`).
    :param log_dir: log directory of detached jobs (default
        ``<base_log_folder>/checkpoint-jobs``). Templated.
    :param report_dir: where the checkpoint-history report of the extra link is written
        (default ``<base_log_folder>/checkpoint-reports``).
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait for the checkpoint / the end in the triggerer.
    :param poll_interval: seconds between polls of the metadata DB.
    """

    template_fields: Sequence[str] = ("pipeline", "job_name", "restore", "runner",
                                      "checkpoint_dir", "savepoint_dir", "conf", "env_vars",
                                      "log_dir", "fence_sinks", "env_from_connections")
    template_fields_renderers = {"conf": "json", "env_vars": "json"}
    operator_extra_links = (CheckpointHistoryLink(),)

    def __init__(self, *, pipeline: str, job_name: str, restore: str | None = None,
                 allow_non_restored_state: bool = False, trust_snapshot: bool = False,
                 wait_for: str = "running",
                 detach: bool = False, runner: str = "spark", checkpoint_dir: str | None = None,
                 savepoint_dir: str | None = None, interval_ms: int | None = None,
                 restart: str | None = None, reconnect: bool = True,
                 heartbeat_timeout: float | None = None, start_timeout: float = 300.0,
                 wait_timeout: float | None = None, spark_conn_id: str = "spark_default",
                 conf: dict[str, Any] | None = None, env_vars: dict[str, str] | None = None,
                 spark_kwargs: dict[str, Any] | None = None, log_dir: str | None = None,
                 report_dir: str | None = None, ship_code: bool = False,
                 fence_sinks: bool | str = False,
                 env_from_connections: dict[str, str] | None = None,
                 allowed_connections: Sequence[str] = (),
                 env_schema: dict[str, dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if wait_for not in WAIT_FOR:
            raise ValueError(f"wait_for must be one of {', '.join(WAIT_FOR)}, not {wait_for!r}")
        self.pipeline = pipeline
        self.job_name = job_name
        self.restore = restore
        self.allow_non_restored_state = allow_non_restored_state
        self.trust_snapshot = trust_snapshot
        self.wait_for = wait_for
        self.detach = detach
        self.runner = runner
        self.checkpoint_dir = checkpoint_dir
        self.savepoint_dir = savepoint_dir
        self.interval_ms = interval_ms
        self.restart = restart
        self.reconnect = reconnect
        self.heartbeat_timeout = heartbeat_timeout
        self.start_timeout = start_timeout
        self.wait_timeout = wait_timeout
        self.spark_conn_id = spark_conn_id
        self.conf = conf
        self.env_vars = env_vars
        self.spark_kwargs = spark_kwargs or {}
        self.log_dir = log_dir
        self.report_dir = report_dir
        self.ship_code = ship_code
        self.fence_sinks = fence_sinks
        # a DAG run's conf chooses among what the DAG author fixed here (checked in launch())
        self.env_from_connections = env_from_connections
        self.allowed_connections = tuple(allowed_connections)
        self.env_schema = env_schema
        self._submit_hook: CheckpointSubmitHook | None = None

    # -- OpenLineage ---------------------------------------------------------------------------

    def get_openlineage_facets_on_start(self) -> Any:
        """The pipeline's sources and sinks as OpenLineage input and output datasets (with
        the openlineage provider installed; lineage never fails the task)."""
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset

        from airflow_checkpoint_provider.engine.client import pipeline_datasets

        saved: dict[str, str | None] = {}
        try:  # no interpreter/loader variable in this worker's environment, even briefly
            env = check_job_env(as_mapping(self.env_vars, "env_vars"))
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update({k: str(v) for k, v in env.items()})  # options the pipeline reads
            datasets = pipeline_datasets(str(self.pipeline))
        except Exception as exc:  # noqa: BLE001 - lineage is best effort
            self.log.warning("No lineage for %s: %s", self.pipeline, exc)
            return OperatorLineage()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return OperatorLineage(
            inputs=[Dataset(namespace=d["namespace"], name=d["name"]) for d in datasets["inputs"]],
            outputs=[Dataset(namespace=d["namespace"], name=d["name"])
                     for d in datasets["outputs"]])

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_start()

    # -- job identity ------------------------------------------------------------------------

    @staticmethod
    def job_id_for(context: Context, try_number: int) -> str:
        """The job id of this task instance's try ``try_number`` (stable across workers)."""
        ti = context["ti"]
        key = f"{ti.dag_id}/{ti.task_id}/{ti.run_id}/{ti.map_index}/{try_number}"
        return uuid.uuid5(_JOB_ID_NAMESPACE, key).hex

    def stale_after(self) -> float:
        """Seconds after which a job's heartbeat counts as stale: ``heartbeat_timeout``, else
        the engine's (:func:`heartbeat_timeout`, read now)."""
        return heartbeat_timeout() if self.heartbeat_timeout is None else self.heartbeat_timeout

    def find_running_job(self) -> JobRecord | None:
        """The newest job of this name if it is active with a fresh heartbeat."""
        jobs = self.hook.list_jobs(self.job_name)
        if not jobs or jobs[0].status not in ACTIVE_JOB_STATUSES:
            return None
        job = self.hook.check_owned(jobs[0], "reconnect to")
        beat = job.heartbeat_at or job.created_at
        age = (datetime.now(UTC) - beat).total_seconds()
        timeout = self.stale_after()
        if age > timeout:
            self.log.warning("Job %s (%s) is %s but its heartbeat is %.0f s old: marking it "
                             "LOST and starting a new job", job.job_name, job.job_id,
                             job.status, age)
            # LOST frees the name for the new job (one live job per name) and fails the dead
            # job's open control requests; the operator never reconnects to a LOST job
            self.hook.get_conn().mark_lost_jobs(self.job_name, timeout=timeout)
            return None
        return job

    def find_own_job(self, context: Context) -> JobRecord | None:
        """A job this task instance started in this try or an earlier one that is still
        active with a fresh heartbeat (the newest try first): the task re-attaches to it."""
        store = self.hook.get_conn()
        timeout = self.stale_after()
        for attempt in range(context["ti"].try_number, 0, -1):
            job = store.get_job(self.job_id_for(context, attempt))
            if job is None or job.status not in ACTIVE_JOB_STATUSES:
                continue
            beat = job.heartbeat_at or job.created_at
            if (datetime.now(UTC) - beat).total_seconds() <= timeout:
                return job
        return None

    def find_own_standby(self, context: Context) -> str | None:
        """The id of a standby this task instance started in this or an earlier try that
        still waits (``READY``, no job row yet): the task re-attaches to it."""
        store = self.hook.get_conn()
        for attempt in range(context["ti"].try_number, 0, -1):
            job_id = self.job_id_for(context, attempt)
            standby = store.get_standby(job_id)
            if (standby is not None and standby.is_ready
                    and standby.cancel_requested_at is None and store.get_job(job_id) is None):
                return job_id
        return None

    def restore_for_retry(self, context: Context) -> str | None:
        """Newest completed checkpoint/savepoint of the jobs of earlier tries, if any."""
        for earlier in range(context["ti"].try_number - 1, 0, -1):
            job_id = self.job_id_for(context, earlier)
            chk = self.hook.latest_completed_checkpoint(job_id=job_id, kind=None)
            if chk is not None:
                self.log.info("Retry %d: resuming from %s %d of job %s (try %d) at %s",
                              context["ti"].try_number, chk.kind.lower(), chk.checkpoint_id,
                              job_id, earlier, chk.location)
                return chk.location
        return None

    # -- execution ---------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        ti = context["ti"]
        try:  # job_name may come from a DAG run's conf: it becomes a path, check it first
            validate_job_name(self.job_name, "job_name")
        except InvalidNameError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from exc
        try:  # the text form, parsed once: everything below matches on its kind
            requested = Restore.parse(_optional(self.restore))
        except EngineError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from exc
        standby = self.wait_for == "standby_ready"
        if standby and requested.kind is not RestoreKind.STANDBY:
            raise AirflowException(f"{self.task_id}: wait_for='standby_ready' needs "
                                   f"restore='standby:JOB', not {self.restore!r}")
        job = self.find_own_job(context)
        if standby and job is None and (waiting := self.find_own_standby(context)):
            self.log.info("Re-attaching to standby job %s of an earlier try, still waiting "
                          "for the hand-over, instead of submitting again", waiting)
            ti.xcom_push(key="job_id", value=waiting)
            ti.xcom_push(key="job_name", value=self.job_name)
            return self.wait(context, waiting)
        if job is not None:
            self.log.info("Re-attaching to %s, started by try %s of this task instead of "
                          "submitting again", describe_job(job),
                          next(n for n in range(ti.try_number, 0, -1)
                               if self.job_id_for(context, n) == job.job_id))
            job_id = job.job_id
        # a standby's name is held by the job it takes over: never reconnect to that one
        elif (job := self.find_running_job() if self.reconnect and not standby
              else None) is not None:
            self.log.info("Reconnecting to %s instead of starting a second copy",
                          describe_job(job))
            job_id = job.job_id
        else:
            job_id = self.job_id_for(context, ti.try_number)
            resume = self.restore_for_retry(context) if ti.try_number > 1 else None
            restore = Restore(RestoreKind.PATH, resume) if resume else requested
            self.reserve_owner(context, job_id, restore)
            job_id = self.launch(context, job_id, restore)
        ti.xcom_push(key="job_id", value=job_id)
        ti.xcom_push(key="job_name", value=self.job_name)
        return self.wait(context, job_id)

    def reserve_owner(self, context: Context, job_id: str,
                      restore: Restore | str | None) -> None:
        """Make the job this task launches under ``job_id`` belong to this DAG (and run)
        from its first row on: the job's row takes its owner from this reservation when the
        driver creates it. Before that, refuse a job name another DAG's jobs hold (the name
        leads to their checkpoints with ``restore="latest"``, and to their running job), a
        standby of another DAG's job and a snapshot the metadata DB knows as another DAG's."""
        self.hook.check_name_owned(self.job_name, "start or restore")
        restore = Restore.parse(restore)
        match restore.kind:
            case RestoreKind.STANDBY:
                self.hook.resolve_job(str(restore.target))
            case RestoreKind.PATH:
                self.check_location_owned(str(restore.target), "restore", missing_ok=True)
            case RestoreKind.NONE | RestoreKind.LATEST:
                pass
        if self.access is None:
            return
        owner = self.hook.get_conn().reserve_job_owner(job_id, self.access.dag_id,
                                                       str(context["ti"].run_id))
        if owner != self.access.dag_id:
            raise AirflowException(f"{self.task_id}: job id {job_id} is reserved for DAG "
                                   f"{owner!r}, not {self.access.dag_id!r}")

    def run_request(self, job_id: str, restore: Restore | str | None) -> RunRequest:
        """The engine's request for this run: the one form the job's options take from this
        operator to the job's checkpoint coordinator (serialized once, as the arguments of
        ``ckpt run``)."""
        return RunRequest(
            pipeline=self.pipeline, job_id=job_id, job_name=self.job_name,
            restore=Restore.parse(restore),
            allow_non_restored_state=self.allow_non_restored_state,
            trust_snapshot=self.trust_snapshot, fence_sinks=_flag(self.fence_sinks),
            checkpoint=CheckpointOverrides(
                interval_ms=None if self.interval_ms in (None, "") else int(self.interval_ms),
                directory=_optional(self.checkpoint_dir),
                savepoint_directory=_optional(self.savepoint_dir)),
            restart=_optional(self.restart), runner=self.runner)

    def launch(self, context: Context, job_id: str, restore: Restore) -> str:
        # env_vars checked against env_schema when the DAG author gave one, plus the URIs of
        # the connections env_from_connections names, each id one of allowed_connections
        # (resolved in this worker, masked in logs, in the job's environment, never argv);
        # a refusal names the variable, before anything starts
        try:
            env_vars = pipeline_env(self.env_vars, env_schema=self.env_schema,
                                    env_from_connections=self.env_from_connections,
                                    allowed_connections=self.allowed_connections)
        except ValueError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from exc
        try:
            request = self.run_request(job_id, restore)
        except (EngineError, ValueError) as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from exc
        hook = CheckpointSubmitHook(
            request=request, metadata_url=self.hook.get_url(),
            log_dir=_optional(self.log_dir) or self.airflow_log_dir("checkpoint-jobs"),
            conn_id=self.spark_conn_id, ship_code=self.ship_code,
            conf=as_mapping(self.conf, "conf"),
            env_vars=env_vars, **self.spark_kwargs)
        self._submit_hook = hook
        self.log.info("Submitting job %s (%s) of %s%s", self.job_name, job_id, self.pipeline,
                      f", restoring {restore.text}" if restore.text else "")
        if self._blocking:
            try:
                hook.submit_blocking()
            except AirflowException as exc:
                self.log.error("%s", exc)
                if self.hook.find_job(job_id) is None:
                    raise AirflowException(f"job {self.job_name} ({job_id}) did not start: "
                                           f"{exc}") from exc
                self.fail_with_job(job_id, "job failed")
            return job_id
        until = ("running" if self.wait_for != "standby_ready"
                 else "spawned" if self.deferrable else "standby_ready")
        try:
            info = hook.submit_detached(timeout=self.start_timeout, until=until)
        except AirflowException as exc:
            cause = self.why_missing(restore.target if restore.kind is RestoreKind.PATH
                                     else None, str(exc))
            if not cause:
                raise
            raise AirflowException(f"{exc}{cause}") from exc
        context["ti"].xcom_push(key="log_file", value=info["log_file"])
        self.log.info("Job %s (%s) is %s (pid %s, log %s)", info["job_name"], job_id,
                      info["status"], info["pid"], info["log_file"])
        return job_id

    def wait(self, context: Context, job_id: str) -> Any:
        if self.wait_for == "standby_ready":
            return self.wait_until(
                context, check=lambda store: check_standby_ready(store, job_id),
                trigger=StandbyReadyTrigger(
                    job_id=job_id, checkpoint_conn_id=self.checkpoint_conn_id,
                    poll_interval=self.poll_interval,
                    end_time=time.time() + self.start_timeout),
                method_name="standby_ready_complete", timeout=self.start_timeout,
                what=f"standby job {job_id} to be ready")
        job = self.hook.get_conn().get_job(job_id)
        if job is None or job.status not in KNOWN_JOB_STATUSES:
            raise AirflowException(f"job {job_id} has unknown status "
                                   f"{job.status if job else 'missing'}")
        if job.status in DID_NOT_RUN:
            self.fail_with_job(job_id, "job did not run")
        end_time = None if self.wait_timeout is None else time.time() + self.wait_timeout
        common = {"checkpoint_conn_id": self.checkpoint_conn_id,
                  "poll_interval": self.poll_interval, "end_time": end_time}
        if self.wait_for == "running":
            return self.finish(context, job_id, None)
        if self.wait_for == "first_checkpoint":
            return self.wait_until(
                context,
                check=lambda store: check_checkpoint_completed(store, job_id, kind="CHECKPOINT"),
                trigger=CheckpointCompletedTrigger(job=job_id, kind="CHECKPOINT", **common),
                method_name="execute_complete", timeout=self.wait_timeout,
                what=f"the first checkpoint of job {job_id}")
        return self.wait_until(
            context, check=lambda store: check_job_state(store, job_id, target_states=ENDED_OK),
            trigger=JobStateTrigger(job=job_id, target_states=ENDED_OK, **common),
            method_name="execute_complete", timeout=self.wait_timeout,
            what=f"job {job_id} to end")

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        """Callback of the wait (deferred or not): fail on anything but success."""
        event = self.check_event(event)
        self.log.info("%s", event["message"])
        return self.finish(context, event["job_id"], event)

    def standby_ready_complete(self, context: Context, event: dict[str, Any]) -> str:
        """Callback of the standby's wait: the job id once it is ready (``ready_at`` and
        ``waits_for_job_id`` to XCom); fail on anything else, naming why."""
        if not event or event.get("status") != SUCCESS:
            # the standby will not take over: make sure it no longer waits either
            job_id = (event or {}).get("job_id") or context["ti"].xcom_pull(
                task_ids=self.task_id, key="job_id")
            if job_id:
                # also if it is not up yet: it ends as soon as it is, instead of waiting
                self.hook.get_conn().request_standby_cancel(str(job_id), before_ready=True)
        event = self.check_event(event)
        self.log.info("%s", event["message"])
        ti = context["ti"]
        ti.xcom_push(key="standby_ready_at", value=event.get("ready_at"))
        ti.xcom_push(key="waits_for_job_id", value=event.get("waits_for_job_id"))
        return event["job_id"]

    def finish(self, context: Context, job_id: str, event: dict[str, Any] | None) -> str:
        store = self.hook.get_conn()
        chk = store.latest_completed_checkpoint(job_id=job_id, kind=None)
        if event and event.get("checkpoint_id") is not None:
            context["ti"].xcom_push(key="checkpoint_id", value=event["checkpoint_id"])
            context["ti"].xcom_push(key="checkpoint_location", value=event.get("location"))
        elif chk is not None:
            context["ti"].xcom_push(key="checkpoint_id", value=chk.checkpoint_id)
            context["ti"].xcom_push(key="checkpoint_location", value=chk.location)
        CheckpointHistoryLink.persist(context, store, job_id,
                                      self.report_dir or self.airflow_log_dir("checkpoint-reports"))
        return job_id

    def on_kill(self) -> None:
        """Kill a blocking spark-submit; detached jobs keep running (stop them explicitly)."""
        if self._submit_hook is not None and self._blocking:
            self._submit_hook.on_kill()

    @property
    def _blocking(self) -> bool:
        return self.wait_for == "finished" and not (self.detach or self.deferrable)


def _flag(value: bool | str | None) -> bool:
    """A templated boolean: ``True``/``"True"``/``"true"``/``"1"`` are on."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1", "yes")


def _optional(value: str | None) -> str | None:
    """A templated optional string: ``None``, ``""`` and ``"None"`` (a rendered None) are unset."""
    return None if value in (None, "", "None") else value
