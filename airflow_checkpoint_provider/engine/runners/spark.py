"""The Spark runner: a job's slots are the tasks of ONE Spark barrier stage.

    sc.parallelize(range(S), S).barrier().mapPartitions(run_slot)

Slot ``i`` hosts subtask ``i`` of every operator. Slots exchange their data-server
``host:port`` with ``BarrierTaskContext.allGather`` and reach the coordinator in the driver
over TCP (the driver host Spark reports; port configurable). Spark does not retry a failed
barrier ResultStage: the job master catches the failure, applies the restart strategy and
submits the stage again, restoring from the latest completed checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid

from ..errors import ConfigurationError
from ..graph import ExecutionGraph
from ..job import JobConfig, JobResult
from .jobmaster import JobMaster

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

    from ..packaging import SHIP_CODE_ENV
    from ..private import SPARK_REDACTION_REGEX

    ship_code = os.environ.get(SHIP_CODE_ENV) == "1"
    if not ship_code:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    submitted_master = configured_master()  # also starts (or attaches to) the JVM gateway
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
    spark.sparkContext.setLogLevel(os.environ.get("CKPT_SPARK_LOG_LEVEL", "WARN"))
    return spark


def coordinator_bind_host(configured: str | None, *, local: bool, driver_host: str) -> str:
    """Where the job's coordinator listens: the configured interface, else loopback for a
    local master (its slots are processes of this host: nothing else may connect), else
    the driver's host."""
    return configured or ("127.0.0.1" if local else driver_host)


def _make_slot_function(attempt: int, coordinator: tuple[str, int], local_master: bool = False,
                        secret: bytes | None = None):
    def run_partition(iterator):
        from pyspark import BarrierTaskContext

        from airflow_checkpoint_provider.engine.runtime.slot import run_slot

        ctx = BarrierTaskContext.get()
        slot = ctx.partitionId()
        executor_address = ctx.getTaskInfos()[slot].address
        executor_host = executor_address.rsplit(":", 1)[0]
        # A standalone executor runs in <worker work dir>/<app id>/<executor id>; in local
        # mode the slot runs beside the driver.
        work_dir = os.getcwd()
        in_app_dir = os.path.basename(os.path.dirname(work_dir)).startswith("app-")
        executor_id = "driver" if local_master else (
            os.path.basename(work_dir) if in_app_dir else None)
        placement = {"executor_id": executor_id,
                     "executor_address": executor_address, "work_dir": work_dir,
                     "python": sys.executable}
        # a local master: every slot is in this host's processes, so loopback only
        bind_host = os.environ.get("SPARK_LOCAL_IP") or ("127.0.0.1" if local_master
                                                         else "0.0.0.0")
        advertise = os.environ.get("SPARK_LOCAL_IP") or ("127.0.0.1" if local_master
                                                         else executor_host)

        def exchange(address):
            infos = ctx.allGather(json.dumps([slot, address]))
            return {int(s): a for s, a in (json.loads(i) for i in infos)}

        run_slot(slot, attempt, coordinator, exchange_peers=exchange, bind_host=bind_host,
                 advertise_host=advertise, placement=placement, secret=secret)
        yield slot

    return run_partition


def _root_cause(error: BaseException) -> str:
    """The most telling line of a Py4J/Spark error: a Python exception raised in a slot or
    Spark's stage failure reason, not the Py4J call that carried it."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    for ln in reversed(lines):  # the last Python exception line of a worker traceback
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Failure", "Aborted")) and not ln.startswith(
                ("at ", "org.apache", "py4j", "Caused by")) and " " not in head:
            return ln[:500]
    for ln in lines:
        if "Most recent failure reason" in ln or "SparkException" in ln:
            return ln[:500]
    return (lines[0] if lines else type(error).__name__)[:500]


class SparkBarrierLauncher:
    """Runs one attempt's slots as a barrier stage in a background thread."""

    def __init__(self, spark, slot_wait_seconds: float = 0.0) -> None:
        self.spark = spark
        self.slot_wait_seconds = slot_wait_seconds
        self.sc = spark.sparkContext
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._done = False
        self._stopping = False
        self._group: str | None = None

    def check_slots(self, num_slots: int, wait_seconds: float = 0.0) -> None:
        """Fail fast when the cluster cannot gang-schedule ``num_slots`` tasks. On a cluster
        manager, executors register after the session starts: wait up to ``wait_seconds``."""
        deadline = time.monotonic() + wait_seconds
        available = self.sc.defaultParallelism
        while num_slots > available and time.monotonic() < deadline:
            time.sleep(0.5)
            available = self.sc.defaultParallelism
        if num_slots > available:
            raise ConfigurationError(
                f"the job needs {num_slots} slots (its highest operator parallelism) but the Spark "
                f"cluster offers {available} cores ({self.sc.master}); lower the parallelism or "
                "add executors/cores"
            )

    def start(self, attempt: int, coordinator: tuple[str, int], num_slots: int,
              secret: bytes | None = None) -> None:
        from pyspark import InheritableThread

        self.check_slots(num_slots, self.slot_wait_seconds)  # e.g. a lost executor's replacement
        self._error, self._done, self._stopping = None, False, False
        self._group = f"ckpt-{uuid.uuid4().hex[:12]}-a{attempt}"
        # the job secret travels in the stage's closure (Spark's own RPC; enable
        # spark.authenticate / spark.network.crypto.enabled on untrusted networks)
        fn = _make_slot_function(attempt, coordinator, self.sc.master.startswith("local"), secret)

        def body() -> None:
            try:
                self.sc.setJobGroup(self._group, f"checkpointed job attempt {attempt}",
                                    interruptOnCancel=True)
                self.sc.parallelize(range(num_slots), num_slots).barrier().mapPartitions(fn).collect()
            except BaseException as exc:  # noqa: BLE001 - reported through poll()
                self._error = exc
            finally:
                self._done = True

        self._thread = InheritableThread(target=body, name=f"barrier-stage-{attempt}", daemon=True)
        self._thread.start()

    def poll(self) -> str | None:
        if self._done and self._error is not None and not self._stopping:
            return f"Spark barrier stage failed: {_root_cause(self._error)}"
        return None

    def stop(self) -> None:
        self._stopping = True
        if self._group is not None and not self._done:
            self.sc.cancelJobGroup(self._group)
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._thread = None


class SparkRunner:
    """Run a pipeline on Spark.

    :param spark: a ``SparkSession`` or a master URL (``local[4]``, ``spark://host:7077``);
        ``None`` uses the active session (e.g. under spark-submit) or ``local[*]``.
    :param coordinator_host: interface the coordinator binds to (default: the driver host
        Spark reports, ``spark.driver.host``).
    :param coordinator_port: TCP port of the coordinator (0 = any free port).
    :param slot_wait_seconds: how long to wait for executors offering enough cores before
        failing (cluster masters only; local masters fail at once).
    """

    def __init__(self, *, spark=None, master: str | None = None, coordinator_host: str | None = None,
                 coordinator_port: int = 0, slot_wait_seconds: float = 60.0,
                 **master_options) -> None:
        self.slot_wait_seconds = slot_wait_seconds
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
        launcher = SparkBarrierLauncher(spark, 0.0 if local else self.slot_wait_seconds)
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
