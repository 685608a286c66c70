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
        {"CKPT_EXAMPLE_DIR": "/srv/other-team"},
        {"CKPT_CDC_URL": "postgresql://cdc@source-db:5432/shop?hostaddr=127.0.0.1"},
        {"CKPT_EXAMPLE_PG_URL": "postgresql://u@attacker:5432/db"},
        {"CKPT_EXAMPLE_PARALLELISM": 128},
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
                "job_env": {"CKPT_EXAMPLE_KEYS": 5, "CKPT_EXAMPLE_RECORDS": 20000},
            },
        ),
        (
            "postgres_cdc",
            {"cdc_conn_id": "cdc_source", "job_env": {"CKPT_CDC_TABLES": "orders, public.items"}},
        ),
        (
            "savepoint_upgrade_restore",
            {
                "v1_pipeline": f"{EXAMPLE}:build_v2",
                "v2_pipeline": f"{EXAMPLE}:build_v2_broken",
                "savepoint_dir": "",
                "job_env": {"CKPT_EXAMPLE_FAIL_AFTER_S": 20, "CKPT_EXAMPLE_PARALLELISM": 2},
            },
        ),
        (
            "blue_green_upgrade",
            {
                "green_pipeline": f"{EXAMPLE}:build_v2_slow",
                "savepoint_dir": "",
                "job_env": {"CKPT_EXAMPLE_SLOW_MS": 10, "CKPT_EXAMPLE_RATE": 200.0},
                "gate_window_s": 10,
                "max_checkpoint_age_s": 0.001,
            },
        ),
        ("scheduled_savepoints", {"job_name": "versioned-sum.v2_a", "savepoint_dir": ""}),
    ],
)
def test_the_confs_the_dags_document_still_validate(airflow_db, dag_id, conf):
    _validate(airflow_db, dag_id, conf)


# -- issue 50, item 2: a run's conf chooses among the author's values ----------------------
# It never names a host, a credential, a path or code: external systems are connection ids
# from the author's list, directories lie under the author's roots (symlinks resolved), and
# numbers have the author's bounds -- in the DAG's params and again in the worker.

PEN_TEST_CDC_URL = "postgresql://cdc@source-db:5432/shop?hostaddr=127.0.0.1"


@pytest.mark.timeout(120)
def test_break1_the_pen_testers_cdc_url_in_conf_is_refused_and_starts_nothing(
    airflow_db, metadata_url
):
    """Break 1: the URL reached libpq (host from .pgpass, hostaddr elsewhere)."""
    conf = {"runner": "local", "job_env": {"CKPT_CDC_URL": PEN_TEST_CDC_URL,
                                           "CKPT_CDC_TABLES": "orders"}}
    with pytest.raises(ParamValidationError, match="CKPT_CDC_URL"):
        airflow_db.get_dag("postgres_cdc").test(run_conf=conf)
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []


@pytest.mark.parametrize("dag_id", ENV_DAGS)
@pytest.mark.parametrize("variable", ["CKPT_CDC_URL", "CKPT_EXAMPLE_PG_URL"])
def test_no_dag_takes_a_url_from_conf(airflow_db, dag_id, variable):
    with pytest.raises(ParamValidationError, match=variable):
        _validate(airflow_db, dag_id, {"job_env": {variable: PEN_TEST_CDC_URL}})


@pytest.mark.parametrize("conn_id", ["checkpoint_metadata_default", "spark_default", "", None])
def test_the_cdc_connection_is_one_of_the_authors_list(airflow_db, conn_id):
    with pytest.raises(ParamValidationError, match="cdc_conn_id"):
        _validate(airflow_db, "postgres_cdc", {"cdc_conn_id": conn_id})


@pytest.mark.timeout(120)
def test_break3_a_directory_in_job_env_is_refused_and_nothing_is_written_there(
    airflow_db, metadata_url, tmp_path
):
    """Break 3: part files and a checkpoints tree landed in another team's directory."""
    other_team = tmp_path / "other-team"
    other_team.mkdir()
    conf = {"runner": "local", "job_name": "running-sum",
            "job_env": {"CKPT_EXAMPLE_DIR": str(other_team), "CKPT_EXAMPLE_RECORDS": 100}}
    with pytest.raises(ParamValidationError, match="CKPT_EXAMPLE_DIR"):
        airflow_db.get_dag("checkpointed_batch").test(run_conf=conf)
    assert list(other_team.iterdir()) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dag_id", ["checkpointed_batch", "savepoint_upgrade_restore",
                                    "blue_green_upgrade"])
def test_break8_parallelism_128_is_refused(airflow_db, dag_id):
    """Break 8 (part): 128 slot processes planned on the worker from a trigger's conf."""
    for value in (128, "128", 0, 2.5):
        with pytest.raises(ParamValidationError, match="CKPT_EXAMPLE_PARALLELISM"):
            _validate(airflow_db, dag_id, {"job_env": {"CKPT_EXAMPLE_PARALLELISM": value}})
    _validate(airflow_db, dag_id, {"job_env": {"CKPT_EXAMPLE_PARALLELISM": 2}})


@pytest.mark.parametrize(
    ("dag_id", "param", "value"),
    [
        ("blue_green_upgrade", "min_checkpoints", 10**6),
        ("blue_green_upgrade", "gate_window_s", 10**9),
        ("blue_green_upgrade", "max_restarts", -1),
        ("blue_green_upgrade", "max_checkpoint_age_s", 10**12),
        ("blue_green_upgrade", "max_checkpoint_duration_ms", 10**12),
        ("blue_green_upgrade", "min_throughput_ratio", 1e9),
        ("savepoint_upgrade_restore", "max_checkpoint_age_s", -5),
        ("postgres_cdc", "max_lag_seconds", 10**9),
        ("postgres_cdc", "gate_window_s", 0),
        ("scheduled_savepoints", "max_count", 10**9),
        ("scheduled_savepoints", "max_age_hours", 10**9),
    ],
)
def test_numbers_from_conf_have_the_authors_bounds(airflow_db, dag_id, param, value):
    with pytest.raises(ParamValidationError, match=param):
        _validate(airflow_db, dag_id, {param: value})


@pytest.mark.parametrize(
    ("variable", "value"),
    [("CKPT_EXAMPLE_RECORDS", 10**12), ("CKPT_EXAMPLE_RATE", 0), ("CKPT_EXAMPLE_KEYS", "5"),
     ("CKPT_EXAMPLE_PG_TABLES", "sums; DROP TABLE x"), ("CKPT_EXAMPLE_INTERVAL_MS", 1)],
)
def test_job_env_values_have_the_authors_bounds(airflow_db, variable, value):
    with pytest.raises(ParamValidationError, match=variable):
        _validate(airflow_db, "blue_green_upgrade", {"job_env": {variable: value}})


def test_directory_param_matches_only_paths_under_its_roots():
    import jsonschema

    from airflow_checkpoint_provider.params import directory_param

    def valid(param, value: str) -> bool:  # the whole schema: 'pattern' and 'not'
        return jsonschema.Draft7Validator(param.schema).is_valid(value)

    param = directory_param("d", ["/data/sp", "/a.b"])
    ok = ["", "/data/sp", "/data/sp/", "/data/sp/x/y", "/a.b/c"]
    bad = ["/data/spx", "/data/sp/../x", "/aXb/c", "/etc", "/data/sp\n", "data/sp"]
    assert [v for v in ok if not valid(param, v)] == []
    assert [v for v in bad if valid(param, v)] == []
    assert not valid(directory_param("d", []), "/any")
    with pytest.raises(ValueError, match="confines nothing"):
        directory_param("d", ["/"])


def test_check_directory_refuses_a_symlink_inside_a_root_that_points_outside(tmp_path):
    from airflow_checkpoint_provider.params import DirectoryNotAllowedError, check_directory

    root, outside = tmp_path / "savepoints", tmp_path / "other-team"
    (root / "team-a").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    assert check_directory("savepoint_dir", str(root / "team-a" / "new" / "x"), [str(root)]) == \
        str(root / "team-a" / "new" / "x")
    assert check_directory("savepoint_dir", "", [str(root)]) == ""
    for path in (root / "escape", root / "escape" / "not-yet" / "deeper", outside):
        with pytest.raises(DirectoryNotAllowedError) as err:
            check_directory("savepoint_dir", str(path), [str(root)])
        message = str(err.value)
        assert "'savepoint_dir'" in message and str(path) in message and str(root) in message


def _check_conf(bag, dag_id: str):
    """The DAG's ``check_conf`` task function and the author-fixed params it checks against
    (the workflow's, :mod:`airflow_checkpoint_provider.workflows`)."""
    check_conf = bag.get_dag(dag_id).get_task("check_conf").python_callable
    return check_conf, check_conf.author_params


@pytest.mark.parametrize(("dag_id", "param"), DIR_PARAMS)
def test_the_dags_refuse_a_directory_outside_their_roots_in_the_worker(
    airflow_db, metadata_url, tmp_path, dag_id, param
):
    """In the worker, before anything starts: symlinks resolved (a pattern cannot see one)."""
    root = tmp_path / "example"  # $CKPT_EXAMPLE_DIR (fixture): savepoints/ and workspaces
    outside = tmp_path / "other-team"
    (root / "savepoints").mkdir(parents=True)
    outside.mkdir()
    (root / "savepoints" / "escape").symlink_to(outside)
    check_conf, authors = _check_conf(airflow_db, dag_id)
    params = {name: p.value for name, p in authors.items()}
    check_conf(params={**params, param: str(root / "savepoints" / "v2" / "new")})
    check_conf(params={**params, param: str(root / "a-workspace" / "savepoints")})
    check_conf(params={**params, param: ""})
    for bad in (root / "savepoints" / "escape" / "x", outside, "/etc", tmp_path / "examplex"):
        with pytest.raises(ValueError) as err:
            check_conf(params={**params, param: str(bad)})
        message = str(err.value)
        assert f"param {param!r}" in message and str(bad) in message and str(root) in message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("via", ["symlink", "absolute"])
def test_break3_a_run_with_a_savepoint_dir_outside_the_roots_fails_before_anything_starts(
    airflow_db, metadata_url, tmp_path, monkeypatch, via
):
    """dag.test() of scheduled_savepoints: ``check_conf`` fails, no savepoint is requested."""
    from provider_helpers import run_dag

    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    monkeypatch.setattr(airflow_db.get_dag("scheduled_savepoints"), "deadline", None)
    root, outside = tmp_path / "example" / "savepoints", tmp_path / "other-team"
    root.mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    target = root / "escape" / "sp" if via == "symlink" else outside / "sp"
    conf = {"job_name": "versioned-sum", "savepoint_dir": str(target), "max_count": 24,
            "max_age_hours": 72}

    state, tis, _ = run_dag(airflow_db, "scheduled_savepoints", conf)

    assert tis == {"check_conf": "failed", "savepoint": "upstream_failed",
                   "retention": "upstream_failed"}
    assert state == "failed"
    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []
    assert list(outside.iterdir()) == []


def test_check_run_params_uses_the_authors_schemas_not_the_runs(airflow_db):
    """A loosened serialized DAG (or a run that got past it) is refused in the worker."""
    from airflow_checkpoint_provider.params import check_run_params

    _, authors = _check_conf(airflow_db, "blue_green_upgrade")
    with pytest.raises(ValueError, match="param 'job_env'.*128"):
        check_run_params({"job_env": {"CKPT_EXAMPLE_PARALLELISM": 128}}, authors)
    with pytest.raises(ValueError, match="param 'gate_window_s'"):
        check_run_params({"gate_window_s": 10**9}, authors)


def test_job_env_param_takes_only_bounded_value_schemas():
    from airflow_checkpoint_provider.params import EXAMPLE_ENV, job_env_param

    with pytest.raises(TypeError, match="JSON schema"):
        job_env_param({}, ["CKPT_EXAMPLE_DIR"])
    with pytest.raises(ValueError, match="must bound the value"):
        job_env_param({}, {"CKPT_EXAMPLE_DIR": {"type": "string"}})
    assert not {"CKPT_EXAMPLE_DIR", "CKPT_EXAMPLE_PG_URL", "CKPT_CDC_URL"} & set(EXAMPLE_ENV)
