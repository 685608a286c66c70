"""The process that launched a job, recorded so that a wait can tell it is gone.

A job has no row in the metadata DB until its driver creates it, and a standby
(``restore="standby:JOB"``) none until it took over: a launcher that dies before (the
Spark application never came up, the pipeline did not import, the standby found nothing to
wait for) leaves nothing there to say so, and a wait on that job id would only end at its
timeout. :meth:`~airflow_checkpoint_provider.hooks.submit.CheckpointSubmitHook.submit_detached`
therefore records the launcher it started -- host, pid, start time, log file -- in a
:class:`LaunchRecord` (``<private temp dir>/checkpoint-launches/<job_id>.json``), and the
conditions of :mod:`~airflow_checkpoint_provider.triggers.conditions` ask it whether the
launcher provably exited: on the same host (the triggerer next to the worker, as with the
LocalExecutor), no process with that pid started at that time, or only a zombie of it.
Anywhere else nothing is provable and the wait's own timeout decides, as it did before (the
engine's own rule for a job's driver, :class:`JobRecord` ``driver_host``/``driver_process``,
is the same).

Only launchers whose process *is* the driver are recorded: the local runner and Spark's
client deploy mode. In cluster mode ``spark-submit`` exits once the driver is submitted.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass

import psutil

from airflow_checkpoint_provider.engine.client import (
    InvalidNameError,
    user_temp_dir,
    validate_job_id,
    write_private,
)

log = logging.getLogger(__name__)

#: records older than this are deleted when a new one is written
RECORD_MAX_AGE_S = 7 * 86_400
#: a process with the recorded pid that started this much later or earlier is another one
START_TIME_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class LaunchRecord:
    """The process that launched job ``job_id`` (see the module docstring)."""

    job_id: str
    job_name: str
    host: str
    pid: int
    #: the process's start time (``psutil.Process.create_time()``), ``None``: unknown
    started: float | None
    log_file: str

    def exited(self) -> bool:
        """Whether the launcher is provably gone: on this host, no process with its pid,
        one started at another time (the pid was reused), or a zombie (exited, not yet
        reaped). ``False`` when it runs or nothing can be proven (another host)."""
        if self.host != socket.gethostname():
            return False
        try:
            proc = psutil.Process(self.pid)
            if (self.started is not None
                    and abs(proc.create_time() - self.started) > START_TIME_TOLERANCE_S):
                return True
            return proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:  # e.g. AccessDenied: cannot tell
            return False

    def describe_exit(self, lines: int = 12) -> str:
        """``its launcher (pid N on HOST) exited; log FILE:`` and the log's last ``lines``
        (none with ``lines=0``)."""
        last = tail(self.log_file, lines).rstrip()
        return (f"its launcher (pid {self.pid} on {self.host}) exited; log {self.log_file}"
                + (f":\n{last}" if last else ""))


def _records_dir() -> str:
    return user_temp_dir("checkpoint-launches")


def record_launch(*, job_id: str, job_name: str, pid: int, log_file: str) -> LaunchRecord:
    """Record the launcher ``pid`` of job ``job_id`` (written atomically, ``0600``)."""
    try:
        started: float | None = psutil.Process(pid).create_time()
    except psutil.Error:  # exited and reaped already: exited() says so at once
        started = None
    record = LaunchRecord(job_id=validate_job_id(job_id), job_name=job_name,
                          host=socket.gethostname(), pid=pid, started=started,
                          log_file=log_file)
    directory = _records_dir()
    write_private(os.path.join(directory, f"{record.job_id}.json"),
                  json.dumps(asdict(record)).encode("utf-8"))
    _prune(directory)
    return record


def find_launch(job_id: str) -> LaunchRecord | None:
    """The launch record of ``job_id`` written on this host, or ``None``."""
    try:
        job_id = validate_job_id(job_id)
    except (InvalidNameError, ValueError, TypeError):
        return None  # a job name or prefix: only a job id has a record
    try:
        with open(os.path.join(_records_dir(), f"{job_id}.json"), encoding="utf-8") as f:
            data = json.load(f)
        return LaunchRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def _prune(directory: str) -> None:
    cutoff = time.time() - RECORD_MAX_AGE_S
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".json") and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
    except OSError as exc:  # housekeeping only
        log.debug("Could not prune launch records in %s: %s", directory, exc)


def tail(path: str, lines: int = 20) -> str:
    """The last ``lines`` lines of the text file ``path`` (``""`` if it cannot be read)."""
    if lines <= 0:
        return ""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""
