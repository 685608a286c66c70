"""A rollback that never publishes twice: before the old version (v1) restarts from the
snapshot the new one (v2) restored, v2's committed output must go.

v2 committed output when it completed a checkpoint (or savepoint) after its restore, or
ended FINISHED/STOPPED (a bounded job that ran to its end). Restarting v1 from the same
snapshot then writes those records again, so :class:`GuardRollbackOperator` first has every
sink of v2's pipeline remove what v2 committed (``ckpt discard-output``: the same rule as a
``restore="latest"`` that falls back past a job). When a sink cannot remove committed output
(a PostgreSQL 2PC sink appends), it refuses: the task fails naming the sinks and the
rollback does not happen (v2's output stays, v1 stays stopped) until a person decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_checkpoint_provider.engine.client import (
    ACTIVE_JOB_STATUSES,
    CheckpointStatus,
    JobStatus,
)
from airflow_checkpoint_provider.hooks.job_env import pipeline_env
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

DONE = (CheckpointStatus.COMPLETED, CheckpointStatus.SUBSUMED)
#: statuses of a job that ran its sinks' final commit
ENDED_COMMITTED = (JobStatus.FINISHED, JobStatus.STOPPED)


class GuardRollbackOperator(CheckpointBaseOperator):
    """
    Run before a rollback restarts the old version from a snapshot the new version ``job``
    restored: if ``job`` committed output, remove it from every sink of ``pipeline`` (its
    pipeline), or refuse the rollback (the task fails, naming the sinks that cannot remove
    committed output: decide, e.g. keep v2 and run it again, or clean those sinks yourself
    and clear the rollback task). ``job`` must have ended (cancel it first).

    The return value (XCom): ``{job_id, committed, checkpoints, discarded: {uid: [...]}}``.

    :param job: v2's job id (e.g. XCom ``job_id`` of the task that started it); empty or
        ``None``: v2 never started, nothing to remove. Templated.
    :param pipeline: v2's ``module:function``. Templated.
    :param env_vars: environment the pipeline is built with (options it reads). Templated.
    :param env_schema: the DAG author's ``{variable: JSON schema}`` for ``env_vars``: any
        other variable or value is refused, naming it.
    :param env_from_connections: ``{variable: conn_id}``: the URI of each Airflow connection
        goes into the pipeline's environment (as for
        :class:`~airflow_checkpoint_provider.operators.submit.SubmitCheckpointedJobOperator`).
        Templated.
    :param allowed_connections: the connection ids ``env_from_connections`` may name.
    :param timeout: seconds the removal may take.
    """

    template_fields: Sequence[str] = ("job", "pipeline", "env_vars", "env_from_connections")

    def __init__(self, *, job: str | None, pipeline: str,
                 env_vars: dict[str, str] | None = None,
                 env_schema: dict[str, dict[str, Any]] | None = None,
                 env_from_connections: dict[str, str] | str | None = None,
                 allowed_connections: Sequence[str] = (),
                 timeout: float = 600.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.pipeline = pipeline
        self.env_vars = env_vars or {}
        self.env_schema = env_schema
        self.env_from_connections = env_from_connections
        self.allowed_connections = tuple(allowed_connections)
        self.timeout = timeout

    def execute(self, context: Context) -> dict[str, Any]:
        if self.job in (None, "", "None"):
            self.log.info("The new version never started: nothing of it to remove")
            return {"job_id": None, "committed": False, "checkpoints": [], "discarded": {}}
        job = self.hook.find_job(str(self.job))
        standby = self.hook.get_conn().get_standby(str(self.job)) if job is None else None
        if standby is not None and standby.is_terminal:  # withdrawn before its hand-over
            self.log.info("The new version was a standby that never took over (%s): nothing "
                          "of it to remove", standby.status)
            return {"job_id": None, "committed": False, "checkpoints": [], "discarded": {}}
        if job is None:
            raise AirflowException(f"rollback guard: no job {self.job!r} in the metadata DB")
        if job.status in ACTIVE_JOB_STATUSES:  # a retry once it is cancelled may pass
            raise AirflowException(f"rollback guard: job {job.job_name} ({job.job_id}) is "
                                   f"{job.status}; it must end before the rollback")
        done = [c.checkpoint_id for c in self.hook.list_checkpoints(job.job_id, kind=None)
                if c.status in DONE]
        committed = bool(done) or job.status in ENDED_COMMITTED
        result: dict[str, Any] = {"job_id": job.job_id, "committed": committed,
                                  "checkpoints": done, "discarded": {}}
        if not committed:
            self.log.info("Job %s (%s) is %s and completed no checkpoint: it committed "
                          "nothing, the rollback publishes nothing twice", job.job_name,
                          job.job_id, job.status)
            return result
        what = (f"job {job.job_name} ({job.job_id}, {job.status}) committed output "
                + (f"(checkpoints {', '.join(map(str, done))})" if done else "(it ran to its end)"))
        self.log.warning("%s: removing it from its sinks before the rollback", what)
        report = self._discard(job.job_id)
        if report.get("refused"):
            refusal = (f"{what}; restarting the previous version from the same snapshot "
                       f"would publish those records again, and sink(s) "
                       f"{', '.join(report['refused'])} cannot remove them")
            if "ti" in context:  # for the person who decides (the DAG's decide_rollback)
                context["ti"].xcom_push(key="refusal", value=refusal)
            raise AirflowFailException(
                f"rollback refused: {refusal}. Decide: keep the new version (start it again "
                "from its latest checkpoint), or remove its output from those sinks yourself "
                "and clear this task (or approve decide_rollback, with rollback_decision)")
        result["discarded"] = report.get("discarded", {})
        for uid, gone in result["discarded"].items():
            self.log.info("Sink %r: removed %d item(s) job %s committed", uid, len(gone),
                          job.job_id)
        return result

    def _discard(self, job_id: str) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "discard-output",
               self.pipeline, job_id, "--db", self.hook.get_url(), "--json"]
        # a refused variable raises its typed error (UnsafeJobEnvironmentError ...) naming it
        pipeline_vars = pipeline_env(self.env_vars, env_schema=self.env_schema,
                                     env_from_connections=self.env_from_connections,
                                     allowed_connections=self.allowed_connections)
        env = {**os.environ, **pipeline_vars,
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=self.timeout)
        try:
            return dict(json.loads(proc.stdout[proc.stdout.index("{"):]))
        except ValueError:
            raise AirflowException(f"ckpt discard-output {self.pipeline} {job_id} failed: "
                                   f"{(proc.stderr or proc.stdout)[-3000:]}") from None
