"""The workflows as a library (issue 54, item 1): what a DAG author writes and what a run's
conf may choose. A conf picks a key of the author's pipelines, one of the author's job names
and connection ids, a directory under the author's roots and bounded numbers; anything else
is refused when the run is created (``ParamValidationError`` naming the param) and again in
the worker (task ``check_conf``). Mistakes in the DAG file fail when it is parsed."""

from __future__ import annotations

from datetime import datetime

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import ParamValidationError

from airflow_checkpoint_provider.workflows import (
    ConnectionChoice,
    StabilityGate,
    WorkflowDefinitionError,
    blue_green_upgrade,
    savepoint_upgrade,
    scheduled_savepoints,
)

PIPELINES = {"v1": "pkg.jobs:build_v1", "v2": "pkg.jobs:build_v2"}
ROOTS = ["/data/savepoints/orders"]
ORDERS_DB = ConnectionChoice("ORDERS_DB_URL", ("orders_db", "orders_db_replica"))


def _dag(dag_id: str, schedule: str | None = None) -> DAG:
    return DAG(dag_id, schedule=schedule, start_date=datetime(2026, 1, 1), catchup=False,
               render_template_as_native_obj=True)


def _blue_green(**overrides) -> DAG:
    args = {"pipelines": PIPELINES, "job_names": ("orders-blue", "orders-green"),
            "gate": StabilityGate(window_s=120, min_throughput_ratio=None),
            "connections": [ORDERS_DB], "savepoint_roots": ROOTS,
            "allowed_owner_dags": ["orders_pipeline"]}
    args.update(overrides)
    with _dag("orders_blue_green") as dag:
        blue_green_upgrade(**args)
    return dag


def _validate(dag: DAG, conf: dict) -> None:
    """What Airflow does with a trigger's conf before it creates the run (on the serialized
    DAG, as the api-server and the scheduler have it)."""
    from airflow.serialization.serialized_objects import DagSerialization

    serialized = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    serialized.params.deep_merge(conf).validate()


@pytest.mark.parametrize(
    ("param", "value"),
    [
        # code: only a key of the author's pipelines, never a reference
        ("green_pipeline", "pkg.jobs:build_v2"),
        ("green_pipeline", "os:system"),
        ("green_pipeline", "v3"),
        # another job: only the author's job names
        ("blue_job", "payments"),
        ("green_job", "../orders-blue"),
        # a host or credential: only the author's connection ids
        ("orders_db_url_conn_id", "postgresql://u:pw@attacker/db"),
        ("orders_db_url_conn_id", "checkpoint_metadata_default"),
        # a path: only under the author's roots
        ("savepoint_dir", "/etc/cron.d"),
        ("savepoint_dir", "/data/savepoints/orders/../../other-team"),
        # options: only the ones the author lists (none here)
        ("job_env", {"ORDERS_DB_URL": "postgresql://u@attacker/db"}),
        ("job_env", {"PYTHONPATH": "/tmp/evil"}),
        # numbers: within the author's bounds
        ("gate_window_s", 10**9),
        ("min_checkpoints", 0),
    ],
)
def test_a_conf_value_outside_the_authors_choices_is_refused_naming_the_param(param, value):
    dag = _blue_green()
    with pytest.raises(ParamValidationError, match=param):
        _validate(dag, {param: value})


def test_the_conf_chooses_among_the_authors_values():
    dag = _blue_green()
    _validate(dag, {})
    _validate(dag, {"green_pipeline": "v1", "blue_job": "orders-green", "green_job": "orders-blue",
                    "orders_db_url_conn_id": "orders_db_replica",
                    "savepoint_dir": "/data/savepoints/orders/2026-12",
                    "min_throughput_ratio": None, "gate_window_s": 30})
    params = dag.params
    assert params["green_pipeline"] == "v2" and params["blue_job"] == "orders-blue"
    assert params["green_job"] == "orders-green" and params["gate_window_s"] == 120
    assert params["min_throughput_ratio"] is None and params["orders_db_url_conn_id"] == "orders_db"


def test_the_worker_checks_the_conf_again_before_anything_starts():
    """check_conf: the author's schemas (not the run's), roots and blue != green."""
    dag = _blue_green()
    check_conf = dag.get_task("check_conf").python_callable
    defaults = {name: dag.params[name] for name in dag.params}
    check_conf(params=defaults)
    refusals = [({"green_pipeline": "pkg.jobs:build_v2"}, "param 'green_pipeline'"),
                ({"blue_job": "payments"}, "param 'blue_job'"),
                ({"savepoint_dir": "/srv/other"}, "param 'savepoint_dir'"),
                ({"green_job": "orders-blue"}, "param 'green_job'.*different names")]
    for change, message in refusals:
        with pytest.raises(ValueError, match=message):
            check_conf(params={**defaults, **change})


def test_the_chosen_key_renders_the_authors_reference_and_nothing_else():
    import jinja2

    dag = _blue_green()
    template = dag.get_task("start_green").pipeline
    env = dag.get_template_env()
    assert env.from_string(template).render(params={"green_pipeline": "v1"}) == \
        "pkg.jobs:build_v1"
    with pytest.raises(jinja2.UndefinedError):  # a key the author did not write
        env.from_string(template).render(params={"green_pipeline": "os:system"})
    assert dag.get_task("preflight").pipeline == template == dag.get_task("go_live").pipeline


def test_every_task_acting_on_a_job_gets_the_authors_allowed_owner_dags_and_connections():
    from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator
    from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator

    dag = _blue_green()
    provider_tasks = [t for t in dag.tasks if isinstance(t, CheckpointBaseOperator)]
    assert len(provider_tasks) == 11
    assert {t.task_id: t.allowed_owner_dags for t in provider_tasks} == {
        t.task_id: ["orders_pipeline"] for t in provider_tasks}
    for task_id in ("start_green", "go_live"):
        submit = dag.get_task(task_id)
        assert isinstance(submit, SubmitCheckpointedJobOperator)
        assert submit.env_from_connections == {
            "ORDERS_DB_URL": "{{ params.orders_db_url_conn_id }}"}
        assert submit.allowed_connections == ("orders_db", "orders_db_replica")
        assert submit.env_schema == {}


def test_the_workflows_keep_their_task_ids_and_group_them():
    with _dag("orders_upgrade") as upgrade:
        group = savepoint_upgrade(pipelines=PIPELINES, job_name="orders")
    assert group.group_id == "savepoint_upgrade"
    assert set(upgrade.task_ids) == {
        "check_conf", "preflight", "stop_v1", "start_v2", "wait_v2_checkpoint", "upgraded",
        "cancel_v2", "guard_rollback", "ask_rollback", "decide_rollback", "rollback_ok",
        "restart_v1"}
    assert upgrade.params["v1_pipeline"] == "v1" and upgrade.params["v2_pipeline"] == "v2"
    with pytest.raises(ParamValidationError, match="job_name"):
        _validate(upgrade, {"job_name": "payments"})  # only the author's job name

    with _dag("orders_savepoints", schedule="@hourly") as savepoints:
        scheduled_savepoints(job_name="orders", savepoint_roots=ROOTS, max_count=5)
    assert set(savepoints.task_ids) == {"check_conf", "savepoint", "retention"}
    assert savepoints.params["max_count"] == 5


def test_an_upstream_task_of_the_author_chains_to_the_group():
    from airflow.providers.standard.operators.empty import EmptyOperator

    with _dag("orders_chained") as dag:
        before = EmptyOperator(task_id="announce")
        before >> savepoint_upgrade(pipelines=PIPELINES, job_name="orders")
    assert dag.get_task("check_conf").upstream_task_ids == {"announce"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipelines": {"v2": "{{ params.code }}"}}, "module.path:function"),
        ({"pipelines": {"v2": "/tmp/evil.py"}}, "module.path:function"),
        ({"pipelines": "pkg.jobs:build_v2"}, "mapping"),
        ({"pipelines": {"v 2": "pkg.jobs:build_v2"}}, "key 'v 2'"),
        ({"pipelines": PIPELINES, "green": "v3"}, "'v3' is not a key"),
        ({"job_names": ("orders",)}, "two job names"),
        ({"job_names": ("orders-blue", "../x")}, "no job name"),
        ({"allowed_owner_dags": "{{ params.owner }}"}, "list of DAG ids"),
        ({"job_env": {"ORDERS_DB_URL": {"type": "string", "maxLength": 9}},
          "connections": [ORDERS_DB]}, "must bound the value|come from connections"),
        ({"job_env": {"ORDERS_DB_URL": {"type": "string", "pattern": "^a$"}},
          "connections": [ORDERS_DB]}, "come from connections"),
        ({"connections": [ConnectionChoice("RUNNER_URL", ("r",), param="runner")]},
         "param 'runner' is taken"),
        ({"connections": [ORDERS_DB, ORDERS_DB]}, "is taken"),
        ({"connections": ["orders_db"]}, "ConnectionChoice"),
        ({"savepoint_roots": ["/"]}, "confines nothing"),
        ({"runner": "yarn"}, "runner"),
    ],
)
def test_mistakes_in_the_dag_file_fail_when_it_is_parsed(kwargs, message):
    with pytest.raises((WorkflowDefinitionError, ValueError, TypeError), match=message):
        _blue_green(**kwargs)


def test_a_dag_without_native_rendering_or_with_two_workflows_is_refused():
    with DAG("plain", schedule=None, start_date=datetime(2026, 1, 1)), \
            pytest.raises(WorkflowDefinitionError, match="render_template_as_native_obj=True"):
        savepoint_upgrade(pipelines=PIPELINES, job_name="orders")
    with _dag("two"), pytest.raises(WorkflowDefinitionError, match="already has the params"):
        savepoint_upgrade(pipelines=PIPELINES, job_name="orders")
        scheduled_savepoints(job_name="orders")
    with pytest.raises(WorkflowDefinitionError, match="inside `with DAG"):
        scheduled_savepoints(job_name="orders")


def test_connection_choice_names_its_param_and_may_be_optional():
    assert ORDERS_DB.param == "orders_db_url_conn_id"
    optional = ConnectionChoice("PG_URL", ("pg",), param="sink_conn_id", optional=True)
    assert optional.as_param().value is None
    assert optional.as_param().schema["enum"] == [None, "pg"]
    with pytest.raises(WorkflowDefinitionError, match="no environment variable name"):
        ConnectionChoice("orders-db", ("orders_db",))
    with pytest.raises(WorkflowDefinitionError, match="at least one connection id"):
        ConnectionChoice("ORDERS_DB_URL", ())


def test_the_workflows_are_a_public_import_path():
    import airflow_checkpoint_provider.workflows as workflows

    assert set(workflows.__all__) == {
        "ConnectionChoice", "StabilityGate", "WorkflowDefinitionError", "blue_green_upgrade",
        "savepoint_upgrade", "scheduled_savepoints"}
