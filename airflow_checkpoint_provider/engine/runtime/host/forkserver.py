"""A fork server for the local runner's slot processes.

Starting a slot as ``python -m ...runtime.host.slot`` costs about 0.35 CPU-seconds of imports
(numpy, pyarrow, the engine) before it does any work, on every start and every restart. The
fork server is one process per launching process (and per value of the environment variables
read at import, :data:`IMPORT_ENV_PREFIXES`) that imports the slot runtime once, then forks a
slot per request. A forked slot runs exactly what the command line
would have run: the same ``slot.main(argv)``, the launcher's working directory, environment,
``sys.path`` and standard output/error (passed as file descriptors), and it exits through the
interpreter's normal shutdown.

Protocol, over a ``SOCK_SEQPACKET`` Unix socket (one JSON message per packet):

* The launching process owns the server's *control* socket. Each :class:`ForkClient` sends one
  end of a fresh socket pair over it (``SCM_RIGHTS``); that connection is its own.
* ``{"op": "spawn", "argv": [...], "env": {...}, "path": [...], "cwd": "...", "preload":
  [...]}`` with the slot's stdout and stderr attached -> ``{"pid": N}`` (or ``{"error":
  "..."}``). The server imports the ``preload`` modules (the job's connectors' client
  libraries, :attr:`~..connectors.base.Source.slot_imports`) before it forks, once.
* ``{"op": "kill", "pid": N, "signal": S}``: only a child of this connection that is not yet
  reaped, so a reused PID is never signalled.
* When a child exits, the server sends ``{"exit": N, "rc": R}`` on the connection that started
  it (``R`` as :attr:`subprocess.Popen.returncode`: negative for a signal).
* EOF on the control socket (the launching process is gone) ends the server; its running
  slots are left alone, as a launcher's would be (they exit on their own when their
  coordinator goes away).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

SLOT_MODULE = "airflow_checkpoint_provider.engine.runtime.host.slot"
#: The slot runtime, and modules most slots import later; a failing import here is skipped
#: (the slot imports what it needs, as it would without the server).
PRELOAD = (
    SLOT_MODULE,
    "pyarrow.parquet",
    "cloudpickle",
)
MAX_MESSAGE = 1 << 20
#: Which server forks a slot is decided by the variables that the interpreter and the preloaded
#: libraries read when they start or are imported (module search path, numpy's and Arrow's
#: thread pools, allocators, locale, time zone). The rest of a request's environment is set in
#: the child before the slot runs (the engine reads its ``CKPT_*`` settings there), so it needs
#: no server of its own: pytest's ``PYTEST_CURRENT_TEST`` and Airflow's ``AIRFLOW_CTX_*``
#: change with every test and task, and each new server costs a fresh import of the runtime.
IMPORT_ENV_PREFIXES = ("PYTHON", "LD_", "OMP_", "OPENBLAS_", "GOTO", "MKL_", "NUMEXPR_", "NPY_",
                       "ARROW_", "PYARROW_", "MALLOC_", "_RJEM_", "JE_", "LC_", "PSYCOPG",
                       "PYICEBERG_")
IMPORT_ENV_NAMES = frozenset({"LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR"})


class ForkServerError(RuntimeError):
    """The fork server could not start a slot, or its connection broke."""


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE:
        raise ForkServerError(f"a fork-server message of {len(data)} bytes is over {MAX_MESSAGE}")
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and its descriptors; ``(None, [])`` at EOF."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, max_fds)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_MESSAGE)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2 * MAX_MESSAGE)
    return a, b


# --------------------------------------------------------------------------- server side


class _Forked(BaseException):
    """Raised in a forked child to leave the server loop; carries the slot's request."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__()
        self.request = request


class _Server:
    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket | None] = {}  # pid -> the connection that started it
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self.selector.register(control, selectors.EVENT_READ, "control")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "control":
                    if not self._accept():
                        return
                elif key.data == "wake":
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                else:
                    self._handle(key.fileobj)  # type: ignore[arg-type]
            self._reap()

    def _accept(self) -> bool:
        message, fds = receive(self.control, max_fds=1)
        if message is None:
            return False
        for fd in fds:
            conn = socket.socket(fileno=fd)
            self.selector.register(conn, selectors.EVENT_READ, "conn")
        return True

    def _handle(self, conn: socket.socket) -> None:
        try:
            message, fds = receive(conn, max_fds=2)
        except OSError:
            message, fds = None, []
        if message is None:  # the client is gone; its children are reaped and forgotten
            self.selector.unregister(conn)
            conn.close()
            for pid, owner in list(self.children.items()):
                if owner is conn:
                    self.children[pid] = None
            return
        if message["op"] == "spawn":
            self._spawn(conn, message, fds)
        elif message["op"] == "kill":
            pid = message["pid"]
            if self.children.get(pid) is conn:
                try:
                    os.kill(pid, message["signal"])
                except ProcessLookupError:
                    pass

    def _spawn(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        prepare_to_fork(request.get("preload", ()))
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self._reply(conn, {"error": f"fork failed: {exc}"})
            return
        if pid == 0:
            self._become_child(fds)
            raise _Forked(request)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self._reply(conn, {"pid": pid})

    def _become_child(self, fds: list[int]) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for key in list(self.selector.get_map().values()):
            obj = key.fileobj
            if isinstance(obj, socket.socket):
                obj.close()
        self.selector.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for target, fd in zip((1, 2), fds, strict=False):
            os.dup2(fd, target)
            os.close(fd)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                self._reply(conn, {"exit": pid, "rc": os.waitstatus_to_exitcode(status)})

    def _reply(self, conn: socket.socket, message: dict[str, Any]) -> None:
        try:
            send(conn, message)
        except OSError:
            pass  # the client is gone; its connection is dropped on the next read


def _preload(name: str) -> None:
    """Import ``name`` here, so that forked slots have it; a module that does not import is
    left to the slot, which reports the error where it needs the module."""
    if name in sys.modules:
        return
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - any import-time error is the slot's to report
        pass


def prepare_to_fork(names: Iterable[str]) -> None:
    """Import ``names`` (as :func:`_preload`), then move everything this process holds out
    of the collector's reach: the children's full collections scan their own objects only
    (each scanned the imported modules again: ~90 ms, a quarter of a short slot's CPU).
    Cheap after the first time. The Spark runner's pyspark daemon calls it too
    (runners/spark/daemon.py)."""
    for name in names:
        _preload(name)
    gc.collect()
    gc.freeze()


def _set_title(argv: list[str]) -> None:
    """``ps``, ``pgrep`` and ``/proc/<pid>/cmdline`` show a forked slot as if it had been
    started alone. Before the environment changes: the title takes over its memory."""
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a dependency
        return
    setproctitle.setproctitle(" ".join([sys.executable, "-m", SLOT_MODULE, *argv]))


def _run_slot(request: dict[str, Any]) -> int:
    _set_title(request["argv"])
    if request.get("umask") is not None:
        os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # looked up again from the request's TMPDIR
    sys.path[:] = [request["cwd"], *request["path"]]
    sys.argv = [sys.argv[0], *request["argv"]]
    # random reseeds itself in a forked child; numpy's global generator does not, and user
    # code may draw from it: each slot gets fresh entropy, as a process of its own would
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    from . import slot

    return slot.main(request["argv"])


def main() -> int:
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        _preload(name)
    try:
        _Server(control).serve()
        return 0
    except _Forked as forked:
        request = forked.request
    return _run_slot(request)  # outside the handler: the server's frames are released


# --------------------------------------------------------------------------- client side


class ForkServer:
    """One running fork server, owned by this process (see :func:`fork_server`)."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess

        ours, theirs = _socket_pair()
        self.control = ours
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            env=env, stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),))
        theirs.close()

    def connect(self) -> socket.socket:
        ours, theirs = _socket_pair()
        try:
            send(self.control, {"op": "connect"}, [theirs.fileno()])
        finally:
            theirs.close()
        return ours

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.control.close()  # EOF: the server exits; slots it started keep running
        try:
            self.proc.wait(timeout=10)
        except Exception:  # pragma: no cover - it exits at EOF
            self.proc.kill()


_servers: dict[tuple[tuple[str, str], ...], ForkServer] = {}  # by server_key
_servers_lock = threading.Lock()
_KEEP = 3


def _forget_servers() -> None:
    """In a child forked from this process: the servers are the parent's. Close this copy
    of their control sockets, so that they still end when the parent does."""
    global _servers_lock
    _servers_lock = threading.Lock()
    for server in _servers.values():
        server.control.close()
    _servers.clear()


os.register_at_fork(after_in_child=_forget_servers)


def current_umask() -> int | None:
    """This process's umask, read without changing it (``os.umask`` would set it, for an
    instant, for every thread); None where ``/proc`` does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


def server_key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` that decides which server forks a slot (:data:`IMPORT_ENV_PREFIXES`)."""
    return tuple(sorted((k, v) for k, v in env.items()
                        if k in IMPORT_ENV_NAMES or k.startswith(IMPORT_ENV_PREFIXES)))


def fork_server(env: dict[str, str]) -> ForkServer:
    """This process's fork server for slots started with ``env``: one per distinct
    :func:`server_key`, since modules may read those variables at import; the few most
    recent are kept."""
    key = server_key(env)
    with _servers_lock:
        server = _servers.pop(key, None)
        if server is None or not server.alive():
            server = ForkServer(env)
        _servers[key] = server  # now the most recent
        while len(_servers) > _KEEP:
            _servers.pop(next(iter(_servers))).close()
        return server


class ForkClient:
    """A connection to the fork server: spawn slots, kill them, learn their exit codes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.server = fork_server(env)
        self.conn = self.server.connect()
        self.exits: dict[int, int] = {}
        self.lock = threading.RLock()  # one request and its reply at a time

    def spawn(self, argv: list[str], env: dict[str, str], preload: Sequence[str] = ()) -> int:
        request = {"op": "spawn", "argv": argv, "env": env, "umask": current_umask(),
                   "path": [p for p in sys.path if p], "cwd": os.getcwd(),
                   "preload": list(preload)}
        sys.stdout.flush()
        sys.stderr.flush()
        with self.lock:
            send(self.conn, request, [1, 2])
            while True:
                message = self._read(block=True)
                if "pid" in message:
                    return int(message["pid"])
                if "error" in message:
                    raise ForkServerError(message["error"])

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        with self.lock:
            if pid not in self.exits:
                send(self.conn, {"op": "kill", "pid": pid, "signal": int(sig)})

    def returncode(self, pid: int) -> int | None:
        """The exit code of ``pid`` if it has exited (without blocking)."""
        with self.lock:
            self._drain()
            return self.exits.get(pid)

    def wait(self, pid: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while pid not in self.exits:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.conn.settimeout(left)
                try:
                    self._read(block=True)
                except TimeoutError:
                    return None
                finally:
                    self.conn.settimeout(None)
            return self.exits[pid]

    def close(self) -> None:
        self.conn.close()

    def _drain(self) -> None:
        while True:
            try:
                self._read(block=False)
            except BlockingIOError:
                return

    def _read(self, *, block: bool) -> dict[str, Any]:
        try:
            data = self.conn.recv(MAX_MESSAGE, 0 if block else socket.MSG_DONTWAIT)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) and not block:
                raise BlockingIOError from exc
            if isinstance(exc, TimeoutError):
                raise
            raise ForkServerError(f"the slot fork server's connection broke: {exc}") from exc
        if not data:
            raise ForkServerError(
                f"the slot fork server (pid {self.server.proc.pid}) is gone")
        message = json.loads(data)
        if "exit" in message:
            self.exits[int(message["exit"])] = int(message["rc"])
        return message


if __name__ == "__main__":
    sys.exit(main())
