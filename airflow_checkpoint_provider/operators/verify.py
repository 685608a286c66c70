"""Pre-flight restore check as a task: does the new pipeline restore the snapshot?"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.engine.client import METADATA_URL_ENV, JobStatus
from airflow_checkpoint_provider.hooks.job_env import pipeline_env
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
from airflow_checkpoint_provider.triggers.conditions import (
    SUCCESS,
    Outcome,
    check_control_request,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class VerifyRestoreOperator(CheckpointBaseOperator):
    """
    Check, without starting anything, that ``pipeline`` can restore a snapshot: the
    snapshot's files verify, its operators map to the pipeline's uids, and every subtask's
    operators open on a sample of their restored state (``ckpt verify-restore``, run in a
    child process of this task). Run it on a fresh savepoint (or the latest checkpoint)
    before stopping the old job or starting the new one; an incompatibility fails the task
    naming the operator uid, the state and the reason.

    The keys the new code gives its restored keyed operators are checked on a sample of the
    job's input from the snapshot's positions, with the runtime's own key checks: a
    ``key_by`` or ``aggregate()`` key column that changed type is refused here, not at the
    restored job's first record.

    The return value (XCom) is the report: ``{ok, snapshot, checkpoint_id, parallelism,
    operators_opened, problems: [{uid, state, reason}], key_types, keys_probed,
    keys_unprobed}``.

    :param pipeline: ``module:function`` returning the new ``Pipeline``. Templated.
    :param snapshot: the checkpoint or savepoint directory to check. Templated.
    :param job_name: without ``snapshot``: the latest completed checkpoint of the newest job
        of this name. Templated.
    :param parallelism: check a restore at this parallelism. Templated.
    :param take_savepoint: with ``job_name``: take a savepoint of the running job and check
        it (the job keeps running) instead of its latest checkpoint, which may be subsumed
        while it is checked when checkpoints are frequent; when the job is not RUNNING or
        the savepoint fails, the latest checkpoint is checked (logged). XCom ``snapshot``:
        what was checked.
    :param allow_non_restored_state: state of operators the pipeline no longer has may be
        dropped.
    :param fence_sinks: also check that every sink can run fenced (the exactly-once
        blue-green validation run refuses e.g. a PostgreSQL upsert sink): refused here, not
        after a job start. Templated (``"{{ params.exactly_once }}"``).
    :param env_vars: environment of the check (options the pipeline reads). Templated.
    :param env_schema: the DAG author's ``{variable: JSON schema}`` for ``env_vars``: any
        other variable or value is refused, naming it.
    :param env_from_connections: ``{variable: conn_id}``: the URI of each Airflow connection
        goes into the pipeline's environment (as for
        :class:`~airflow_checkpoint_provider.operators.submit.SubmitCheckpointedJobOperator`).
        Templated.
    :param allowed_connections: the connection ids ``env_from_connections`` may name.
    :param timeout: seconds the check may take.
    :param savepoint_attempts: with ``take_savepoint``: savepoints tried while the job runs
        before falling back to its latest checkpoint (default 3; a just-started job or a slow
        first checkpoint fails a savepoint that a later one takes).
    :param savepoint_retry_delay: seconds between those attempts (default 5).
    :param trust_snapshot: as the submit operator's: accept a snapshot that is not signed
        with the metadata DB's key. Without it the check refuses such a snapshot, as the
        restore would (the DB of ``checkpoint_conn_id`` goes to the check as
        ``$CKPT_METADATA_URL``, never on its command line).
    """

    template_fields: Sequence[str] = ("pipeline", "snapshot", "job_name", "parallelism",
                                      "env_vars", "fence_sinks", "env_from_connections")

    def __init__(self, *, pipeline: str, snapshot: str | None = None, job_name: str | None = None,
                 parallelism: int | str | None = None, allow_non_restored_state: bool = False,
                 take_savepoint: bool = False, fence_sinks: bool | str = False,
                 env_vars: dict[str, str] | None = None,
                 env_schema: dict[str, dict[str, Any]] | None = None,
                 env_from_connections: dict[str, str] | str | None = None,
                 allowed_connections: Sequence[str] = (),
                 timeout: float = 600.0,
                 savepoint_attempts: int = 3, savepoint_retry_delay: float = 5.0,
                 trust_snapshot: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not snapshot and not job_name:
            raise ValueError("give snapshot= (a checkpoint or savepoint directory) or job_name=")
        self.pipeline = pipeline
        self.snapshot = snapshot
        self.job_name = job_name
        self.parallelism = parallelism
        self.allow_non_restored_state = allow_non_restored_state
        self.take_savepoint = take_savepoint
        self.fence_sinks = fence_sinks
        self.env_vars = env_vars or {}
        self.env_schema = env_schema
        self.env_from_connections = env_from_connections
        self.allowed_connections = tuple(allowed_connections)
        self.timeout = timeout
        self.savepoint_attempts = savepoint_attempts
        self.savepoint_retry_delay = savepoint_retry_delay
        self.trust_snapshot = trust_snapshot
        #: why the last pre-flight savepoint failed (for the error when nothing is left to check)
        self.savepoint_failure: str | None = None

    def _snapshot(self) -> str:
        if self.snapshot:
            self.check_location_owned(str(self.snapshot), "verify", missing_ok=True)
            return str(self.snapshot)
        rec = self.hook.latest_completed_checkpoint(job_name=self.job_name)
        if rec is None:
            why = (f" (and the pre-flight savepoint failed: {self.savepoint_failure})"
                   if self.savepoint_failure else "")
            raise AirflowException(f"job {self.job_name!r} has no completed checkpoint to "
                                   f"check{why}")
        return rec.location

    def _fresh_savepoint(self, context: Context) -> str | None:
        """A savepoint of the running job ``job_name`` (idempotent per task instance), or
        ``None`` when the job is not RUNNING or ``savepoint_attempts`` savepoints failed.

        A failed savepoint is retried while the job runs (a job just started, or a first
        checkpoint slow on a loaded machine, fails a savepoint that a later one takes):
        attempt ``n`` is the request of key suffix ``preflight:n``, so a later try of the
        task finds the requests of the earlier one in the metadata DB (a savepoint that
        succeeded meanwhile is used, a failed one is not repeated)."""
        self.savepoint_failure = None
        attempts = max(1, int(self.savepoint_attempts))
        for attempt in range(1, attempts + 1):
            job = self.hook.find_job(str(self.job_name))
            if job is None or job.status != JobStatus.RUNNING:
                self.log.warning("Job %s is %s: checking its latest checkpoint instead of a "
                                 "savepoint", self.job_name, job.status if job else "unknown")
                return None
            suffix = "preflight" if attempt == 1 else f"preflight:{attempt}"
            request_id = self.find_or_submit(context, job.job_id, "SAVEPOINT", {},
                                             key_suffix=suffix)
            if request_id is None:  # it ended meanwhile
                return None
            outcome = self._wait_for_savepoint(request_id)
            if outcome is not None and outcome.status == SUCCESS:
                self.log.info("Took savepoint %s of job %s to check",
                              outcome.payload["location"], self.job_name)
                return str(outcome.payload["location"])
            if outcome is None:
                self.savepoint_failure = f"timed out after {self.timeout:.0f} s"
                break  # not again: a stuck savepoint would hold the task attempts x timeout
            self.savepoint_failure = outcome.message
            if attempt < attempts:
                self.log.warning("The pre-flight savepoint of %s failed (attempt %d of %d: %s):"
                                 " retrying in %.0f s", self.job_name, attempt, attempts,
                                 self.savepoint_failure, float(self.savepoint_retry_delay))
                time.sleep(float(self.savepoint_retry_delay))
        self.log.warning("The pre-flight savepoint of %s failed (%d of %d attempts; last: %s): "
                         "checking its latest checkpoint instead", self.job_name, attempt,
                         attempts, self.savepoint_failure)
        return None

    def _wait_for_savepoint(self, request_id: str) -> Outcome | None:
        store = self.hook.get_conn()
        deadline = time.monotonic() + self.timeout
        while (outcome := check_control_request(store, request_id)) is None:
            if time.monotonic() > deadline:
                break
            time.sleep(self.poll_interval)
        return outcome

    def execute(self, context: Context) -> dict:
        if self.take_savepoint and not self.snapshot and self.job_name:
            self.snapshot = self._fresh_savepoint(context)
        if "ti" in context:
            context["ti"].xcom_push(key="snapshot", value=self.snapshot)
        for _ in range(5):
            snapshot = self._snapshot()
            report = self._check(snapshot)
            # the latest checkpoint of a running job may be subsumed (its files deleted)
            # while it is checked: then check the newest one
            if report["ok"] or self.snapshot or self._snapshot() == snapshot:
                break
            self.log.warning("Checkpoint %s was subsumed while being checked; checking the "
                             "newest one", snapshot)
        for p in report["problems"]:
            self.log.error("operator %r%s: %s", p["uid"],
                           f", state {p['state']!r}" if p["state"] else "", p["reason"])
        if not report["ok"]:
            first = report["problems"][0]
            raise AirflowException(
                f"{self.pipeline} cannot restore {snapshot}: operator {first['uid']!r}"
                + (f", state {first['state']!r}" if first["state"] else "")
                + f": {first['reason']}" + self.why_missing(snapshot, first["reason"]))
        self.log.info("%s restores %s (checkpoint %s): %d operator subtasks opened on their "
                      "state", self.pipeline, snapshot, report["checkpoint_id"],
                      len(report["operators_opened"]))
        return report

    def _check(self, snapshot: str) -> dict:
        cmd = [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "verify-restore",
               self.pipeline, snapshot, "--json"]
        if self.parallelism not in (None, "", "None"):
            cmd += ["--parallelism", str(int(self.parallelism))]
        if self.allow_non_restored_state:
            cmd.append("--allow-non-restored-state")
        if str(self.fence_sinks).lower() in ("true", "1"):
            cmd.append("--fence-sinks")
        if self.trust_snapshot:
            cmd.append("--trust-snapshot")
        # a refused variable raises its typed error (UnsafeJobEnvironmentError ...) naming it
        pipeline_vars = pipeline_env(self.env_vars, env_schema=self.env_schema,
                                     env_from_connections=self.env_from_connections,
                                     allowed_connections=self.allowed_connections)
        env = {**os.environ, **pipeline_vars,
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
               # the DB whose key signs the job's snapshots: a restore checks it (--db)
               METADATA_URL_ENV: self.hook.get_url()}
        self.log.info("Checking that %s restores %s", self.pipeline, snapshot)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=self.timeout)
        try:
            report = json.loads(proc.stdout[proc.stdout.index("{"):])
        except ValueError:
            raise AirflowException(f"verify-restore of {snapshot} failed to run: "
                                   f"{(proc.stderr or proc.stdout)[-3000:]}") from None
        return report
