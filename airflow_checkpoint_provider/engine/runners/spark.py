"""The Spark runner: a job's slots are the tasks of ONE Spark barrier stage.

    sc.parallelize(range(S), S).barrier().mapPartitions(run_slot)

Slot ``i`` hosts subtask ``i`` of every operator. Slots exchange their data-server
``host:port`` with ``BarrierTaskContext.allGather`` and reach the coordinator in the driver
over TCP (the driver host Spark reports; port configurable). Spark does not retry a failed
barrier ResultStage: the job master catches the failure, applies the restart strategy and
submits the stage again, restoring from the latest completed checkpoint; before that the
failed stage is cancelled and its cores are freed (:mod:`.spark_launcher`).
"""

from __future__ import annotations

import logging
import os
import sys
import time

from ..plan.graph import ExecutionGraph
from ..plan.job import JobConfig, JobResult
from ..settings import SHIP_CODE, SPARK_LOG_LEVEL, SPARK_SLOT_WAIT
from .jobmaster import JobMaster
from .spark_launcher import RELEASE_SECONDS, SparkBarrierLauncher, make_slot_function

#: seconds a job on a cluster master waits for executors offering its slots (default 60)
SLOT_WAIT_ENV = SPARK_SLOT_WAIT.name

__all__ = ["SparkBarrierLauncher", "SparkRunner", "configured_master", "session_for"]

#: moved to :mod:`.spark_launcher`; the old name stays for its callers
_make_slot_function = make_slot_function

log = logging.getLogger(__name__)


def configured_master() -> str | None:
    """The master Spark itself was configured with, or ``None``.

    Under ``spark-submit`` (``--master``, ``--conf spark.master=...``, ``spark-defaults.conf``)
    the master is a JVM system property, and a ``SparkConf()`` created before the JVM gateway
    exists is a plain dict that never sees it. So attach to (under spark-submit) or start
    the gateway first, then read the JVM's configuration: the same answer SparkContext
    will get.
    """
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    conf = SparkConf()
    return conf.get("spark.master") if conf.contains("spark.master") else None


#: seconds a ``spark://`` master may take to accept a connection before the job is refused
MASTER_CONNECT_SECONDS = 15.0


def master_addresses(master: str) -> list[tuple[str, int]]:
    """``(host, port)`` of every master of a standalone URL (``spark://h1:7077,h2:7077``,
    port 7077 when left out); ``[]`` for other masters (local, yarn, k8s)."""
    if not master.startswith("spark://"):
        return []
    out = []
    for part in master[len("spark://"):].split(","):
        host, sep, port = part.strip().rstrip("/").rpartition(":")
        if not sep or not port.isdigit():
            host, port = part.strip().rstrip("/"), "7077"
        out.append((host.strip("[]"), int(port)))
    return out


def check_master_reachable(master: str, *, seconds: float = MASTER_CONNECT_SECONDS) -> None:
    """Raise :class:`SparkMasterUnreachableError` naming ``master`` when none of its
    addresses accepts a TCP connection within ``seconds`` (tried again every second: a
    master that is starting up is waited for). Spark's own client would retry registering
    for minutes and then fail with a Java stack that never names the URL."""
    import socket

    from ..errors import SparkMasterUnreachableError

    addresses = master_addresses(master)
    if not addresses:
        return
    deadline = time.monotonic() + seconds
    answers: dict[tuple[str, int], str] = {}
    while True:
        for host, port in addresses:
            try:
                with socket.create_connection((host, port), timeout=min(3.0, seconds)):
                    return
            except OSError as exc:
                answers[(host, port)] = (exc.strerror or type(exc).__name__).lower()
        if time.monotonic() >= deadline:
            break
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    said = "; ".join(f"{h}:{p}: {why}" for (h, p), why in answers.items())
    raise SparkMasterUnreachableError(
        f"Spark master {master} is unreachable ({said}; tried for {seconds:.0f} s): start the "
        "master, or fix the URL (spark://HOST:PORT, port 7077 by default; the submit "
        "hook's Spark connection or --master)")


def session_for(master: str | None, app_name: str, *, extra_conf: dict | None = None):
    """A SparkSession for ``master`` set up for barrier jobs. ``None``: the master that
    spark-submit (or ``spark-defaults.conf``) configured, else ``local[*]``.

    Executors' Python: by default they run the driver's interpreter with the driver's
    ``sys.path`` (right for local mode and for workers on hosts that share the install).
    With ``CKPT_SHIP_CODE=1`` (the submit hook's ``ship_code``) the code reaches them as
    ``--py-files`` archives instead and their interpreter is whatever the cluster is
    configured with (``spark.pyspark.python``, e.g. a packed env from ``--archives``).
    Settings the user configured (``--conf``, ``spark-defaults.conf``) are never overridden.
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from ..fs.private import SPARK_REDACTION_REGEX

    ship_code = SHIP_CODE.get()
    if not ship_code:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:  # before the JVM gateway starts: refused in seconds
        check_master_reachable(master)
    submitted_master = configured_master()  # also starts (or attaches to) the JVM gateway
    if master is None and submitted_master is not None:
        check_master_reachable(submitted_master)
    if master is not None:
        builder = builder.master(master)
    elif submitted_master is None:
        builder = builder.master("local[*]")
    configured = SparkConf()  # the JVM's view: what spark-submit / spark-defaults.conf set
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # fail fast instead of retrying 40 times when the cluster has too few slots
        # (a restart after a lost executor waits for its replacement: 10 x 2 s)
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "10",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
        "spark.task.maxFailures": "1",
        # the DB URL (password) and signing key travel as spark.executorEnv.*: redacted
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
    }
    if not ship_code:
        conf.update({
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            # executors import the same modules as the driver (user pipelines, tests)
            "spark.executorEnv.PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            # whose Python workers start with the slot runtime imported
            "spark.python.daemon.module": "airflow_checkpoint_provider.engine.runners.pyspark_daemon",
        })
    # Executors need the engine's settings (S3 endpoint and credentials, local dirs...):
    # on a cluster their Python workers do not inherit the driver's environment.
    for name, value in os.environ.items():
        if name.startswith(("CKPT_", "AWS_")):
            conf.setdefault(f"spark.executorEnv.{name}", value)
    if os.environ.get("SPARK_LOCAL_IP"):
        conf.setdefault("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        conf.setdefault("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
    conf = {k: v for k, v in conf.items() if not configured.contains(k)}
    conf.update(extra_conf or {})
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL.get())
    return spark


def coordinator_bind_host(configured: str | None, *, local: bool, driver_host: str) -> str:
    """Where the job's coordinator listens: the configured interface, else loopback for a
    local master (its slots are processes of this host: nothing else may connect), else
    the driver's host."""
    return configured or ("127.0.0.1" if local else driver_host)


class SparkRunner:
    """Run a pipeline on Spark.

    :param spark: a ``SparkSession`` or a master URL (``local[4]``, ``spark://host:7077``);
        ``None`` uses the active session (e.g. under spark-submit) or ``local[*]``.
    :param coordinator_host: interface the coordinator binds to (default: the driver host
        Spark reports, ``spark.driver.host``).
    :param coordinator_port: TCP port of the coordinator (0 = any free port).
    :param slot_wait_seconds: how long to wait for executors offering enough cores before
        failing (cluster masters only; local masters fail at once). Default: the
        ``CKPT_SPARK_SLOT_WAIT_S`` environment variable, else 60 (executor JVMs took longer
        to register on a loaded 2-core machine).
    :param release_seconds: on failover, how long to wait for the failed attempt's tasks to
        free their cores before the next attempt (which fails if they did not).
    :param kill_slots: on failover, SIGKILL the failed attempt's slot processes that run on
        the driver's host (local mode; executors on this host) instead of waiting for Spark
        to end them.
    """

    def __init__(self, *, spark=None, master: str | None = None, coordinator_host: str | None = None,
                 coordinator_port: int = 0, slot_wait_seconds: float | None = None,
                 release_seconds: float = RELEASE_SECONDS, kill_slots: bool = True,
                 **master_options) -> None:
        self.slot_wait_seconds = (SPARK_SLOT_WAIT.get()
                                  if slot_wait_seconds is None else slot_wait_seconds)
        self.release_seconds = release_seconds
        self.kill_slots = kill_slots
        self.master_options = master_options
        self.spark_arg = spark if spark is not None else master
        self.coordinator_host = coordinator_host
        self.coordinator_port = coordinator_port

    def _session(self, job_name: str):
        from pyspark.sql import SparkSession

        if self.spark_arg is None:
            active = SparkSession.getActiveSession()
            return active if active is not None else session_for(None, job_name)
        if isinstance(self.spark_arg, str):
            return session_for(self.spark_arg, job_name)
        return self.spark_arg

    def run(self, graph: ExecutionGraph, config: JobConfig, *, restore: str | None, allow_non_restored_state: bool,
            job_id: str | None, claim_mode: str = "NO_CLAIM",
            trust_snapshot: bool = False) -> JobResult:
        spark = self._session(config.name)
        local = spark.sparkContext.master.startswith("local")
        launcher = SparkBarrierLauncher(spark, 0.0 if local else self.slot_wait_seconds,
                                        release_seconds=self.release_seconds,
                                        kill_slots=self.kill_slots)
        launcher.check_slots(graph.num_slots, launcher.slot_wait_seconds)
        host = coordinator_bind_host(
            self.coordinator_host, local=local,
            driver_host=spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1"))
        master = JobMaster(graph, config, launcher, coordinator_host=host,
                           coordinator_port=self.coordinator_port, **self.master_options)
        master.spark_app_id = spark.sparkContext.applicationId
        return master.run(restore=restore, allow_non_restored_state=allow_non_restored_state,
                          job_id=job_id, claim_mode=claim_mode,
                          trust_snapshot=trust_snapshot)
