"""Issue 42, item 1: a DAG run's conf is untrusted input.

The attack: a user who may only trigger DAGs ran ``checkpointed_batch`` with
``{"job_env": {"PYTHONWARNINGS": "ignore::antigravity.x", "BROWSER": "sh -c 'id > F' #%s"}}``
and the worker ran the command (Python imports ``antigravity`` while parsing the warning
filter, which opens a "browser": ``$BROWSER``). Now every example DAG's parameters are typed
``Param``s (allowlisted pipelines, job-name and directory patterns, allowlisted environment
names) and the submit hook refuses interpreter and loader variables whoever passes them.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from airflow.sdk.exceptions import ParamValidationError

from airflow_checkpoint_provider.hooks.job_env import UnsafeJobEnvironmentError, check_job_env
from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"


def _attack(tmp_path) -> tuple[dict, str]:
    marker = str(tmp_path / "pwned")
    return {
        "PYTHONWARNINGS": "ignore::antigravity.x",
        "BROWSER": f'sh -c "id > {marker}" #%s',
    }, marker


_SERIALIZED: dict = {}


def _validate(bag, dag_id: str, conf: dict) -> None:
    """What Airflow does with a trigger's conf before it creates the run (on the serialized
    DAG, as the api-server and the scheduler have it)."""
    from airflow.serialization.serialized_objects import DagSerialization

    if dag_id not in _SERIALIZED:
        _SERIALIZED[dag_id] = DagSerialization.deserialize_dag(
            DagSerialization.serialize_dag(bag.get_dag(dag_id))
        )
    _SERIALIZED[dag_id].params.deep_merge(conf).validate()


@pytest.mark.timeout(120)
def test_the_reported_attack_through_dag_test_runs_nothing(airflow_db, metadata_url, tmp_path):
    env, marker = _attack(tmp_path)
    conf = {"runner": "local", "job_name": "running-sum", "job_env": env}

    with pytest.raises(ParamValidationError, match="PYTHONWARNINGS"):
        airflow_db.get_dag("checkpointed_batch").test(run_conf=conf)

    time.sleep(1.0)  # the old code's job would have written it at its interpreter's start
    assert not os.path.exists(marker)
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []


@pytest.mark.timeout(60)
def test_the_hook_refuses_the_attack_even_without_a_dag(tmp_path):
    env, marker = _attack(tmp_path)
    with pytest.raises(UnsafeJobEnvironmentError, match="'PYTHONWARNINGS'") as err:
        CheckpointSubmitHook(
            pipeline=f"{EXAMPLE}:build_v1",
            job_id="j1",
            job_name="x",
            metadata_url=f"sqlite:///{tmp_path}/m.db",
            runner="local",
            env_vars=env,
        )
    assert err.value.variable == "PYTHONWARNINGS"
    assert not os.path.exists(marker)


@pytest.mark.parametrize(
    "name",
    [
        "BASH_ENV",
        "ENV",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONWARNINGS",
        "PYTHONHOME",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "PYSPARK_SUBMIT_ARGS",
        "BROWSER",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "SPARK_CONF_DIR",
        "SPARK_HOME",
        "SPARK_SUBMIT_OPTS",
        "SPARK_DIST_CLASSPATH",
        "PATH",
        "OPENSSL_CONF",
        "BASH_FUNC_ls%%",
        "GLIBC_TUNABLES",
        "AWS_CONFIG_FILE",
        "HADOOP_CONF_DIR",
        "CKPT_SNAPSHOT_HMAC_KEY",
        "CKPT_METADATA_URL",
        "CKPT_ALLOWED_SAVEPOINT_ROOTS",
        "ld_preload",
        "",
        "A=B",
    ],
)
def test_interpreter_and_loader_variables_are_refused_by_name(name, tmp_path):
    with pytest.raises(UnsafeJobEnvironmentError) as err:
        CheckpointSubmitHook(
            pipeline=f"{EXAMPLE}:build_v1",
            job_id="j1",
            job_name="x",
            metadata_url=f"sqlite:///{tmp_path}/m.db",
            runner="local",
            env_vars={"CKPT_EXAMPLE_DIR": "/tmp/x", name: "1"},
        )
    assert err.value.variable == name and repr(name) in str(err.value)


def test_options_a_pipeline_reads_and_address_variables_pass():
    env = {
        "CKPT_EXAMPLE_DIR": "/data/x",
        "CKPT_CDC_TABLES": "orders",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AWS_REGION": "eu-west-1",
        "MY_OPTION": "a b",
    }
    assert check_job_env(env) == env
    with pytest.raises(UnsafeJobEnvironmentError, match="NUL"):
        check_job_env({"MY_OPTION": "a\x00b"})


def test_user_values_never_replace_the_hooks_interpreter(tmp_path):
    hook = CheckpointSubmitHook(
        pipeline=f"{EXAMPLE}:build_v1",
        job_id="j1",
        job_name="x",
        metadata_url=f"sqlite:///{tmp_path}/m.db",
        runner="local",
        env_vars={"CKPT_EXAMPLE_DIR": "/tmp/x"},
    )
    env = hook._process_env()  # what the job process gets
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert env["PYSPARK_DRIVER_PYTHON"] == sys.executable


@pytest.mark.parametrize("pipeline", ["-h", "--conf=x:y", "a:b\n", "../evil:build", "a b:c", ""])
def test_the_hook_refuses_a_pipeline_that_is_no_module_reference(pipeline, tmp_path):
    with pytest.raises(ValueError, match="must be a reference module.path:function"):
        CheckpointSubmitHook(
            pipeline=pipeline,
            job_id="j1",
            job_name="x",
            metadata_url=f"sqlite:///{tmp_path}/m.db",
            runner="local",
        )


def test_verify_restore_refuses_a_loader_variable(tmp_path):
    from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator

    marker = tmp_path / "pwned"
    op = VerifyRestoreOperator(
        task_id="preflight",
        pipeline=f"{EXAMPLE}:build_v2",
        snapshot=str(tmp_path / "sp"),
        env_vars={"BASH_ENV": f"$(touch {marker})"},
    )
    with pytest.raises(UnsafeJobEnvironmentError, match="'BASH_ENV'"):
        op._check(str(tmp_path / "sp"))
    assert not marker.exists()


# -- every example DAG: typed, validated parameters ------------------------------------------

PIPELINE_PARAMS = [
    ("checkpointed_batch", "pipeline"),
    ("postgres_cdc", "pipeline"),
    ("savepoint_upgrade_restore", "v1_pipeline"),
    ("savepoint_upgrade_restore", "v2_pipeline"),
    ("blue_green_upgrade", "green_pipeline"),
]
JOB_NAME_PARAMS = [
    ("checkpointed_batch", "job_name"),
    ("postgres_cdc", "job_name"),
    ("savepoint_upgrade_restore", "job_name"),
    ("blue_green_upgrade", "blue_job"),
    ("blue_green_upgrade", "green_job"),
    ("scheduled_savepoints", "job_name"),
]
ENV_DAGS = ["checkpointed_batch", "postgres_cdc", "savepoint_upgrade_restore", "blue_green_upgrade"]
DIR_PARAMS = [
    ("savepoint_upgrade_restore", "savepoint_dir"),
    ("blue_green_upgrade", "savepoint_dir"),
    ("scheduled_savepoints", "savepoint_dir"),
]


@pytest.mark.parametrize(("dag_id", "param"), PIPELINE_PARAMS)
@pytest.mark.parametrize(
    "value", ["antigravity:x", "os:system", f"{EXAMPLE}:build_v1 --x", "tests.pipelines:build"]
)
def test_a_pipeline_outside_the_dags_allowlist_is_refused(airflow_db, dag_id, param, value):
    with pytest.raises(ParamValidationError, match="is not one of"):
        _validate(airflow_db, dag_id, {param: value})


@pytest.mark.parametrize(("dag_id", "param"), JOB_NAME_PARAMS)
@pytest.mark.parametrize(
    "value", ["../victim", "a/b", "name\n", ".hidden", "-x", "", "a..b", "x" * 129, "<script>"]
)
def test_a_job_name_that_is_no_name_is_refused(airflow_db, dag_id, param, value):
    with pytest.raises(ParamValidationError):
        _validate(airflow_db, dag_id, {param: value})


@pytest.mark.parametrize("dag_id", ENV_DAGS)
@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONWARNINGS": "ignore::antigravity.x"},
        {"BASH_ENV": "$(id)"},
        {"LD_PRELOAD": "/tmp/x.so"},
        {"CKPT_EXAMPLE_DIR": 5},
        {"SOMETHING_ELSE": "1"},
    ],
)
def test_job_env_holds_only_the_dags_allowlisted_variables(airflow_db, dag_id, env):
    with pytest.raises(ParamValidationError):
        _validate(airflow_db, dag_id, {"job_env": env})


@pytest.mark.parametrize(("dag_id", "param"), DIR_PARAMS)
@pytest.mark.parametrize(
    "value", ["relative/dir", "/data/../etc", "/data/..", "/a\n", "file:///etc"]
)
def test_a_directory_must_be_absolute_without_dotdot(airflow_db, dag_id, param, value):
    with pytest.raises(ParamValidationError):
        _validate(airflow_db, dag_id, {param: value})


@pytest.mark.parametrize(
    ("dag_id", "conf"),
    [
        (
            "checkpointed_batch",
            {
                "pipeline": "airflow_checkpoint_provider.examples.flaky_batch:build",
                "job_name": "flaky-batch",
                "runner": "local",
                "job_env": {"CKPT_EXAMPLE_DIR": "/tmp/x", "CKPT_EXAMPLE_KEYS": "5"},
            },
        ),
        (
            "postgres_cdc",
            {"job_env": {"CKPT_CDC_URL": "postgresql://u@h/db", "CKPT_CDC_TABLES": "orders"}},
        ),
        (
            "savepoint_upgrade_restore",
            {
                "v1_pipeline": f"{EXAMPLE}:build_v2",
                "v2_pipeline": f"{EXAMPLE}:build_v2_broken",
                "savepoint_dir": "/tmp/x/savepoints",
                "job_env": {"CKPT_EXAMPLE_FAIL_AFTER_S": "20"},
            },
        ),
        ("blue_green_upgrade", {"green_pipeline": f"{EXAMPLE}:build_v2_slow", "savepoint_dir": ""}),
        ("scheduled_savepoints", {"job_name": "versioned-sum.v2_a", "savepoint_dir": "/s p/x"}),
    ],
)
def test_the_confs_the_dags_document_still_validate(airflow_db, dag_id, conf):
    _validate(airflow_db, dag_id, conf)
