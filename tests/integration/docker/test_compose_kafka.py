"""docker/'s Apache Kafka service (issue 52): images cannot be pulled here, so check what can
be checked without running it: a single KRaft node (broker and controller, no ZooKeeper)
whose listeners, advertised addresses and controller quorum agree with each other, internal
topics at replication factor 1 (the exactly-once sink needs the transaction coordinator),
the stack's jobs pointed at it, the example's topics created, its data in a volume; and,
where the docker compose plugin exists, ``docker compose config`` accepts the file."""

import base64
import os
import re
import shutil
import subprocess

import pytest
import yaml
from repo_paths import REPO_ROOT

ROOT = str(REPO_ROOT)
COMPOSE = os.path.join(ROOT, "docker", "docker-compose.yml")


@pytest.fixture(scope="module")
def compose():
    with open(COMPOSE) as f:
        return yaml.safe_load(f)


def default(value: str) -> str:
    """``${VAR:-default}`` -> ``default`` (what compose uses when VAR is unset)."""
    m = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
    return m.group(1) if m else value


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` -> ``{NAME: (host, port)}``."""
    out = {}
    for item in value.split(","):
        name, rest = item.split("://")
        host, port = rest.rsplit(":", 1)
        out[name] = (host, int(port))
    return out


def test_kafka_is_one_kraft_node_with_a_pinned_apache_image(compose):
    kafka = compose["services"]["kafka"]
    image = default(kafka["image"])
    assert image.startswith("apache/kafka:") and not image.endswith(":latest")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in k for k in env)
    # the cluster id: a base64url UUID, as kafka-storage.sh random-uuid prints
    cluster_id = default(env["CLUSTER_ID"])
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_listeners_advertised_addresses_and_the_quorum_agree(compose):
    names = set(compose["services"])
    kafka = compose["services"]["kafka"]
    env = kafka["environment"]
    listen = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listen) <= set(protocols)
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller in listen and controller not in advertised
    node, address = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")
    host, port = address.split(":")
    assert int(node) == env["KAFKA_NODE_ID"] and host in names | {kafka.get("hostname")}
    assert int(port) == listen[controller][1]
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    for name, (host, port) in advertised.items():
        assert listen[name][1] == port, name
        # one address for containers (the service name), one for the host (a published port)
        assert host in names | {"localhost"}, name
        if host == "localhost":
            assert any(str(p).split(":")[-1] == str(port) for p in kafka["ports"]), name


def test_internal_topics_fit_one_broker_so_transactions_work(compose):
    env = compose["services"]["kafka"]["environment"]
    for key in ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"):
        assert env[key] == 1, key


def test_the_jobs_are_pointed_at_the_broker_and_the_examples_topics_exist(compose):
    from airflow_checkpoint_provider.examples import kafka_sum

    services = compose["services"]
    advertised = listeners(services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    bootstrap = compose["x-ckpt-env"][kafka_sum.BOOTSTRAP_ENV]
    host, port = bootstrap.split(":")
    assert (host, int(port)) in advertised.values()
    # every service that runs jobs (Airflow and the Spark cluster) gets it
    for name, svc in services.items():
        if name.startswith(("airflow-", "spark-")):
            assert svc["environment"][kafka_sum.BOOTSTRAP_ENV] == bootstrap, name
    init = services["kafka-init"]
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "healthcheck" in services["kafka"]
    script = init["entrypoint"]
    with open(kafka_sum.__file__) as f:
        source = f.read()
    defaults = re.findall(r'os\.environ\.get\((?:INPUT|OUTPUT)_ENV, "([^"]+)"\)', source)
    assert len(defaults) == 2
    for topic in defaults:
        assert topic in script.split("for t in ")[1].split(";")[0].split(), topic
    assert "--if-not-exists" in script and f"--bootstrap-server {bootstrap}" in script


def test_kafka_data_is_in_a_declared_volume_and_the_image_has_the_kafka_extra(compose):
    kafka = compose["services"]["kafka"]
    log_dir = kafka["environment"]["KAFKA_LOG_DIRS"]
    mounts = [v.split(":") for v in kafka["volumes"]]
    assert any(target == log_dir and source in compose["volumes"] for source, target in mounts)
    with open(os.path.join(ROOT, "docker", "Dockerfile")) as f:
        extras = re.search(r"airflow-checkpoint-provider\[([^\]]+)\]", f.read()).group(1)
    assert "kafka" in extras.split(",")


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True,
                          timeout=30).returncode == 0


@pytest.mark.timeout(60)
@pytest.mark.skipif(not _compose_plugin(), reason="no docker compose plugin on this machine "
                    "(the YAML checks above stand in)")
def test_docker_compose_accepts_the_file():
    out = subprocess.run(["docker", "compose", "-f", COMPOSE, "config", "--quiet"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
