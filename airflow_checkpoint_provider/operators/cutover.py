"""Stop blue and promote the fenced green in one deferrable step (issue 54 item 2).

See :mod:`airflow_checkpoint_provider.triggers.cutover` for what happens between blue's last
commit and green's first, with no Airflow task hand-over in between.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_checkpoint_provider.engine.client import JobStatus
from airflow_checkpoint_provider.operators.upgrade import SAVEPOINT, StopForUpgradeOperator
from airflow_checkpoint_provider.triggers.cutover import CutOverTrigger, check_cutover

if TYPE_CHECKING:
    from airflow.sdk import Context

_OFF = ("false", "0", "none", "")
#: how often the task itself polls the stop before handing the cut-over to its trigger
INLINE_POLL_SECONDS = 0.1


class CutOverOperator(StopForUpgradeOperator):
    """
    The exactly-once blue-green cut-over as one task: blue stops with a savepoint and the
    fenced ``green_job`` restores that savepoint in place (``PROMOTE``) as soon as it
    completed, then takes a checkpoint at once so that its output commits; one deferral
    waits for all of it (:class:`~airflow_checkpoint_provider.triggers.cutover.CutOverTrigger`).

    The return value and XCom are :class:`StopForUpgradeOperator`'s (the savepoint), plus
    ``promoted``: ``True`` (green is live, unfenced, its job RUNNING), ``False`` (green
    refused the savepoint or ended: the reason is logged and in XCom
    ``not_promoted_reason``; blue is STOPPED; the DAG resubmits green from the savepoint) or
    ``None`` (no promotion tried: ``promote`` off, green not RUNNING, or an ``upgrade_mode``
    other than ``savepoint``, whose snapshot a separate
    :class:`~airflow_checkpoint_provider.operators.promote.PromoteInPlaceOperator` promotes).

    A retry (Airflow's lost-task-instance race killed a try) re-attaches to the stop and
    promote requests of the earlier try through their idempotency keys: nothing is asked
    twice.

    :param job: blue: job id, id prefix or job name. Templated.
    :param green_job: the fenced green (id, id prefix or name). Templated.
    :param promote: ``False`` (or a template rendering to it): only stop blue. Templated.
    :param unfence: green publishes after the restore (default ``True``).
    :param checkpoint_after: request a checkpoint of green right after its restore, so its
        first output commits then instead of one checkpoint interval later (default
        ``True``).
    :param timeout: seconds for the whole cut-over.
    :param inline_seconds: the task itself polls blue's stop (every 0.1 s) for up to this
        long and submits green's ``PROMOTE`` the moment the savepoint completed, before it
        defers: a deferral (the task's exit, the triggerer's pick-up) took 3-5 s on a loaded
        deployment, which would lie between blue's last commit and green's restore. It
        defers (or ends, when the cut-over is already over) once the PROMOTE is submitted.
    :param poll_interval: seconds between polls after the first 30 s (which poll every
        0.2 s).
    Other parameters: :class:`StopForUpgradeOperator`'s.
    """

    template_fields: Sequence[str] = (*StopForUpgradeOperator.template_fields, "green_job",
                                      "promote")

    def __init__(self, *, job: str, green_job: str | None, promote: bool | str = True,
                 unfence: bool = True, checkpoint_after: bool = True,
                 poll_interval: float = 0.5, inline_seconds: float = 30.0,
                 **kwargs: Any) -> None:
        super().__init__(job=job, poll_interval=poll_interval, **kwargs)
        self.inline_seconds = inline_seconds
        self.green_job = green_job
        self.promote = promote
        self.unfence = unfence
        self.checkpoint_after = checkpoint_after

    def _green(self, context: Context) -> str | None:
        """Green's job id when it is to be promoted here, else ``None`` (logged)."""
        if str(self.promote).lower() in _OFF or str(self.green_job).lower() in _OFF:
            self.log.info("No promotion in this task: promote=%r, green_job=%r", self.promote,
                          self.green_job)
            return None
        green = self.hook.find_job(str(self.green_job))
        if green is not None and green.status != JobStatus.RUNNING:
            # an earlier try of this task promoted it: green restores blue's savepoint in
            # place (RESTARTING), and this try reattaches to that promotion
            earlier = self.hook.get_conn().find_control_request(
                f"{self.idempotency_key(context)}:promote")
            if earlier is not None and earlier.job_id == green.job_id:
                self.log.info("Green %r is %s after the PROMOTE an earlier try of this task "
                              "submitted: reattaching to it", self.green_job, green.status)
                return green.job_id
        if green is None or green.status != JobStatus.RUNNING:
            self.log.warning("Green %r is %s, not RUNNING: blue only stops here",
                             self.green_job, green.status if green else "unknown")
            return None
        return green.job_id

    def execute(self, context: Context) -> Any:
        ti = context["ti"]
        ti.xcom_push(key="promoted", value=None)
        mode = self._mode()
        self._max_age()
        green = self._green(context)
        if green is None or mode != SAVEPOINT:
            return super().execute(context)
        ti.xcom_push(key="upgrade_mode_used", value=SAVEPOINT)
        ti.xcom_push(key="fallback_reason", value=None)
        stopped = self._stopped_meanwhile(context)
        if stopped is not None:  # an earlier try's stop ended blue with its savepoint
            stop_id, snapshot, blue = None, stopped["location"], stopped["job_id"]
        else:
            stop_id, snapshot, blue = self.submit(context), None, self.job_id
        key = self.idempotency_key(context)
        self.log.info("Cut-over: blue %s stops with a savepoint, green %s restores it in place "
                      "as soon as it completed", blue, green)

        def check(store: Any) -> Any:
            return check_cutover(
                store, stop_request_id=stop_id, snapshot=snapshot, green_job_id=green,
                key=key, blue_job_id=blue, unfence=self.unfence,
                checkpoint_after=self.checkpoint_after, access=self.access)

        outcome = self._until_promote_submitted(check, key)
        if outcome is not None:
            return self.cutover_complete(context, outcome.to_event())
        return self.wait_until(
            context,
            check=check,
            trigger=CutOverTrigger(
                stop_request_id=stop_id, snapshot=snapshot, green_job_id=green, key=key,
                blue_job_id=blue, unfence=self.unfence, checkpoint_after=self.checkpoint_after,
                access=None if self.access is None else self.access.serialize(),
                checkpoint_conn_id=self.checkpoint_conn_id, poll_interval=self.poll_interval,
                end_time=time.time() + self.timeout),
            method_name="cutover_complete", timeout=self.timeout,
            what=f"the cut-over from {blue} to {green}")

    def _until_promote_submitted(self, check: Any, key: str) -> Any:
        """Poll the cut-over in this task until green's ``PROMOTE`` is submitted (blue's
        stop savepoint completed) or the cut-over is over (its outcome), for at most
        ``inline_seconds``; ``None``: go on waiting (deferred or polling)."""
        store = self.hook.get_conn()
        deadline = time.monotonic() + float(self.inline_seconds)
        while True:
            outcome = check(store)
            if outcome is not None:
                return outcome
            if store.find_control_request(f"{key}:promote") is not None:
                self.log.info("Blue's savepoint completed: green's PROMOTE is submitted")
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(INLINE_POLL_SECONDS)

    def cutover_complete(self, context: Context, event: dict[str, Any]) -> Any:
        event = self.check_event(event)
        ti = context["ti"]
        promoted = event.get("promoted")
        ti.xcom_push(key="promoted", value=promoted)
        ti.xcom_push(key="promote_request_id", value=event.get("promote_request_id"))
        ti.xcom_push(key="not_promoted_reason", value=event.get("not_promoted_reason"))
        if promoted is False:
            self.log.warning("Green was not promoted in place (the DAG submits it again from "
                             "the savepoint): %s", event.get("not_promoted_reason"))
        self.log.info("%s", event["message"])
        return self.on_request_succeeded(context, event)
