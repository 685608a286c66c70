"""A real Spark standalone cluster (master + workers from the pip pyspark package) for tests.

Binds to 127.0.0.1 on free ports and stops exactly the processes it started, by PID.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pyspark
from ports import free_port

START_TIMEOUT_S = 180


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"Spark master did not listen on 127.0.0.1:{port} within {timeout} s")


class StandaloneCluster:
    def __init__(self, workdir: str, workers: int = 2, cores: int = 2, memory: str = "1g") -> None:
        self.workdir = workdir
        self.home = os.path.dirname(pyspark.__file__)
        self.spark_class = os.path.join(self.home, "bin", "spark-class")
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=self.home,
                        SPARK_NO_DAEMONIZE="1")
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.workers, self.cores, self.memory = workers, cores, memory

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.workdir, f"{name}.log"), "wb")
        proc = subprocess.Popen([self.spark_class, *args], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def start(self) -> StandaloneCluster:
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(free_port())])
        # JVM start-up: seconds when idle, over a minute at load 30 on 2 cores (a timeout
        # here errors every test of the spark-cluster group)
        _wait_port(self.port, START_TIMEOUT_S)
        for i in range(self.workers):
            wdir = os.path.join(self.workdir, f"worker-{i}")
            os.makedirs(wdir, exist_ok=True)
            self._start(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                        "--cores", str(self.cores), "--memory", self.memory,
                                        "--work-dir", wdir, "--webui-port", str(free_port()),
                                        self.url])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(os.path.join(self.workdir, "master.log"), errors="replace") as f:
                if f.read().count("Registering worker") >= self.workers:
                    return self
            time.sleep(0.2)
        raise RuntimeError(
            f"Spark workers did not register with the master within {START_TIMEOUT_S} s")

    def executor_pids(self, app_id: str | None = None) -> list[int]:
        """PIDs of executor JVMs launched by this cluster's workers; with ``app_id``, only
        that application's (an executor of the previous test's application may still be
        exiting)."""
        from pipelines import child_pids, cmdline

        return sorted(pid for worker in self.procs[1:]
                      for pid in child_pids(worker.pid, b"CoarseGrainedExecutorBackend")
                      if app_id is None or app_id.encode() in cmdline(pid))

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs = []
