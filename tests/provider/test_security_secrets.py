"""Issue 42, items 4 and 5 and the standalone cluster mode: secrets never in argv or logs.

* the submit hook passes the job's environment (with the metadata DB URL and its password)
  to a remote driver through a ``0600`` properties file, never as ``--conf`` / ``--db``
  arguments (they were, twice, on YARN cluster mode);
* standalone cluster mode, which SparkSubmitHook refused ("env_vars is not supported in
  standalone-cluster mode"), works the same way (``spark.ckpt.env.*`` read back by the
  launch script);
* the URL and its password are registered with Airflow's secret masker;
* ``spark.redaction.regex`` covers the engine's variables (the Spark UI showed them).
"""

from __future__ import annotations

import json
import os
import re
import stat
import uuid

import pytest

from airflow_checkpoint_provider.engine.client import SPARK_REDACTION_REGEX
from airflow_checkpoint_provider.engine.launch import env_from_spark_conf
from airflow_checkpoint_provider.hooks.submit import CheckpointSubmitHook

PASSWORD = "s3cr3t-Pw0rd"
URL = f"postgresql+psycopg://ckpt:{PASSWORD}@db.example:5432/meta"
REF = "airflow_checkpoint_provider.examples.versioned_sum:build_v1"


def _hook(monkeypatch, conn: dict, **kw) -> CheckpointSubmitHook:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(conn))
    return CheckpointSubmitHook(
        pipeline=REF,
        # a job id of its own: the properties file is named after it, and the cases of one
        # test run on several xdist workers at once
        job_id=f"job42-{uuid.uuid4().hex[:8]}",
        job_name="x",
        metadata_url=URL,
        runner="spark",
        conn_id="spark_under_test",
        env_vars={"CKPT_EXAMPLE_DIR": "/data/x"},
        **kw,
    )


def _properties(cmd: list[str]) -> dict[str, str]:
    path = cmd[cmd.index("--properties-file") + 1]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    with open(path) as f:
        return dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)


@pytest.mark.parametrize(
    ("conn", "prefix"),
    [
        (
            {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}},
            "spark.yarn.appMasterEnv.",
        ),
        (
            {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client"}},
            "spark.yarn.appMasterEnv.",
        ),
        (
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": 7077,
                "extra": {"deploy-mode": "cluster"},
            },
            "spark.ckpt.env.",
        ),
    ],
    ids=["yarn-cluster", "yarn-client", "standalone-cluster"],
)
def test_a_remote_driver_gets_the_db_url_from_a_private_file_not_argv(monkeypatch, conn, prefix):
    hook = _hook(monkeypatch, conn)  # standalone cluster: SparkSubmitHook used to refuse
    cmd = hook.command()

    assert not [a for a in cmd if PASSWORD in a], cmd
    assert "--db" not in cmd
    props = _properties(cmd)
    assert props[f"{prefix}CKPT_METADATA_URL"] == URL
    assert props[f"{prefix}CKPT_EXAMPLE_DIR"] == "/data/x"
    assert PASSWORD not in hook._mask_cmd(cmd)


def test_a_local_driver_gets_it_in_its_environment_only(monkeypatch):
    hook = _hook(monkeypatch, {"conn_type": "spark", "host": "local[2]"})
    cmd = hook.command()
    assert not [a for a in cmd if PASSWORD in a] and "--properties-file" not in cmd
    assert hook._process_env()["CKPT_METADATA_URL"] == URL


def test_the_users_properties_file_is_kept(monkeypatch, tmp_path):
    mine = tmp_path / "mine.properties"
    mine.write_text("spark.executor.memory=3g\n")
    hook = _hook(
        monkeypatch,
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}},
        properties_file=str(mine),
    )
    props = _properties(hook.command())
    assert props["spark.executor.memory"] == "3g"
    assert props["spark.yarn.appMasterEnv.CKPT_METADATA_URL"] == URL


def test_the_launch_script_turns_spark_ckpt_env_into_the_environment():
    environ = {"ALREADY": "kept"}
    done = env_from_spark_conf(
        [
            ("spark.ckpt.env.CKPT_METADATA_URL", URL),
            ("spark.ckpt.env.ALREADY", "other"),
            ("spark.app.name", "x"),
        ],
        environ,
    )
    assert done == ["CKPT_METADATA_URL"]
    assert environ == {"ALREADY": "kept", "CKPT_METADATA_URL": URL}


def test_the_url_and_its_password_are_masked_in_task_logs(monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    _hook(monkeypatch, {"conn_type": "spark", "host": "local[2]"})
    shown = redact(f"connecting to {URL}; password {PASSWORD}")
    assert PASSWORD not in shown and "***" in shown


def test_the_metadata_hook_masks_the_connections_password(monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook

    other = "An0ther@Pw/x"  # percent-encoded in the URL: "An0ther%40Pw%2Fx"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CKPT_PW",
        json.dumps(
            {
                "conn_type": "checkpoint_metadata",
                "host": "db.example",
                "login": "ckpt",
                "password": other,
                "schema": "meta",
            }
        ),
    )
    url = CheckpointMetadataHook(checkpoint_conn_id="ckpt_pw").get_url()
    assert "An0ther%40Pw%2Fx" in url
    shown = redact(f"url {url} / {other}")
    assert "An0ther" not in shown, shown


@pytest.mark.parametrize(
    "key",
    [
        "spark.executorEnv.CKPT_METADATA_URL",
        "spark.executorEnv.CKPT_SNAPSHOT_HMAC_KEY",
        "spark.yarn.appMasterEnv.CKPT_METADATA_URL",
        "spark.ckpt.env.CKPT_METADATA_URL",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
    ],
)
def test_the_spark_redaction_regex_covers_the_engines_secrets(monkeypatch, key):
    hook = _hook(monkeypatch, {"conn_type": "spark", "host": "local[2]"})
    regex = hook._conf["spark.redaction.regex"]
    assert regex == SPARK_REDACTION_REGEX
    assert re.search(regex, key)
    assert re.search(regex, "spark.executorEnv.MY_DB=" + URL)  # a URL with a password
    assert not re.search(regex, "spark.executorEnv.CKPT_EXAMPLE_DIR")
