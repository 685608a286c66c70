"""docker/: Docker does not run here, so check what can be checked: the compose file parses
and every service, volume, env var, connection and path it references is consistent."""

import json
import os
import re
import tomllib

import pytest
import yaml
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
DOCKER = os.path.join(ROOT, "docker")


@pytest.fixture(scope="module")
def compose():
    with open(os.path.join(DOCKER, "docker-compose.yml")) as f:
        return yaml.safe_load(f)


def services(compose):
    return compose["services"]


def test_every_service_has_an_image_and_known_dependencies(compose):
    names = set(services(compose))
    assert {"postgres", "minio", "spark-master", "spark-worker-1", "spark-worker-2",
            "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer"} <= names
    for name, svc in services(compose).items():
        assert "image" in svc or "build" in svc, name
        deps = svc.get("depends_on") or []
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in names, f"{name} depends on unknown service {dep}"


def test_volumes_and_bind_mounts_exist(compose):
    declared = set(compose.get("volumes") or {})
    for name, svc in services(compose).items():
        for vol in svc.get("volumes") or []:
            src = vol.split(":", 1)[0]
            if src.startswith((".", "/")):
                assert os.path.exists(os.path.normpath(os.path.join(DOCKER, src))), (name, src)
            else:
                assert src in declared, f"{name} mounts undeclared volume {src}"


def test_airflow_services_are_wired_through_environment(compose):
    airflow = {n: s for n, s in services(compose).items() if n.startswith("airflow-")}
    commands = {s.get("command") for s in airflow.values()}
    assert {"api-server", "scheduler", "dag-processor", "triggerer"} <= commands
    names = set(services(compose))
    for svc in airflow.values():
        env = svc["environment"]
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
        assert "@postgres:5432/airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert spark["conn_type"] == "spark" and spark["host"] == "spark://spark-master"
        meta = json.loads(env["AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT"])
        from airflow_checkpoint_provider import get_provider_info

        conn_types = {c["connection-type"] for c in get_provider_info()["connection-types"]}
        assert meta["conn_type"] in conn_types
        assert "@postgres:5432/checkpoints" in meta["extra"]["url"]
        assert "/airflow" not in meta["extra"]["url"], "never Airflow's own database"
        assert env["CKPT_METADATA_URL"].split("@")[1] == meta["extra"]["url"].split("@")[1]
        endpoint = re.match(r"http://([^:]+):(\d+)", env["CKPT_S3_ENDPOINT_URL"])
        assert endpoint and endpoint.group(1) in names
        # the DAGs folder is mounted where Airflow looks for it
        assert any(v.endswith(":/opt/airflow/dags") for v in svc["volumes"])
        assert os.path.isdir(os.path.join(ROOT, "dags"))


def test_credentials_come_from_the_environment_not_literals(compose):
    text = open(os.path.join(DOCKER, "docker-compose.yml")).read()
    for secret_var in ("CKPT_DB_PASSWORD", "MINIO_ROOT_PASSWORD", "AIRFLOW_DB_PASSWORD"):
        assert f"${{{secret_var}:-" in text


def test_the_checkpoints_db_is_created_and_the_bucket_exists(compose):
    init = open(os.path.join(DOCKER, "init-checkpoints-db.sh")).read()
    assert "CREATE DATABASE checkpoints" in init
    assert "checkpoints" in services(compose)["minio-init"]["entrypoint"]


def test_dockerfile_installs_extras_that_exist():
    dockerfile = open(os.path.join(DOCKER, "Dockerfile")).read()
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = set(tomllib.load(f)["project"]["optional-dependencies"])
    used = re.search(r"airflow-checkpoint-provider\[([^\]]+)\]", dockerfile).group(1).split(",")
    assert set(used) <= extras
    assert "openjdk-17" in dockerfile and "FROM apache/airflow:3" in dockerfile
