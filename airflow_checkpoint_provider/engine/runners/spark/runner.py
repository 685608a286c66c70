"""The Spark runner: a job's slots are the tasks of ONE Spark barrier stage.

    sc.parallelize(range(S), S).barrier().mapPartitions(run_slot)

Slot ``i`` hosts subtask ``i`` of every operator. Slots exchange their data-server
``host:port`` with ``BarrierTaskContext.allGather`` and reach the coordinator in the driver
over TCP (the driver host Spark reports; port configurable). Spark does not retry a failed
barrier ResultStage: the job master catches the failure, applies the restart strategy and
submits the stage again, restoring from the latest completed checkpoint; before that the
failed stage is cancelled and its cores are freed (:mod:`.launcher`). The session a job
runs in is :func:`.session.session_for`'s.
"""

from __future__ import annotations

from ...plan.graph import ExecutionGraph
from ...plan.job import JobConfig, JobResult, Restore
from ...settings import SPARK_SLOT_WAIT
from ..jobmaster.master import JobMaster
from .launcher import RELEASE_SECONDS, SparkBarrierLauncher
from .session import session_for

#: seconds a job on a cluster master waits for executors offering its slots (default 60)
SLOT_WAIT_ENV = SPARK_SLOT_WAIT.name


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

    def run(self, graph: ExecutionGraph, config: JobConfig, *, restore: Restore,
            allow_non_restored_state: bool,
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
