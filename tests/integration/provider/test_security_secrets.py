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
    # issue 50, break 6: an in-memory file this process passes to spark-submit, not a path
    # on disk (the file stayed in $TMPDIR after spark-submit had read it)
    assert path.startswith("/dev/fd/"), path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
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


# -- issue 50, break 6: nothing holding the password stays on disk ------------------------------


def _files_containing(needle: bytes, *roots: str) -> list[str]:
    found = []
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as f:
                        if needle in f.read():
                            found.append(path)
                except OSError:
                    continue
    return found


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch):
    """``$TMPDIR`` of this test (and of its spark-submit): a directory searched afterwards."""
    import tempfile

    from airflow_checkpoint_provider.engine.fs import private

    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(private, "_temp_bases", {})
    monkeypatch.delenv("CKPT_TEMP_DIR", raising=False)
    return str(tmp)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("spark_env")
def test_no_file_holding_the_db_password_remains_after_blocking_failed_and_detached_submits(
        spark_cluster, postgres_server, private_tmpdir, tmp_path, monkeypatch):
    import time

    from airflow.sdk.exceptions import AirflowException

    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    secret = f"Pw-{uuid.uuid4().hex}"
    # the test server trusts local connections: the password is sent nowhere, but the URL
    # (CKPT_METADATA_URL) holds it exactly as a production one does
    url = postgres_server.create_database().replace("postgres@", f"postgres:{secret}@", 1)
    host, port = spark_cluster.url.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECRET_TEST", json.dumps(
        {"conn_type": "spark", "host": host, "port": int(port), "extra": {"deploy-mode": "cluster"}}))
    old_dir = os.path.join("/tmp", f"checkpoint-submit-{os.getuid()}")  # where main wrote it
    old_before = set(os.listdir(old_dir)) if os.path.isdir(old_dir) else set()

    def hook(job_id: str, **kw) -> CheckpointSubmitHook:
        return CheckpointSubmitHook(
            pipeline="airflow_checkpoint_provider.examples.running_sum:build", job_id=job_id,
            job_name="secret-sum", metadata_url=url, runner="spark", conn_id="spark_secret_test",
            conf={"spark.executor.memory": "512m", "spark.cores.max": "2",
                  "spark.executor.cores": "2"},
            env_vars={"CKPT_EXAMPLE_DIR": str(tmp_path / job_id), "CKPT_EXAMPLE_RECORDS": "3000",
                      "CKPT_EXAMPLE_KEYS": "10"}, **kw)

    def driver_reads_only_the_properties(h: CheckpointSubmitHook) -> CheckpointSubmitHook:
        # A remote driver that runs here: YARN and Kubernetes are not available, and Spark
        # refuses Python applications in standalone cluster mode. The hook made its remote
        # driver's properties (cluster mode); the driver then runs in client mode on the
        # same cluster, and its only way to the DB URL is those properties: spark-submit
        # reads them, the launch script turns spark.ckpt.env.* into its environment.
        h._job_env.pop("CKPT_METADATA_URL")
        h._connection["deploy_mode"] = "client"
        h._should_track_driver_status = False
        return h

    # 1. blocking, the job runs and finishes
    blocking = driver_reads_only_the_properties(hook("secret-blocking"))
    assert "--properties-file" in blocking.command()
    blocking.submit_blocking()
    with MetadataStore(url, migrate=False) as store:
        assert store.get_job("secret-blocking").status == "FINISHED"

    # 2. failed: spark-submit reads the properties, then refuses (cluster mode), blocking
    # and detached
    with pytest.raises(AirflowException):
        hook("secret-failed").submit_blocking()
    with pytest.raises(AirflowException, match="launcher exited"):
        hook("secret-failed-detached").submit_detached(timeout=120)

    # 3. detached: returns once the job runs; its spark-submit goes on without the hook
    detached = driver_reads_only_the_properties(hook("secret-detached"))
    info = detached.submit_detached(timeout=300)
    with MetadataStore(url, migrate=False) as store:
        deadline = time.monotonic() + 300
        while store.get_job("secret-detached").status not in ("FINISHED", "FAILED"):
            assert time.monotonic() < deadline, "the detached job did not end"
            time.sleep(0.5)
        assert store.get_job("secret-detached").status == "FINISHED"
    assert os.path.isfile(info["log_file"])
    for h in (blocking, detached):
        h.close_properties()

    needle = secret.encode()
    assert _files_containing(needle, private_tmpdir, str(tmp_path), spark_cluster.workdir) == []
    old_after = set(os.listdir(old_dir)) if os.path.isdir(old_dir) else set()
    assert _files_containing(needle, *(os.path.join(old_dir, n)
                                       for n in old_after - old_before)) == []
    assert old_after - old_before == set()
