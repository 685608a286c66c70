"""A dead Spark driver JVM is named as such (chaos finding: a `jvm` kill surfaced as a bare
Py4J ``ConnectionRefusedError`` and the job spent its restarts on a dead SparkContext).

Real Spark in local mode, in a child process (its JVM is SIGKILLed; the test process's own
Spark session, if any, stays alive): about 20-60 s on a loaded 2-core machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.usefixtures("spark_env")]

CHILD = r"""
import json, os, signal, sys, time

from airflow_checkpoint_provider.engine.errors import SparkProcessLostError
from airflow_checkpoint_provider.engine.runners.spark import session_for
from airflow_checkpoint_provider.engine.runners.spark.launcher import SparkBarrierLauncher


def jvm_children():
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == "java" and ppid == os.getpid():
            out.append(int(name))
    return out


spark = session_for("local[2]", "jvm-lost")
launcher = SparkBarrierLauncher(spark, release_seconds=1.0)
(jvm,) = jvm_children()
os.kill(jvm, signal.SIGKILL)
os.waitpid(jvm, 0)
result = {"jvm": jvm}
try:
    launcher.start(1, ("127.0.0.1", 9), 1)
except SparkProcessLostError as exc:
    result.update(error=type(exc).__name__, message=str(exc))
except BaseException as exc:
    result.update(error=type(exc).__name__, message=str(exc)[:500])
print(json.dumps(result))
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.timeout(240)
def test_a_dead_driver_jvm_is_a_typed_error_naming_it():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # before: ConnectionRefusedError: [Errno 111] Connection refused
    assert result["error"] == "SparkProcessLostError", result
    message = result["message"]
    assert "the driver JVM of Spark application local-" in message, message
    assert "(master local[2]) is gone" in message and "starting attempt 1" in message
    assert "restore='latest'" in message


def test_executor_and_driver_losses_are_told_apart():
    from py4j.protocol import Py4JError, Py4JNetworkError

    from airflow_checkpoint_provider.engine.runners.spark.launcher import (
        driver_jvm_lost,
        executor_lost,
    )

    assert driver_jvm_lost(ConnectionRefusedError(111, "Connection refused"))
    assert driver_jvm_lost(Py4JNetworkError("Answer from Java side is empty"))
    assert driver_jvm_lost(Py4JError("An error occurred while calling o42.collectToPython. "
                                     "Error while sending or receiving"))
    stage = Py4JError("Job aborted due to stage failure: Task 1 in stage 3.0 failed 1 times\n"
                      "ExecutorLostFailure (executor 1 exited caused by one of the running "
                      "tasks) Reason: Remote RPC client disassociated.")
    assert not driver_jvm_lost(stage)
    assert executor_lost(stage).startswith("ExecutorLostFailure (executor 1 exited")
    assert executor_lost(ValueError("boom")) is None
