"""The Spark session of a job: the master it runs on, checked before Spark is asked, and the
settings barrier jobs need (fail fast, one task attempt, redacted secrets, the executors'
interpreter and the engine's pyspark daemon, :mod:`.daemon`).
"""

from __future__ import annotations

import os
import sys
import time

from ...settings import SHIP_CODE, SPARK_LOG_LEVEL

#: the module of the executors' pyspark daemon (``spark.python.daemon.module``)
DAEMON_MODULE = "airflow_checkpoint_provider.engine.runners.spark.daemon"


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

    from ...errors import SparkMasterUnreachableError

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

    from ...fs.private import SPARK_REDACTION_REGEX

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
            "spark.python.daemon.module": DAEMON_MODULE,
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
