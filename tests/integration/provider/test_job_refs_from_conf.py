"""A DAG run's conf is untrusted: a job name or reference with a trailing newline (which
``re.match`` with ``$`` used to accept) is refused by the operators and sensors with a clear
error before anything is looked up or started (issue 25, item 6)."""

from __future__ import annotations

import os

import pytest
from airflow.sdk.exceptions import AirflowException
from savepoint_helpers import FakeTI
from test_provider_operators import _submit

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.control import TriggerSavepointOperator
from airflow_checkpoint_provider.sensors.checkpoint import JobStateSensor

BAD = ["versioned-sum\n", "versioned-sum\r\n", "versioned-sum\n../x"]


@pytest.mark.parametrize("name", BAD)
def test_submit_refuses_a_job_name_with_a_newline_and_starts_nothing(metadata_url, tmp_path, name):
    op = _submit(tmp_path)
    op.job_name = name  # as rendered from "{{ dag_run.conf['job_name'] }}"
    with pytest.raises(AirflowException, match=r"submit: job_name .*must match"):
        op.execute({"ti": FakeTI("d", "submit")})
    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("name", BAD)
def test_control_operators_and_sensors_refuse_a_job_reference_with_a_newline(metadata_url,
                                                                             name):
    with MetadataStore(metadata_url) as store:
        store.create_job(job_id="j1", job_name="versioned-sum", parallelism=1)
        store.set_job_status("j1", "RUNNING")
    op = TriggerSavepointOperator(task_id="savepoint", job=name)
    with pytest.raises(AirflowException, match="must match"):
        op.execute({"ti": FakeTI("d", "submit")})
    sensor = JobStateSensor(task_id="running", job=name, timeout=1)
    with pytest.raises(AirflowException, match="running: job .*must match"):
        sensor.execute({"ti": FakeTI("d", "submit")})
    with MetadataStore(metadata_url) as store:
        assert store.list_control_requests("j1") == []


# -- issue 50, item 2: the operator enforces the author's lists, whatever the DAG's params ----
# A DAG whose params were loosened (or that passes a conf through unchecked) still cannot
# make the submit operator take a URL, a path or an unbounded number from a run's conf, nor
# a connection the author did not list.

PEN_TEST_CDC_URL = "postgresql://cdc@source-db:5432/shop?hostaddr=127.0.0.1"


def _refused(metadata_url, tmp_path, match: str, **kwargs) -> AirflowException:
    from airflow_checkpoint_provider.params import EXAMPLE_ENV

    kwargs.setdefault("env_schema", EXAMPLE_ENV)
    op = _submit(tmp_path, **kwargs)
    with pytest.raises(AirflowException, match=match) as err:
        op.execute({"ti": FakeTI("d", "submit")})
    with MetadataStore(metadata_url) as store:
        assert store.list_jobs() == []  # refused before anything started
    assert not (tmp_path / "logs").exists()
    return err.value


@pytest.mark.timeout(60)
def test_break1_submit_refuses_a_url_in_env_vars_outside_the_authors_env_schema(
        metadata_url, tmp_path):
    from airflow_checkpoint_provider.params import CDC_ENV

    _refused(metadata_url, tmp_path, r"submit: environment variable 'CKPT_CDC_URL' may not be "
             r"set here \(allowed: CKPT_CDC_TABLES\)",
             env_vars={"CKPT_CDC_URL": PEN_TEST_CDC_URL, "CKPT_CDC_TABLES": "orders"},
             env_schema=CDC_ENV)
    _refused(metadata_url, tmp_path, "'CKPT_EXAMPLE_PG_URL' may not be set here",
             env_vars={"CKPT_EXAMPLE_PG_URL": PEN_TEST_CDC_URL})


@pytest.mark.timeout(60)
def test_break1_a_variable_from_a_connection_is_not_also_taken_from_env_vars(
        metadata_url, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE", "postgresql://cdc@127.0.0.1:5432/shop")
    _refused(metadata_url, tmp_path, "'CKPT_CDC_URL' comes from a connection",
             env_vars={"CKPT_CDC_URL": PEN_TEST_CDC_URL}, env_schema=None,
             env_from_connections={"CKPT_CDC_URL": "cdc_source"},
             allowed_connections=("cdc_source",))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("conn_id", ["checkpoint_metadata_default", "spark_default",
                                     "cdc_source\n", 5])
def test_submit_refuses_a_connection_id_outside_the_authors_list(metadata_url, tmp_path,
                                                                 conn_id):
    err = _refused(metadata_url, tmp_path,
                   r"'CKPT_CDC_URL': connection id .* is not one this task may use "
                   r"\(allowed_connections: cdc_source, cdc_replica\)",
                   env_from_connections={"CKPT_CDC_URL": conn_id},
                   allowed_connections=("cdc_source", "cdc_replica"))
    assert repr(conn_id) in str(err)


@pytest.mark.timeout(60)
def test_break3_submit_refuses_a_directory_in_env_vars(metadata_url, tmp_path):
    other_team = tmp_path / "other-team"
    _refused(metadata_url, tmp_path, "'CKPT_EXAMPLE_DIR' may not be set here",
             env_vars={"CKPT_EXAMPLE_DIR": str(other_team)})
    assert not other_team.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", [128, "128", 0, True])
def test_break8_submit_refuses_parallelism_beyond_the_authors_bound(metadata_url, tmp_path,
                                                                     value):
    _refused(metadata_url, tmp_path, "'CKPT_EXAMPLE_PARALLELISM'",
             env_vars={"CKPT_EXAMPLE_PARALLELISM": value})


def _job_processes(job_id: str) -> list[int]:
    import os

    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if job_id.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.mark.timeout(120)
def test_a_listed_connection_reaches_the_jobs_environment_never_its_argv_or_the_log(
        metadata_url, tmp_path, monkeypatch, caplog):
    """The author's connection, resolved in the worker: the job process has the URI in its
    environment (``/proc/PID/environ``), not on its command line, and the task log never
    shows the password."""
    uri = "postgresql://cdc:s3cr%40t-pw@source-db:5432/shop?sslmode=require"
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE", uri)
    from airflow_checkpoint_provider.params import EXAMPLE_ENV

    op = _submit(tmp_path, env_vars={"CKPT_EXAMPLE_RECORDS": 5000, "CKPT_EXAMPLE_RATE": 500},
                 env_schema=EXAMPLE_ENV,
                 # a variable the example ignores: the job runs, we read its environment
                 env_from_connections={"CKPT_TEST_SOURCE_URL": "cdc_source"},
                 allowed_connections=("cdc_source",))
    # a run id of its own: the job id derives from it, and other tests' jobs (on other xdist
    # workers, with FakeTI("d", "submit")) would share the id this test looks processes up by
    ti = FakeTI("d", "submit", run_id=f"manual__{tmp_path.name}-{os.getpid()}")
    caplog.set_level("DEBUG")
    job_id = op.execute({"ti": ti})

    pids = _job_processes(job_id)
    assert pids, "no process of the job"
    for pid in pids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read()
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        assert b"s3cr" not in argv and b"source-db" not in argv
        assert b"CKPT_TEST_SOURCE_URL=" + uri.encode() in environ
        assert b"CKPT_EXAMPLE_RECORDS=5000" in environ
    assert "s3cr" not in caplog.text
    logs = [f for f in (tmp_path / "logs").rglob("*") if f.is_file()]
    assert logs and not [f for f in logs if "s3cr" in f.read_text(errors="replace")]
