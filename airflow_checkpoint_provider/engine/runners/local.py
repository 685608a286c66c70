"""The local runner: one OS process per slot on this machine, connected over 127.0.0.1."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import weakref

from ..plan.graph import ExecutionGraph
from ..plan.job import JobConfig, JobResult
from ..runtime.auth import SECRET_ENV
from .jobmaster import JobMaster


def describe_exit(returncode: int) -> str:
    """``exited with code 3`` or ``was killed by signal 9 (SIGKILL)``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


log = logging.getLogger(__name__)


def slot_failure(path: str, lines: int = 12) -> str:
    """What a failed slot wrote to its failure file: its exception line, then the last
    ``lines`` lines of its traceback; empty without a file (e.g. killed by a signal)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return ""
    if not text:
        return ""
    tail = text.splitlines()
    return f": {tail[-1]}\nSlot traceback (last lines):\n" + "\n".join(tail[-lines:])


class LocalProcessLauncher:
    """Starts ``python -m ...runtime.slot`` processes and stops exactly those, by PID. A
    slot that fails writes its traceback to a file of this launcher (``--failure-file``):
    :meth:`poll` adds it to the exit code."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.failures = tempfile.mkdtemp(prefix="ckpt-slot-failures-")
        weakref.finalize(self, shutil.rmtree, self.failures, True)
        self.attempt = 0

    def _failure_file(self, slot: int) -> str:
        return os.path.join(self.failures, f"attempt-{self.attempt}-slot-{slot}.txt")

    def start(self, attempt: int, coordinator: tuple[str, int], num_slots: int,
              secret: bytes | None = None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        if secret is not None:  # in the environment, not on the command line `ps` shows
            env[SECRET_ENV] = secret.hex()
        self.attempt = attempt
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "airflow_checkpoint_provider.engine.runtime.slot",
                 "--slot", str(i), "--attempt", str(attempt),
                 "--coordinator", f"{coordinator[0]}:{coordinator[1]}",
                 "--failure-file", self._failure_file(i)],
                env=env, stdin=subprocess.DEVNULL)
            for i in range(num_slots)
        ]

    def poll(self) -> str | None:
        for i, p in enumerate(self.procs):
            rc = p.poll()
            if rc is not None and rc != 0:
                return (f"slot {i} process (pid {p.pid}) {describe_exit(rc)}"
                        + slot_failure(self._failure_file(i)))
            # written before the slot's connection closes; the process may take a while to
            # exit after that (interpreter shutdown on a loaded machine)
            failure = slot_failure(self._failure_file(i)) if rc is None else ""
            if failure:
                return f"slot {i} process (pid {p.pid}) failed{failure}"
        return None

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                log.warning("slot process %d did not exit after SIGKILL", p.pid)
        self.procs = []

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


class LocalRunner:
    """:param master_options: ``metrics_port``, ``metrics_host``, ``show_progress`` (see
    :class:`~.jobmaster.JobMaster`)."""

    def __init__(self, *, coordinator_port: int = 0, **master_options) -> None:
        self.coordinator_port = coordinator_port
        self.master_options = master_options

    def run(self, graph: ExecutionGraph, config: JobConfig, *, restore: str | None, allow_non_restored_state: bool,
            job_id: str | None, claim_mode: str = "NO_CLAIM",
            trust_snapshot: bool = False) -> JobResult:
        master = JobMaster(graph, config, LocalProcessLauncher(), coordinator_port=self.coordinator_port,
                           **self.master_options)
        return master.run(restore=restore, allow_non_restored_state=allow_non_restored_state,
                          job_id=job_id, claim_mode=claim_mode,
                          trust_snapshot=trust_snapshot)
