"""What a workflow's DAG run may choose: the DAG author's values, fixed in the DAG file.

A workflow function (:func:`~airflow_checkpoint_provider.workflows.savepoint_upgrade`,
:func:`~airflow_checkpoint_provider.workflows.blue_green_upgrade`,
:func:`~airflow_checkpoint_provider.workflows.scheduled_savepoints`) turns the author's
arguments into typed params of the DAG (:mod:`airflow_checkpoint_provider.params`): a run's
conf picks a *key* of the author's pipelines, one of the author's job names and connection
ids, a directory under the author's roots and bounded numbers. It never names code, a host,
a credential or a path of its own. Airflow checks the conf against these params when the run
is created (``ParamValidationError`` naming the param), and the workflow's first task,
``check_conf``, checks it again in the worker (symlinks resolved) before anything starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param, TaskGroup, task

from airflow_checkpoint_provider.params import (
    JOB_NAME_PATTERN,
    PIPELINE_PATTERN,
    check_run_params,
    directory_param,
    job_env_param,
    job_name_param,
    normalized_roots,
)

#: a key of the author's pipelines: a short name (``v2``) or a ``module:function`` reference
PIPELINE_KEY_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$"
#: the roots of savepoint directories: fixed paths, or a callable the worker calls
#: (:func:`~airflow_checkpoint_provider.params.example_savepoint_roots`)
Roots = Iterable[str] | Callable[[], Iterable[str]]


class WorkflowDefinitionError(ValueError):
    """A workflow's arguments in the DAG file are wrong (found when the file is parsed)."""


@dataclass(frozen=True)
class ConnectionChoice:
    """The job's environment variable ``env_var`` gets the URI of an Airflow connection,
    one of ``conn_ids`` (the author's list), chosen by the run's param ``param`` (default:
    the first id; with ``optional``, none: the variable is not set). The URI is resolved in
    the worker and reaches only the job's environment, never the conf, argv or a log.

    :param env_var: the variable the pipeline reads, e.g. ``ORDERS_DB_URL``.
    :param conn_ids: the connection ids a run may choose.
    :param param: the run's param (default ``<env_var in lower case>_conn_id``).
    :param optional: the param may be empty (the default): the variable is not set.
    """

    env_var: str
    conn_ids: tuple[str, ...]
    param: str = ""
    optional: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "conn_ids", tuple(self.conn_ids))
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", self.env_var):
            raise WorkflowDefinitionError(
                f"ConnectionChoice: {self.env_var!r} is no environment variable name "
                "(upper case letters, digits, _)")
        if not self.conn_ids or not all(isinstance(c, str) and c for c in self.conn_ids):
            raise WorkflowDefinitionError(
                f"ConnectionChoice {self.env_var}: name at least one connection id")
        if not self.param:
            object.__setattr__(self, "param", f"{self.env_var.lower()}_conn_id")

    def as_param(self) -> Param:
        what = f"the connection whose URI the job gets as {self.env_var}"
        if self.optional:
            return Param(None, type=["null", "string"], enum=[None, *self.conn_ids],
                         description=f"{what}: one of {', '.join(self.conn_ids)}, or empty")
        return Param(self.conn_ids[0], type="string", enum=list(self.conn_ids),
                     description=f"{what}: one of {', '.join(self.conn_ids)}")


def connection_params(connections: Sequence[ConnectionChoice], taken: Iterable[str]
                      ) -> dict[str, Param]:
    """The run's param of each connection choice; a param name used twice, or one the
    workflow has itself, is refused (``ConnectionChoice(param=...)`` renames it)."""
    out: dict[str, Param] = {}
    taken = set(taken)
    for choice in connections:
        if not isinstance(choice, ConnectionChoice):
            raise WorkflowDefinitionError(
                f"connections holds {choice!r}: each entry is a ConnectionChoice(env_var, "
                "conn_ids)")
        if choice.param in out or choice.param in taken:
            raise WorkflowDefinitionError(
                f"ConnectionChoice {choice.env_var}: param {choice.param!r} is taken; name "
                "another with param=")
        out[choice.param] = choice.as_param()
    return out


def pipeline_choices(pipelines: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """``{key: "module:function"}`` from the author's mapping (or a list of references,
    each its own key), every key and reference checked."""
    if isinstance(pipelines, str):
        raise WorkflowDefinitionError(
            "pipelines must be a mapping {key: 'module:function'} (or a list of references), "
            f"not the string {pipelines!r}")
    choices = dict(pipelines) if isinstance(pipelines, Mapping) else {p: p for p in pipelines}
    if not choices:
        raise WorkflowDefinitionError("pipelines: name at least one pipeline")
    for key, ref in choices.items():
        if not isinstance(key, str) or not re.fullmatch(PIPELINE_KEY_PATTERN, key):
            raise WorkflowDefinitionError(
                f"pipelines: key {key!r} must match {PIPELINE_KEY_PATTERN} (e.g. 'v2')")
        if not isinstance(ref, str) or not re.search(PIPELINE_PATTERN, ref) or "{" in ref:
            raise WorkflowDefinitionError(
                f"pipelines[{key!r}]: {ref!r} must be a reference module.path:function "
                "written in the DAG file")
    return choices


def pipeline_choice_param(choices: Mapping[str, str], default: str | None,
                          description: str) -> Param:
    """The run's choice among the keys of ``choices`` (default ``default``, else the first)."""
    default = next(iter(choices)) if default is None else default
    if default not in choices:
        raise WorkflowDefinitionError(
            f"default pipeline {default!r} is not a key of pipelines ({', '.join(choices)})")
    listed = "; ".join(k if k == v else f"{k}: {v}" for k, v in choices.items())
    return Param(default, type="string", enum=list(choices),
                 description=f"{description}: one of the DAG's pipelines ({listed})")


def pipeline_template(choices: Mapping[str, str], param: str) -> str:
    """A template rendering the reference the run's ``param`` chose (a dict literal of the
    author's references indexed by the param: no task between the choice and its use). A
    key the author did not write renders nothing: Airflow's strict undefined fails the task
    (``| string`` makes the native renderer look at it), else the submit refuses ``""``."""
    literal = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in choices.items()) + "}"
    return "{{ " + literal + "[params." + param + "] | string }}"


def job_choice_param(default: str, choices: Sequence[str], any_name: bool,
                     description: str) -> Param:
    """One of the author's job names (``choices``, ``default`` among them), or with
    ``any_name`` any job name (the job's DAG must still be this one or one of
    ``allowed_owner_dags``: :mod:`airflow_checkpoint_provider.ownership`)."""
    for name in [default, *choices]:
        if not isinstance(name, str) or not re.search(JOB_NAME_PATTERN, name):
            raise WorkflowDefinitionError(f"job name {name!r} is no job name "
                                          "([A-Za-z0-9][A-Za-z0-9._-]*, no '..')")
    if any_name:
        return job_name_param(default, description=description)
    if default not in choices:
        raise WorkflowDefinitionError(f"job name {default!r} is not among {list(choices)}")
    return Param(default, type="string", enum=list(choices), pattern=JOB_NAME_PATTERN,
                 description=f"{description}: one of {', '.join(choices)}")


def savepoint_dir_param(roots: Roots | None) -> tuple[Param, Roots]:
    """The ``savepoint_dir`` param and the roots ``check_conf`` checks it against: fixed
    roots are also in the param's pattern (refused at run creation); a callable is read in
    the worker; ``None``: only empty (the job's own savepoint directory)."""
    description = "savepoint directory (empty: the job's own)"
    if roots is None:
        return directory_param(description, ()), ()
    if callable(roots):
        return directory_param(description), roots
    fixed = normalized_roots(roots)
    return directory_param(description, fixed), fixed


def job_env_choice(job_env: Mapping[str, Mapping[str, Any]] | None) -> tuple[Param, dict]:
    """The ``job_env`` param (the variables the author lists, each bounded) and its schema."""
    schema = {k: dict(v) for k, v in (job_env or {}).items()}
    return job_env_param({}, schema, description="options of the job (environment): only "
                         + (", ".join(sorted(schema)) or "none")), schema


def pipeline_env(env_schema: Mapping[str, Any], connections: Sequence[ConnectionChoice]
                 ) -> dict[str, Any]:
    """The environment arguments of every task that builds or runs the pipeline: the run's
    bounded ``job_env`` and the URIs of the chosen connections, so all see the same systems."""
    clash = {c.env_var for c in connections} & set(env_schema)
    if clash:
        raise WorkflowDefinitionError(
            f"{sorted(clash)} come from connections: they cannot also be job_env options")
    return {"env_vars": "{{ params.job_env }}", "env_schema": dict(env_schema),
            "env_from_connections": {c.env_var: "{{ params." + c.param + " }}"
                                     for c in connections},
            "allowed_connections": tuple(dict.fromkeys(i for c in connections
                                                       for i in c.conn_ids))}


def current_dag(dag: DAG | None, workflow: str) -> DAG:
    """``dag``, or the DAG of the ``with DAG(...)`` block the workflow is called in; it must
    render templates as native objects (the workflows' params are numbers and booleans)."""
    if dag is None:
        from airflow.sdk.definitions._internal.contextmanager import DagContext

        dag = DagContext.get_current()
    if dag is None:
        raise WorkflowDefinitionError(f"{workflow}() adds tasks to a DAG: call it inside "
                                      "`with DAG(...):` or pass dag=")
    if not dag.render_template_as_native_obj:
        raise WorkflowDefinitionError(
            f"{workflow}() needs DAG(..., render_template_as_native_obj=True) in DAG "
            f"{dag.dag_id!r}: its params are numbers, booleans and lists")
    return dag


def add_params(dag: DAG, params: Mapping[str, Param], workflow: str) -> None:
    """Add the workflow's params to the DAG's (before its tasks are made: each task copies
    the DAG's params). A name the DAG already has is refused: one workflow per DAG."""
    clash = sorted(set(params) & set(dag.params))
    if clash:
        raise WorkflowDefinitionError(
            f"{workflow}(): DAG {dag.dag_id!r} already has the params {clash} (one workflow "
            "per DAG; rename the DAG's own)")
    for name, param in params.items():
        dag.params[name] = param
    if dag.timetable.can_be_scheduled:  # as DAG(...) checks a scheduled DAG's params
        dag.params.validate()


def check_conf_task(params: Mapping[str, Param], directories: Mapping[str, Roots],
                    extra: Callable[[Mapping[str, Any]], None] | None = None):
    """Task ``check_conf``: the run's params against the author's schemas and roots
    (symlinks resolved), before anything starts; a refusal names the param, the value and
    the rule. Its function keeps the author's params as ``.author_params``."""
    schemas = dict(params)

    def check_conf(params=None) -> None:
        """The run's params against the DAG file's schemas and roots (symlinks resolved),
        before anything starts: a refusal names the param, the value and the rule."""
        check_run_params(params, schemas, directories)
        if extra is not None:
            extra(params)

    check_conf.author_params = schemas  # type: ignore[attr-defined]
    # a pure check: retried at once when Airflow loses the try (a lost task instance under
    # load failed the whole run at its first task)
    return task(task_id="check_conf", retries=2,
                retry_delay=timedelta(seconds=1))(check_conf)()


def workflow_group(dag: DAG, group_id: str, tooltip: str,
                   allowed_owner_dags: Iterable[str] | None) -> TaskGroup:
    """The TaskGroup of a workflow's tasks. Task ids are not prefixed (``stop_blue``, not
    ``<group>.stop_blue``): the templates and the docs name them. ``allowed_owner_dags``
    reaches every operator of the group (fixed here, never templated)."""
    from airflow_checkpoint_provider.ownership import allowed_dags

    owners: dict[str, Any] = {"allowed_owner_dags": sorted(allowed_dags(allowed_owner_dags))}
    # TaskGroup's attrs converter types default_args as a type variable mypy cannot bind
    return TaskGroup(group_id, dag=dag, tooltip=tooltip, prefix_group_id=False,
                     default_args=owners)  # type: ignore[arg-type]
