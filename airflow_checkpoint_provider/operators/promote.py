"""Promote a fenced job in place: it restores another job's snapshot inside its running
application and publishes from there (control request ``PROMOTE``, issue 41)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_checkpoint_provider.engine.client import JobStatus, absolute_location
from airflow_checkpoint_provider.operators.control import _ControlRequestOperator
from airflow_checkpoint_provider.triggers.conditions import SUCCESS

if TYPE_CHECKING:
    from airflow.sdk import Context


class PromoteInPlaceOperator(_ControlRequestOperator):
    """
    The exactly-once blue-green cut-over without a new Spark application: the fenced green
    stops its attempt, restores ``snapshot`` (blue's final savepoint, or its latest
    checkpoint for a last-state cut-over) in the same application and executors, and runs
    unfenced from there. The job keeps its id.

    The job refuses what a fresh start refuses (a fenced snapshot, one not signed with this
    metadata DB's key, a source or sink that cannot restore it) and a snapshot whose job
    still runs; a refusal leaves green running fenced. With ``fallback=True`` (default) the
    task then *succeeds* with return value ``False`` (XCom ``promoted``), the log says why,
    and the DAG takes its old path (cancel the fenced green, submit it again unfenced); with
    ``fallback=False`` it fails. ``True``: green is live (its job row RUNNING, unfenced).
    A failure of the job after its fenced attempt stopped (e.g. a changed key type found by
    the restoring task) fails the promoted job: ``False`` too, and the old path submits
    green again (which meets the same refusal if it is one).

    :param job: the fenced job (id, id prefix or name). Templated.
    :param snapshot: the snapshot to restore. Templated.
    :param unfence: publish after the restore (default ``True``).
    :param fallback: return ``False`` instead of failing when the promotion did not happen.
    :param enabled: ``False`` (or a template rendering to it): do nothing, return ``False``
        (the DAG's switch between in-place and the old path). Templated.
    :param promoted_by: what a :class:`~airflow_checkpoint_provider.operators.cutover.CutOverOperator`
        before this task did (its XCom ``promoted``): ``True`` -- green is promoted already,
        this task returns ``True`` at once; ``False`` -- green refused there, this task
        returns ``False`` without asking again; ``None`` (default) -- this task promotes.
        Templated.
    :param timeout: seconds to wait for the promoted attempt to run.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    action = "PROMOTE"
    then_job_states = [JobStatus.RUNNING]
    template_fields: Sequence[str] = ("job", "snapshot", "enabled", "promoted_by")

    def __init__(self, *, job: str, snapshot: str, unfence: bool = True,
                 fallback: bool = True, enabled: bool | str = True,
                 promoted_by: bool | str | None = None, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.enabled = enabled
        self.promoted_by = promoted_by
        self.snapshot = snapshot
        self.unfence = unfence
        self.fallback = fallback

    def request_params(self) -> dict[str, Any]:
        return {"snapshot": absolute_location(str(self.snapshot)), "unfence": self.unfence}

    def execute(self, context: Context) -> Any:
        if str(self.enabled).lower() in ("false", "0", "none", ""):
            return self._not_promoted(context, "promotion in place is switched off")
        earlier = str(self.promoted_by).lower()
        if earlier == "true":
            self.log.info("Green %s was promoted in place by the cut-over task", self.job)
            context["ti"].xcom_push(key="promoted", value=True)
            return True
        if earlier == "false":
            return self._not_promoted(context, "green refused the promotion at the cut-over "
                                      "(its log says why)")
        if self.fallback:
            job = self.hook.find_job(self.job) if self.job and self.job != "None" else None
            if job is None or job.status != JobStatus.RUNNING:
                return self._not_promoted(
                    context, f"job {self.job!r} is "
                    + (f"{job.status}" if job else "unknown") + ", not RUNNING")
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if self.fallback and (event or {}).get("status") != SUCCESS:
            return self._not_promoted(context, (event or {}).get("message") or str(event))
        event = self.check_event(event)
        self.log.info("%s", event["message"])
        context["ti"].xcom_push(key="promoted", value=True)
        return True

    def _not_promoted(self, context: Context, why: str) -> bool:
        self.log.warning("Not promoted in place (the DAG falls back to a new submit): %s", why)
        context["ti"].xcom_push(key="promoted", value=False)
        return False
