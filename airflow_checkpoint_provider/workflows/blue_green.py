"""The blue-green upgrade for the DAG author's own pipelines: green runs next to blue first.

check_conf -> (a CDC pipeline) green's replication slot copied from blue's -> hand-over
snapshot of blue (a savepoint, or its latest checkpoint: ``handover``) -> pre-flight (green's
pipeline must restore it) -> start green from it (fenced with ``exactly_once``: it publishes
nothing) -> stability gate (:class:`StabilityGate`) -> optional human approval -> cut-over:
blue stops (``cutover``) and green restores blue's final snapshot in place (``in_place``),
in one deferrable step for a savepoint cut-over (``stop_blue``,
:class:`~airflow_checkpoint_provider.operators.cutover.CutOverOperator`; for a last-state
cut-over ``promote_green`` promotes),
or, when that is off or refused, the fenced green ends and is submitted
again unfenced from it (``preflight_final``, ``end_validation``, ``go_live``). Any failure
once green may run cancels green (``cancel_green``); ``keep_blue`` says what happened and
fails if blue is not running any more, naming its latest snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param, TaskGroup, TriggerRule, task

from airflow_checkpoint_provider.engine.client import JobStatus
from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook
from airflow_checkpoint_provider.operators.cdc import CopyCdcSlotsOperator
from airflow_checkpoint_provider.operators.control import CancelJobOperator
from airflow_checkpoint_provider.operators.cutover import CutOverOperator
from airflow_checkpoint_provider.operators.promote import PromoteInPlaceOperator
from airflow_checkpoint_provider.operators.stability import StabilityGateOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.operators.upgrade import HandoverSnapshotOperator
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator
from airflow_checkpoint_provider.workflows.choices import (
    ConnectionChoice,
    Roots,
    WorkflowDefinitionError,
    add_params,
    check_conf_task,
    connection_params,
    current_dag,
    job_choice_param,
    job_env_choice,
    pipeline_choice_param,
    pipeline_choices,
    pipeline_env,
    pipeline_template,
    savepoint_dir_param,
    workflow_group,
)
from airflow_checkpoint_provider.workflows.upgrade import CONTROL_RETRIES, runner_param

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StabilityGate:
    """What green must show before the cut-over: the defaults of the run's gate params
    (a run may change each within its bounds). See
    :class:`~airflow_checkpoint_provider.operators.stability.StabilityGateOperator`.

    :param window_s: seconds green is watched.
    :param min_checkpoints: checkpoints green completes in the window.
    :param max_restarts: restarts green may take in the window.
    :param max_checkpoint_duration_ms: longest checkpoint allowed (``None``: any).
    :param min_throughput_ratio: green's records/s over blue's (of the sources or of every
        operator: ``throughput_of``; ``None``: not judged).
    :param max_watermark_lag_growth_ms: how much green's watermark lag may grow (``None``).
    :param max_backlog_growth_ms: how much green's backlog may grow (``None``).
    :param throughput_of: ``"sources"`` (records read: suits windowed jobs whose output
        comes in bursts) or ``"operators"`` (the slowest operator decides); fixed here.
    :param require_progress: while green reads records, its watermark must advance and its
        progress watchdog report no stall; fixed here.
    """

    window_s: float = 60
    min_checkpoints: int = 3
    max_restarts: int = 0
    max_checkpoint_duration_ms: float | None = None
    min_throughput_ratio: float | None = 0.8
    max_watermark_lag_growth_ms: float | None = None
    max_backlog_growth_ms: float | None = None
    throughput_of: str = "sources"
    require_progress: bool = True

    def __post_init__(self) -> None:
        if self.throughput_of not in ("sources", "operators"):
            raise WorkflowDefinitionError("StabilityGate(throughput_of=...) is 'sources' or "
                                          f"'operators', not {self.throughput_of!r}")

    def params(self) -> dict[str, Param]:
        def optional(default: float | None, maximum: float, description: str,
                     exclusive: bool = False) -> Param:
            schema: dict[str, Any] = {"type": ["null", "number"], "maximum": maximum,
                                      ("exclusiveMinimum" if exclusive else "minimum"): 0}
            return Param(default, description=description, **schema)

        return {
            "gate_window_s": Param(self.window_s, type="number", exclusiveMinimum=0,
                                   maximum=3_600, description="seconds green is watched"),
            "min_checkpoints": Param(self.min_checkpoints, type="integer", minimum=1,
                                     maximum=100),
            "max_restarts": Param(self.max_restarts, type="integer", minimum=0, maximum=100),
            "max_checkpoint_duration_ms": optional(self.max_checkpoint_duration_ms, 3_600_000,
                                                   "longest checkpoint allowed", exclusive=True),
            "min_throughput_ratio": optional(self.min_throughput_ratio, 10,
                                             "green's records/s over blue's"),
            "max_watermark_lag_growth_ms": optional(self.max_watermark_lag_growth_ms,
                                                    3_600_000, "watermark lag growth allowed"),
            "max_backlog_growth_ms": optional(self.max_backlog_growth_ms, 3_600_000,
                                              "backlog growth allowed"),
        }


def blue_green_upgrade(
    *,
    pipelines: Mapping[str, str] | Sequence[str],
    job_names: Sequence[str],
    any_job_name: bool = False,
    green: str | None = None,
    gate: StabilityGate = StabilityGate(),
    job_env: Mapping[str, Mapping[str, Any]] | None = None,
    connections: Sequence[ConnectionChoice] = (),
    savepoint_roots: Roots | None = None,
    allowed_owner_dags: Iterable[str] | None = None,
    runner: str = "spark",
    exactly_once: bool = True,
    in_place: bool = True,
    require_approval: bool = False,
    submit_kwargs: Mapping[str, Any] | None = None,
    group_id: str = "blue_green_upgrade",
    dag: DAG | None = None,
) -> TaskGroup:
    """Add the blue-green upgrade to the current DAG.

    Its tasks: ``check_conf``, ``copy_cdc_slots``, ``savepoint_blue``, ``preflight``,
    ``start_green``, ``health_gate``, ``approval``, ``approve``, ``no_approval_needed``,
    ``stop_blue``, ``fenced_cutover``, ``promote_green``, ``needs_resubmit``,
    ``preflight_final``, ``end_validation``, ``go_live``, ``cancel_green``, ``keep_blue``.
    Its params: ``blue_job`` and ``green_job`` (of ``job_names``, different), ``green_pipeline``
    (a key of ``pipelines``), ``savepoint_dir``, ``runner``, ``exactly_once``, ``handover``,
    ``cutover``, ``max_checkpoint_age_s``, ``in_place``, ``require_approval``, ``job_env``,
    one per connection and the gate's (:meth:`StabilityGate.params`).

    :param pipelines: ``{key: "module:function"}`` (or a list of references): the versions
        green may run, by key.
    :param job_names: the two (or more) job names blue and green take turns with, e.g.
        ``("orders-blue", "orders-green")``: blue defaults to the first, green to the second.
    :param any_job_name: a run may name any jobs (they must still belong to this DAG or to
        one of ``allowed_owner_dags``, or to none: started outside Airflow).
    :param green: key of green's default pipeline (default: the last key).
    :param gate: the stability gate's defaults.
    :param job_env: ``{variable: JSON schema}`` of the options a run may set; default none.
    :param connections: :class:`ConnectionChoice` per variable holding a connection's URI.
    :param savepoint_roots: where a run may put savepoints (absolute paths, or a callable
        read in the worker); default none: the jobs' own savepoint directory.
    :param allowed_owner_dags: DAGs whose jobs these tasks may act on besides this DAG's
        (e.g. the DAG that started blue).
    :param runner: the ``runner`` param's default.
    :param exactly_once: the ``exactly_once`` param's default (green fenced until the
        cut-over).
    :param in_place: the ``in_place`` param's default (promote the fenced green in its
        running application).
    :param require_approval: the ``require_approval`` param's default (a HITL step).
    :param submit_kwargs: more arguments of the submit tasks, fixed here.
    :param group_id: the TaskGroup's id (task ids are not prefixed).
    :param dag: the DAG (default: the one of the ``with DAG(...)`` block).
    :return: the TaskGroup.
    """
    dag = current_dag(dag, "blue_green_upgrade")
    choices = pipeline_choices(pipelines)
    env_param, env_schema = job_env_choice(job_env)
    dir_param, roots = savepoint_dir_param(savepoint_roots)
    if isinstance(job_names, str) or len(set(job_names)) < 2:
        raise WorkflowDefinitionError(
            "blue_green_upgrade(job_names=...): name two job names at least (blue and green "
            "run at the same time; each name has at most one running job)")
    job_names = list(job_names)
    blue_default, green_default = job_names[0], job_names[1]
    params: dict[str, Param] = {
        "blue_job": job_choice_param(blue_default, job_names, any_job_name,
                                     "the running job (blue)"),
        "green_job": job_choice_param(green_default, job_names, any_job_name,
                                      "the new job (green)"),
        "green_pipeline": pipeline_choice_param(choices, green or list(choices)[-1],
                                                "green's version"),
        "savepoint_dir": dir_param,
        "runner": runner_param(runner),
        "exactly_once": Param(exactly_once, type="boolean",
                              description="green runs fenced until the cut-over, then "
                                          "restarts from blue's final snapshot (no duplicates)"),
        "handover": Param("savepoint", enum=["savepoint", "last-state"],
                          description="what green is validated from: a savepoint of blue or "
                                      "blue's latest completed checkpoint"),
        "cutover": Param("savepoint", enum=["savepoint", "last-state",
                                            "savepoint-or-last-state"],
                         description="how blue stops at the cut-over (upgrade mode)"),
        "max_checkpoint_age_s": Param(None, type=["null", "number"], minimum=0,
                                      maximum=7 * 86_400,
                                      description="last-state refuses older checkpoints"),
        "in_place": Param(in_place, type="boolean",
                          description="exactly-once cut-over: the fenced green restores "
                                      "blue's final snapshot in its running application "
                                      "(PROMOTE); off, or if that is refused: cancel and "
                                      "submit again"),
        "require_approval": Param(require_approval, type="boolean",
                                  description="a human approves the cut-over (HITL)"),
        "job_env": env_param,
        **gate.params(),
    }
    params.update(connection_params(connections, params))
    add_params(dag, params, "blue_green_upgrade")
    env = pipeline_env(env_schema, connections)
    submit = {"runner": "{{ params.runner }}", **env, **(submit_kwargs or {})}
    pipeline = pipeline_template(choices, "green_pipeline")
    green_job_id = "{{ ti.xcom_pull(task_ids='start_green', key='job_id') }}"

    def different_jobs(run_params: Mapping[str, Any]) -> None:
        if run_params.get("blue_job") == run_params.get("green_job"):
            raise ValueError(f"param 'green_job': {run_params.get('green_job')!r} is blue's "
                             "job name too; blue and green need different names")

    with workflow_group(dag, group_id, "green next to blue, cut over when it is stable",
                        allowed_owner_dags) as group:
        check_conf = check_conf_task(params, {"savepoint_dir": roots}, different_jobs)
        # a CDC pipeline: green's own replication slot, a copy of blue's made before the
        # hand-over snapshot (so it holds every change after it); a no-op without CDC source
        copy_cdc_slots = CopyCdcSlotsOperator(
            task_id="copy_cdc_slots", **CONTROL_RETRIES, pipeline=pipeline,
            blue_job="{{ params.blue_job }}", green_job="{{ params.green_job }}", **env)
        savepoint_blue = HandoverSnapshotOperator(
            task_id="savepoint_blue", **CONTROL_RETRIES, job="{{ params.blue_job }}",
            handover="{{ params.handover }}",
            max_checkpoint_age="{{ params.max_checkpoint_age_s }}",
            directory="{{ params.savepoint_dir }}", deferrable=True)
        preflight = VerifyRestoreOperator(
            task_id="preflight", pipeline=pipeline,
            snapshot="{{ ti.xcom_pull(task_ids='savepoint_blue') }}", **env,
            fence_sinks="{{ params.exactly_once }}")  # a sink's fenced mode refuses: before
        start_green = SubmitCheckpointedJobOperator(
            task_id="start_green", pipeline=pipeline, job_name="{{ params.green_job }}",
            fence_sinks="{{ params.exactly_once }}",
            restore="{{ ti.xcom_pull(task_ids='savepoint_blue') }}", wait_for="running",
            **submit)
        health_gate = StabilityGateOperator(
            task_id="health_gate", job=green_job_id, baseline_job="{{ params.blue_job }}",
            window="{{ params.gate_window_s }}", min_checkpoints="{{ params.min_checkpoints }}",
            max_restarts="{{ params.max_restarts }}",
            max_checkpoint_duration_ms="{{ params.max_checkpoint_duration_ms }}",
            min_throughput_ratio="{{ params.min_throughput_ratio }}",
            max_watermark_lag_growth_ms="{{ params.max_watermark_lag_growth_ms }}",
            max_backlog_growth_ms="{{ params.max_backlog_growth_ms }}",
            throughput_of=gate.throughput_of, require_progress=gate.require_progress,
            deferrable=True)

        @task.branch(task_id="approval")
        def approval(params=None) -> str:
            return "approve" if params["require_approval"] else "no_approval_needed"

        approve = ApprovalOperator(
            task_id="approve",
            subject="Promote {{ params.green_job }} over {{ params.blue_job }}?",
            body="Green passed the stability gate: {{ ti.xcom_pull(task_ids='health_gate') }}."
                 " Approve stops blue and cuts over; Reject cancels green, blue keeps serving.",
            # a rejection abandons the upgrade like a failed gate: green cancelled, run failed
            fail_on_reject=True, response_timeout=timedelta(hours=24))
        no_approval_needed = EmptyOperator(task_id="no_approval_needed")
        # the cut-over in one deferral: blue stops with a savepoint and (exactly-once, in
        # place) the fenced green restores it the moment it completed and commits at once;
        # no Airflow task hand-over between blue's last commit and green's first
        stop_blue = CutOverOperator(
            task_id="stop_blue", **CONTROL_RETRIES, job="{{ params.blue_job }}",
            green_job=green_job_id, promote="{{ params.exactly_once and params.in_place }}",
            upgrade_mode="{{ params.cutover }}",
            max_checkpoint_age="{{ params.max_checkpoint_age_s }}",
            directory="{{ params.savepoint_dir }}", deferrable=True,
            trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        # exactly-once: green restores blue's final snapshot (in place, or resubmitted)
        fenced = ShortCircuitOperator(
            task_id="fenced_cutover", python_callable=lambda params: bool(params["exactly_once"]))
        preflight_final = VerifyRestoreOperator(
            task_id="preflight_final", pipeline=pipeline,
            snapshot="{{ ti.xcom_pull(task_ids='stop_blue') }}", **env)
        promote_green = PromoteInPlaceOperator(
            task_id="promote_green", **CONTROL_RETRIES, job=green_job_id,
            snapshot="{{ ti.xcom_pull(task_ids='stop_blue') }}", enabled="{{ params.in_place }}",
            # what stop_blue's cut-over did (True/False); None: promote here (last-state)
            promoted_by="{{ ti.xcom_pull(task_ids='stop_blue', key='promoted') }}",
            deferrable=True)
        # the old path only when green was not promoted in place (skips end_validation, go_live)
        needs_resubmit = ShortCircuitOperator(
            task_id="needs_resubmit", ignore_downstream_trigger_rules=False,
            python_callable=lambda ti: not ti.xcom_pull(task_ids="promote_green"))
        end_validation = CancelJobOperator(
            task_id="end_validation", **CONTROL_RETRIES, job=green_job_id, missing_ok=True)
        go_live = SubmitCheckpointedJobOperator(
            task_id="go_live", pipeline=pipeline, job_name="{{ params.green_job }}",
            restore="{{ ti.xcom_pull(task_ids='stop_blue') }}", wait_for="running", **submit,
            # never attach to the fenced green by name; its own earlier tries are re-attached
            reconnect=False, retries=2, retry_delay=timedelta(seconds=5))
        cancel_green = CancelJobOperator(
            task_id="cancel_green", **CONTROL_RETRIES, job=green_job_id, missing_ok=True,
            trigger_rule=TriggerRule.ONE_FAILED)
        keep_blue = task(task_id="keep_blue")(keep_blue_running)()

        check_conf >> copy_cdc_slots >> savepoint_blue >> preflight >> start_green
        start_green >> health_gate >> approval() >> [approve, no_approval_needed] >> stop_blue
        # in place, the promotion's own checks (trust, fencing, every source's and sink's
        # consent, checksums) and green's earlier restore of blue's savepoint stand in for the
        # final pre-flight: it runs only before a resubmit, off the output gap of the in-place
        # path
        stop_blue >> fenced >> promote_green >> needs_resubmit
        needs_resubmit >> preflight_final >> end_validation >> go_live
        # every failure once green may run ends green: also a failed cut-over (stop_blue, the
        # final pre-flight, ending the validation run); a no-op when green already ended
        [preflight, start_green, health_gate, approve, stop_blue, preflight_final,
         promote_green, end_validation] >> cancel_green >> keep_blue
    return group


def keep_blue_running(params=None, ti=None) -> str:
    """Task ``keep_blue``: say what happened -- green cancelled (or never ran), blue
    untouched and running (its job id returned); fail if blue is not running any more
    (e.g. the cut-over stopped it, then failed), naming its latest snapshot to restart from."""
    hook = CheckpointMetadataHook()
    blue = hook.resolve_job(params["blue_job"])
    green_id = ti.xcom_pull(task_ids="start_green", key="job_id")
    green = hook.find_job(green_id) if green_id else None
    green_said = (f"{green.job_name} ({green.job_id}) is {green.status}"
                  + (f": {green.failure_reason}" if green.failure_reason else "")
                  if green else "never started")
    if blue.status == JobStatus.RUNNING:
        log.warning("Upgrade abandoned: green %s; blue %s (%s) keeps running", green_said,
                    blue.job_name, blue.job_id)
        return blue.job_id
    latest = hook.get_conn().latest_completed_checkpoint(job_id=blue.job_id, kind=None)
    raise RuntimeError(
        f"Upgrade abandoned: green {green_said}; blue {blue.job_name} ({blue.job_id}) is "
        f"{blue.status}, not running"
        + (f": restart it from its latest {latest.kind.lower()} {latest.location}"
           if latest else " and has no completed checkpoint"))
