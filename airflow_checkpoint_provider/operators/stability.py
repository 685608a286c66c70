"""The stability gate of blue-green deployments and upgrades, as a task."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.engine.client import EngineError, StabilityCriteria
from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
from airflow_checkpoint_provider.triggers.checkpoint import StabilityTrigger
from airflow_checkpoint_provider.triggers.conditions import ERROR, SUCCESS, check_stability

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Seconds the verdict may take after the window, before the task times out.
GRACE_S = 60.0


class StabilityGateOperator(CheckpointBaseOperator):
    """
    Watch a job for ``window`` seconds and pass only if it was stable: RUNNING without
    restarts, checkpoints completing (and fast enough), input read about as fast as a
    baseline job's (blue, on the same input), progress while input arrives (the watermark
    advances, no stall reported), watermark lag and backlog not growing
    (see :mod:`airflow_checkpoint_provider.engine.lifecycle.stability`). The task fails as soon as
    waiting cannot help (the job ended, or restarted more often than allowed).

    The verdict, every criterion with its figure and bound, is logged and pushed to XCom
    (``verdict``; also the return value when the gate passes). A bound of ``None`` switches
    its criterion off.

    :param job: the job to judge (green): id, id prefix or name. Templated.
    :param baseline_job: the job to compare throughput with (blue). Templated.
    :param window: seconds to watch. Templated.
    :param max_restarts: restarts allowed in the window. Templated.
    :param min_checkpoints: completed checkpoints needed in the window. Templated.
    :param max_checkpoint_duration_ms: slowest completed checkpoint allowed. Templated.
    :param max_failed_checkpoints: failed checkpoints allowed in the window. Templated.
    :param min_throughput_ratio: records/s at least this fraction of the baseline's (needs
        ``baseline_job``), of the sources or of every operator (``throughput_of``). Templated.
    :param throughput_of: ``"sources"`` (default: records read, which suits windowed jobs
        whose output comes in bursts) or ``"operators"`` (the slowest operator decides).
        Templated.
    :param require_progress: while its sources read records, the job's watermark must
        advance and its progress watchdog report no stall. Templated.
    :param max_watermark_lag_growth_ms: how much the watermark lag may grow. Templated.
    :param max_backlog_growth_ms: how much the checkpoint start delay may grow. Templated.
    :param max_replication_lag_s: how many seconds a CDC source may be behind its database
        at any checkpoint of the window. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    :param deferrable: wait in the triggerer.
    """

    template_fields: Sequence[str] = (
        "job", "baseline_job", "window", "max_restarts", "min_checkpoints",
        "max_checkpoint_duration_ms", "max_failed_checkpoints", "min_throughput_ratio",
        "max_watermark_lag_growth_ms", "max_backlog_growth_ms", "max_replication_lag_s",
        "throughput_of", "require_progress")
    ui_color = "#D8F0D2"

    def __init__(self, *, job: str, baseline_job: str | None = None, window: float | str = 60.0,
                 max_restarts: int | str | None = 0, min_checkpoints: int | str | None = 2,
                 max_checkpoint_duration_ms: float | str | None = None,
                 max_failed_checkpoints: int | str | None = 0,
                 min_throughput_ratio: float | str | None = 0.8,
                 max_watermark_lag_growth_ms: float | str | None = None,
                 max_backlog_growth_ms: float | str | None = None,
                 max_replication_lag_s: float | str | None = None,
                 throughput_of: str = "sources", require_progress: bool | str = True,
                 **kwargs: Any) -> None:
        kwargs.setdefault("poll_interval", 2.0)
        super().__init__(**kwargs)
        self.job = job
        self.baseline_job = baseline_job
        self.window = window
        self.max_restarts = max_restarts
        self.min_checkpoints = min_checkpoints
        self.max_checkpoint_duration_ms = max_checkpoint_duration_ms
        self.max_failed_checkpoints = max_failed_checkpoints
        self.min_throughput_ratio = min_throughput_ratio
        self.max_watermark_lag_growth_ms = max_watermark_lag_growth_ms
        self.max_backlog_growth_ms = max_backlog_growth_ms
        self.max_replication_lag_s = max_replication_lag_s
        self.throughput_of = throughput_of
        self.require_progress = require_progress

    def criteria(self) -> dict[str, Any]:
        def num(name: str, kind: type) -> Any:
            value = getattr(self, name)
            if value in (None, "", "None"):
                return None
            try:
                return kind(float(value)) if kind is int else kind(value)
            except (TypeError, ValueError):
                raise AirflowException(f"stability gate: {name} must be a number, got "
                                       f"{value!r}") from None

        values = {"window_s": num("window", float),
                  **{n: num(n, int) for n in ("max_restarts", "min_checkpoints",
                                              "max_failed_checkpoints")},
                  **{n: num(n, float) for n in ("max_checkpoint_duration_ms",
                                                "min_throughput_ratio",
                                                "max_watermark_lag_growth_ms",
                                                "max_backlog_growth_ms",
                                                "max_replication_lag_s")}}
        if values["window_s"] is None:
            raise AirflowException("stability gate: window is required")
        values["throughput_of"] = str(self.throughput_of)
        progress = str(self.require_progress).strip().lower()
        if progress not in ("true", "false", "1", "0"):
            raise AirflowException(f"stability gate: require_progress must be true or false, "
                                   f"got {self.require_progress!r}")
        values["require_progress"] = progress in ("true", "1")
        try:
            return StabilityCriteria.from_dict(values).to_dict()
        except EngineError as exc:
            raise AirflowException(f"stability gate: {exc}") from exc

    def execute(self, context: Context) -> Any:
        criteria = self.criteria()
        job = self._resolve(self.job, "job")
        baseline = self._resolve(self.baseline_job, "baseline_job") if self.baseline_job not in (
            None, "", "None") else None
        since = datetime.now(UTC)
        self.log.info("Watching job %s (%s) for %.0f s%s: %s", job.job_name, job.job_id,
                      criteria["window_s"],
                      f" against {baseline.job_name} ({baseline.job_id})" if baseline else "",
                      ", ".join(f"{k}={v}" for k, v in criteria.items() if v is not None))
        timeout = criteria["window_s"] + GRACE_S
        baseline_id = baseline.job_id if baseline else None
        return self.wait_until(
            context,
            check=lambda store: check_stability(store, job.job_id, since=since,
                                                criteria=criteria, baseline_job_id=baseline_id),
            trigger=StabilityTrigger(job_id=job.job_id, since=since.isoformat(),
                                     criteria=criteria, baseline_job_id=baseline_id,
                                     checkpoint_conn_id=self.checkpoint_conn_id,
                                     poll_interval=self.poll_interval,
                                     end_time=time.time() + timeout),
            method_name="execute_complete", timeout=timeout,
            what=f"the stability verdict on job {job.job_id}")

    def _resolve(self, ref: str | None, what: str):
        try:
            return self.hook.resolve_job(str(ref))
        except LookupError as exc:
            raise AirflowException(f"stability gate: {what}: {exc}") from exc

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        verdict = (event or {}).get("verdict")
        if verdict is not None:
            context["ti"].xcom_push(key="verdict", value=verdict)
        status = (event or {}).get("status")
        if status == SUCCESS:
            self.log.info("%s", event["message"])
            return verdict
        if status == ERROR and verdict is not None:
            self.log.error("%s", event["message"])
            failed = [c for c in verdict["checks"] if c["ok"] is False]
            raise AirflowException(
                f"job {verdict['job_name']} ({verdict['job_id']}) is not stable: "
                + "; ".join(f"{c['name']}: {c['detail']}" for c in failed))
        self.check_event(event)  # timeout, errors without a verdict, unknown statuses
        raise AirflowException(f"stability gate: unexpected event {event!r}")
