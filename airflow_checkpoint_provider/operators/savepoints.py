"""Operators on savepoints: dispose them (a retention policy or given paths), pin and unpin."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.hooks.metadata import checked_job_ref
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


def dag_run_holder(context: Context) -> str:
    """The pin holder of this DAG run: ``airflow:<dag_id>/<run_id>``."""
    ti = context["ti"]
    return f"airflow:{ti.dag_id}/{ti.run_id}"


class DisposeSavepointsOperator(CheckpointBaseOperator):
    """
    Delete savepoints and mark their rows DISCARDED.

    With ``job_name``: apply a retention policy to the savepoints of every job of that name —
    dispose those older than ``max_age_seconds`` and those beyond the newest ``max_count``.
    Never disposed: the newest completed savepoint; one a job that is not terminal was
    restored from; one with an unexpired pin (:class:`PinSavepointOperator`, the
    ``pin_seconds`` of the savepoint operators, ``ckpt pin``). With ``paths``: dispose
    exactly those (a path that is not a savepoint, is still used by a running job or is
    pinned fails the task).

    The return value is the list of disposed locations. XCom ``retention_report`` says, for
    every savepoint retention looked at, what it did and why: ``{"job_name", "max_count",
    "max_age_seconds", "disposed", "kept", "savepoints": [{"location", "job_id",
    "job_name", "checkpoint_id", "complete_time", "decision": "kept"|"disposed", "rule":
    "newest"|"restored"|"pinned"|"retained"|"disposed"|"missing"|"refused", "reason"}]}``;
    the task log has one line per savepoint.

    :param job_name: job name whose savepoints the retention policy applies to. Templated.
    :param max_age_seconds: dispose savepoints completed longer ago than this. Templated.
    :param max_count: keep at most this many of the newest savepoints. Templated.
    :param paths: savepoint directories to dispose. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    """

    template_fields: Sequence[str] = ("job_name", "paths", "max_age_seconds", "max_count")

    def __init__(self, *, job_name: str | None = None,
                 max_age_seconds: float | str | None = None, max_count: int | str | None = None, paths: Sequence[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if job_name is None and not paths:
            raise ValueError("give job_name (with max_age_seconds and/or max_count) or paths")
        if job_name is not None and max_age_seconds is None and max_count is None:
            raise ValueError("a retention policy needs max_age_seconds and/or max_count")
        self.job_name = job_name
        self.max_age_seconds = max_age_seconds
        self.max_count = max_count
        self.paths = paths

    def execute(self, context: Context) -> list[str]:
        from airflow_checkpoint_provider.engine.client import (
            EngineError,
            apply_savepoint_retention,
            dispose_savepoint,
        )

        store = self.hook.get_conn()
        disposed: list[str] = []
        for path in self.paths or []:
            self.check_location_owned(path, "dispose")
        if self.job_name:
            self.hook.check_name_owned(checked_job_ref(self.job_name, "job_name"),
                                       "apply retention to")
        for path in self.paths or []:
            try:
                dispose_savepoint(path, store)
            except EngineError as exc:
                raise AirflowException(f"cannot dispose {path}: {exc}") from exc
            disposed.append(path)
        if self.job_name:
            report = apply_savepoint_retention(
                store, job_name=checked_job_ref(self.job_name, "job_name"), max_age_seconds=_number(self.max_age_seconds, float),
                max_count=_number(self.max_count, int))
            self.log.info("Savepoint retention of %s:%s", self.job_name,
                          "".join(f"\n  {line}" for line in report.lines()) or " no savepoints")
            context["ti"].xcom_push(key="retention_report", value=report.to_dict())
            disposed += report.disposed
        self.log.info("Disposed %d savepoint(s)%s", len(disposed),
                      "".join(f"\n  {p}" for p in disposed))
        return disposed


class PinSavepointOperator(CheckpointBaseOperator):
    """
    Pin a savepoint so retention and dispose keep it, e.g. the savepoint an upgrade will
    restore from, between stopping v1 and starting v2 (once v2 runs, it is kept because a
    running job was restored from it). Returns the pin as a dict.

    :param path: the savepoint directory. Templated.
    :param holder: who needs it (default: this DAG run, ``airflow:<dag_id>/<run_id>``).
        Templated.
    :param ttl_seconds: the pin expires after this many seconds (default one day; ``None``:
        until unpinned), so a DAG run that dies never keeps a savepoint forever. Templated.
    :param reason: shown by retention. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    """

    template_fields: Sequence[str] = ("path", "holder", "ttl_seconds", "reason")

    def __init__(self, *, path: str, holder: str | None = None,
                 ttl_seconds: float | str | None = 86400.0, reason: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self.reason = reason

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_checkpoint_provider.engine.client import EngineError, pin_savepoint

        holder = self.holder or dag_run_holder(context)
        self.check_location_owned(self.path, "pin")
        try:
            pin = pin_savepoint(self.hook.get_conn(), self.path, holder=holder,
                                ttl_seconds=_number(self.ttl_seconds, float),
                                reason=self.reason or f"task {context['ti'].task_id}")
        except (EngineError, ValueError) as exc:
            raise AirflowException(f"cannot pin {self.path}: {exc}") from exc
        self.log.info("Pinned savepoint %s for %s until %s", pin.location, pin.holder,
                      pin.expires_at or "unpinned")
        return pin.to_dict()


class UnpinSavepointsOperator(CheckpointBaseOperator):
    """
    Release pins: by default every pin this DAG run holds (run it last, with
    ``trigger_rule="all_done"``). Returns how many pins were released.

    :param holder: whose pins (default: this DAG run). Templated.
    :param path: only the pin on this savepoint. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    """

    template_fields: Sequence[str] = ("holder", "path")

    def __init__(self, *, holder: str | None = None, path: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.holder = holder
        self.path = path

    def execute(self, context: Context) -> int:
        from airflow_checkpoint_provider.engine.client import unpin_savepoint

        holder = self.holder or dag_run_holder(context)
        self._check_holder(holder)
        if self.path:
            self.check_location_owned(self.path, "unpin", missing_ok=True)
        removed = unpin_savepoint(self.hook.get_conn(), holder=holder, path=self.path or None)
        self.log.info("Released %d savepoint pin(s) of %s", removed, holder)
        return removed


    def _check_holder(self, holder: str) -> None:
        """Pins of Airflow holders (``airflow:<dag_id>/<run_id>``) are released only by
        their own DAG (or one ``allowed_owner_dags`` lists)."""
        access = self.access
        if access is None or not holder.startswith("airflow:"):
            return
        dag = holder[len("airflow:"):].split("/", 1)[0]
        if dag != access.dag_id and dag not in access.allowed:
            raise AirflowException(
                f"{self.task_id}: pins of holder {holder!r} belong to DAG {dag!r}; DAG "
                f"{access.dag_id!r} may release only its own (allowed_owner_dags widens it)")


def _number(value, kind):
    return None if value in (None, "", "None") else kind(value)
