"""What every operator of this provider shares: the metadata hook and one way to wait.

:meth:`CheckpointBaseOperator.wait_until` waits for a condition of
:mod:`~airflow_checkpoint_provider.triggers.conditions` either in the triggerer
(``deferrable=True``: defer to the given trigger) or by polling here; both paths end in the
same callback with the same event dict, so the success and failure handling is written once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.engine.client import CheckpointStatus
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.ownership import DagAccess, allowed_dags, dag_access
from airflow_checkpoint_provider.triggers.conditions import ERROR, SUCCESS, TIMEOUT, Outcome

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_checkpoint_provider.engine.client import MetadataStore


class CheckpointBaseOperator(BaseOperator):
    """
    Base of the operators of this provider.

    :param checkpoint_conn_id: Airflow connection of the metadata DB
        (type ``checkpoint_metadata``).
    :param deferrable: wait in the triggerer instead of occupying a worker slot (default:
        Airflow's ``[operators] default_deferrable``, else ``False``).
    :param poll_interval: seconds between polls of the metadata DB.
    :param allowed_owner_dags: DAG ids whose jobs this task may act on besides its own DAG's
        (default: none). A job belongs to the DAG whose task submitted it; a task refuses a
        job of any other DAG with :class:`~airflow_checkpoint_provider.ownership.JobOwnershipError`
        naming both (:mod:`airflow_checkpoint_provider.ownership`). Not templated: the DAG
        author fixes it in the DAG file, a run's conf cannot widen it.
    """

    ui_color = "#F5E6C8"

    def __init__(self, *, checkpoint_conn_id: str = CheckpointMetadataHook.default_conn_name,
                 deferrable: bool | None = None,
                 poll_interval: float = 1.0,
                 allowed_owner_dags: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpoint_conn_id = checkpoint_conn_id
        self.deferrable = (conf.getboolean("operators", "default_deferrable", fallback=False)
                           if deferrable is None else deferrable)
        self.poll_interval = poll_interval
        self.allowed_owner_dags = sorted(allowed_dags(allowed_owner_dags))

    @staticmethod
    def airflow_log_dir(name: str) -> str:
        """``<Airflow's base log folder>/<name>``: default home of job logs and reports."""
        return os.path.join(conf.get("logging", "base_log_folder"), name)

    @property
    def access(self) -> DagAccess | None:
        """The jobs this task may act on: its DAG's own and ``allowed_owner_dags``' (``None``
        for an operator outside a DAG)."""
        return dag_access(self, self.allowed_owner_dags)

    @cached_property
    def hook(self) -> CheckpointMetadataHook:
        return CheckpointMetadataHook(checkpoint_conn_id=self.checkpoint_conn_id,
                                      access=self.access)

    def check_location_owned(self, location: str, what: str, *, missing_ok: bool = False) -> None:
        """Refuse a checkpoint or savepoint ``location`` of a job this task may not act on
        (:meth:`access`). A location the metadata DB does not know is refused too, unless
        ``missing_ok`` (a restore from a savepoint of another deployment)."""
        if self.access is None or not location:
            return
        from airflow_checkpoint_provider.engine.client import (
            absolute_location,
            canonical_location,
        )

        store = self.hook.get_conn()
        rec = None
        for spelling in dict.fromkeys((str(location), absolute_location(str(location)),
                                       canonical_location(str(location)))):
            rec = store.checkpoint_at(spelling)
            if rec is not None:
                break
        if rec is None:
            if missing_ok:
                return
            raise AirflowException(
                f"{self.task_id}: {location} is not a checkpoint or savepoint of any job in "
                f"the metadata DB; DAG {self.access.dag_id!r} may {what} only snapshots of its "
                "own jobs")
        job = store.get_job(rec.job_id)
        if job is not None:
            self.hook.check_owned(job, what)

    def wait_until(self, context: Context, *, check: Callable[[MetadataStore], Outcome | None],
                   trigger: BaseTrigger, method_name: str, timeout: float | None,
                   what: str) -> Any:
        """Defer to ``trigger`` or poll ``check``; then call ``method_name(context, event)``.

        Deferrable: ``check`` runs once first, and a condition already met (a request an
        earlier try submitted has succeeded, a savepoint completed while the task started)
        ends the task here, without a round trip through the triggerer: each deferral is a
        new task process, and an Airflow 3.3 scheduler that reads the deferring worker's
        exit after the resumed try started marks that try failed."""
        from airflow_checkpoint_provider.triggers.checkpoint import poll_delay

        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        store = self.hook.get_conn()
        if self.deferrable:
            outcome = check(store)
            if outcome is not None:
                return getattr(self, method_name)(context, outcome.to_event())
            self.defer(trigger=trigger, method_name=method_name)
        while True:
            outcome = check(store)
            if outcome is not None:
                event = outcome.to_event()
                break
            if deadline is not None and time.monotonic() >= deadline:
                event = {"status": TIMEOUT, "message": f"timed out after {timeout:.0f} s "
                                                       f"waiting for {what}"}
                break
            time.sleep(poll_delay(time.monotonic() - started, self.poll_interval))
        return getattr(self, method_name)(context, event)

    @staticmethod
    def check_event(event: dict[str, Any] | None) -> dict[str, Any]:
        """Return a ``success`` event; raise for ``error``, ``timeout`` and unknown statuses."""
        if not event or "status" not in event:
            raise AirflowException(f"trigger returned no status: {event!r}")
        if event["status"] == SUCCESS:
            return event
        if event["status"] in (ERROR, TIMEOUT):
            raise AirflowException(event.get("message") or event["status"])
        raise AirflowException(f"unknown trigger event status {event['status']!r}: "
                               f"{event.get('message')}")

    @staticmethod
    def idempotency_key(context: Context) -> str:
        """Stable for every try of one task instance, distinct between task instances."""
        ti = context["ti"]
        ident = json.dumps([ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1)])
        return f"airflow:{hashlib.sha256(ident.encode()).hexdigest()}"

    def find_or_submit(self, context: Context, job_id: str, action: str, params: dict[str, Any],
                       *, key_suffix: str) -> str | None:
        """A request of this task instance besides its main one (e.g. the cancel after a
        failed savepoint, the savepoint of a pre-flight check):
        the one an earlier try submitted, else a new one; ``None`` when the job takes no
        requests (it ended meanwhile)."""
        key = f"{self.idempotency_key(context)}:{key_suffix}"
        earlier = self.hook.get_conn().find_control_request(key)
        if earlier is not None:
            return earlier.request_id
        try:
            request_id = self.hook.submit_control_request(job_id, action, params,
                                                          idempotency_key=key)
        except ValueError:
            return None
        self.log.info("Submitted %s request %s for job %s", action, request_id, job_id)
        return request_id

    def fail_with_job(self, job_ref: str, what: str) -> None:
        """Raise with the job's own status and failure reason (if the job is known)."""
        job = self.hook.find_job(job_ref)
        if job is None:
            raise AirflowException(f"{what}: no job {job_ref!r} in the metadata DB")
        reason = f": {job.failure_reason}" if job.failure_reason else ""
        raise AirflowException(f"{what}: job {job.job_name} ({job.job_id}) is {job.status}{reason}"
                               + self.why_missing(None, job.failure_reason or ""))

    def why_missing(self, location: str | None, error: str) -> str:
        """For an error saying snapshot ``location`` (default: the path the error names)
        does not exist: why (it was a checkpoint its running job subsumed, i.e. retired and
        deleted) and what to do; else ``""``."""
        if "does not exist" not in (error or ""):
            return ""
        named = re.search(r"restore path (\S+) does not exist", error)
        location = location or (named[1] if named else None)
        if not location:
            return ""
        try:
            rec = self.hook.get_conn().checkpoint_at(str(location))
        except Exception:  # noqa: BLE001 - only an explanation
            return ""
        if rec is None or rec.status != CheckpointStatus.SUBSUMED:
            return ""
        return (f" (cause: checkpoint {rec.checkpoint_id} of job {rec.job_id} was subsumed -- "
                "retired and deleted by its still-running job once newer checkpoints "
                "completed -- after it was handed over. Hand over a savepoint instead "
                "(handover='savepoint' / upgrade_mode='savepoint'; a savepoint is kept), or "
                "retain more checkpoints (CheckpointConfig(retained=N)) or checkpoint less "
                "often so the hand-over outlives it)")

