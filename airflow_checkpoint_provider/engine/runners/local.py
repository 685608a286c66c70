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
from collections.abc import Sequence

from ..plan.graph import ExecutionGraph
from ..plan.job import JobConfig, JobResult, Restore
from ..runtime.host.auth import SECRET_ENV
from ..runtime.host.forkserver import SLOT_MODULE, ForkClient, ForkServerError
from ..settings import SLOT_FORK_SERVER
from .jobmaster.master import JobMaster


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


class ForkedSlot:
    """A slot forked by the fork server, with the part of :class:`subprocess.Popen`'s
    interface the launcher uses."""

    def __init__(self, client: ForkClient, pid: int) -> None:
        self.client = client
        self.pid = pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs; :class:`ForkServerError` if the server is
        gone (its slots are then no longer anyone's children: :meth:`kill` them by PID)."""
        return self.client.returncode(self.pid)

    def kill(self) -> None:
        try:
            self.client.kill(self.pid)
        except (OSError, ForkServerError):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.client.wait(self.pid, timeout)
        except ForkServerError:
            return None  # not our child any more: nothing to reap
        if rc is None:
            raise subprocess.TimeoutExpired(SLOT_MODULE, timeout)
        return rc


class LocalProcessLauncher:
    """Starts slot processes and stops exactly those, by PID. A slot is forked by this
    process's fork server (:mod:`..runtime.host.forkserver`: the runtime is imported once, not
    per slot), or, with ``CKPT_SLOT_FORK_SERVER=0`` or when the server cannot start, runs as
    ``python -m ...runtime.host.slot``. A slot that fails writes its traceback to a file of this
    launcher (``--failure-file``): :meth:`poll` adds it to the exit code."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self.procs: list[subprocess.Popen | ForkedSlot] = []
        self.client: ForkClient | None = None
        self.preload = tuple(preload)
        self.failures = tempfile.mkdtemp(prefix="ckpt-slot-failures-")
        weakref.finalize(self, shutil.rmtree, self.failures, True)
        self.attempt = 0
        #: the attempt whose start adopts the running slot processes (they were recycled)
        self._adopt: int | None = None

    def recycle(self, attempt: int) -> None:
        """The running slot processes host ``attempt`` next (they registered as it): its
        :meth:`start` adopts them. Their failure files keep the attempt they started as."""
        self._adopt = attempt

    def _all_running(self) -> bool:
        try:
            return bool(self.procs) and all(p.poll() is None for p in self.procs)
        except ForkServerError:
            return False

    def _failure_file(self, slot: int) -> str:
        return os.path.join(self.failures, f"attempt-{self.attempt}-slot-{slot}.txt")

    def start(self, attempt: int, coordinator: tuple[str, int], num_slots: int,
              secret: bytes | None = None) -> None:
        adopt, self._adopt = self._adopt, None
        if adopt == attempt and self._all_running():
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        if secret is not None:  # in the environment, not on the command line `ps` shows
            env[SECRET_ENV] = secret.hex()
        self.attempt = attempt
        self.procs = []
        argvs = [["--slot", str(i), "--attempt", str(attempt),
                  "--coordinator", f"{coordinator[0]}:{coordinator[1]}",
                  "--failure-file", self._failure_file(i)] for i in range(num_slots)]
        client = self._fork_client(env)
        if client is not None:
            try:
                for argv in argvs:
                    self.procs.append(ForkedSlot(client, client.spawn(argv, env, self.preload)))
                return
            except (OSError, ForkServerError) as exc:
                log.warning("The slot fork server failed (%s); starting slot processes", exc)
                self.stop()
        self.procs = [subprocess.Popen([sys.executable, "-m", SLOT_MODULE, *argv],
                                       env=env, stdin=subprocess.DEVNULL) for argv in argvs]

    def _fork_client(self, env: dict[str, str]) -> ForkClient | None:
        if not SLOT_FORK_SERVER.get():
            return None
        try:
            self.client = ForkClient({k: v for k, v in env.items() if k != SECRET_ENV})
        except (OSError, ForkServerError) as exc:
            log.warning("Could not start the slot fork server (%s); starting slot processes", exc)
            return None
        return self.client

    def poll(self) -> str | None:
        for i, p in enumerate(self.procs):
            try:
                rc = p.poll()
            except ForkServerError as exc:
                return f"slot {i} process (pid {p.pid}) is lost: {exc}"
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
        self._adopt = None
        for p in self.procs:
            try:
                running = p.poll() is None
            except ForkServerError:
                running = True
            if running:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                log.warning("slot process %d did not exit after SIGKILL", p.pid)
        self.procs = []
        if self.client is not None:
            self.client.close()
            self.client = None

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def slot_imports(graph: ExecutionGraph) -> list[str]:
    """The modules the job's connectors ask the fork server to import before it forks
    (:attr:`~..connectors.base.Source.slot_imports`)."""
    names = {name for v in graph.vertices for n in v.nodes
             for name in getattr(n.payload, "slot_imports", ())}
    return sorted(names)


class LocalRunner:
    """:param master_options: ``metrics_port``, ``metrics_host``, ``show_progress`` (see
    :class:`~.jobmaster.master.JobMaster`)."""

    def __init__(self, *, coordinator_port: int = 0, **master_options) -> None:
        self.coordinator_port = coordinator_port
        self.master_options = master_options

    def run(self, graph: ExecutionGraph, config: JobConfig, *, restore: Restore,
            allow_non_restored_state: bool,
            job_id: str | None, claim_mode: str = "NO_CLAIM",
            trust_snapshot: bool = False) -> JobResult:
        master = JobMaster(graph, config, LocalProcessLauncher(slot_imports(graph)),
                           coordinator_port=self.coordinator_port,
                           **self.master_options)
        return master.run(restore=restore, allow_non_restored_state=allow_non_restored_state,
                          job_id=job_id, claim_mode=claim_mode,
                          trust_snapshot=trust_snapshot)
