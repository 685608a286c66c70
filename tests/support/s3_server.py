"""A real S3-compatible HTTP server for tests, and a switchable TCP proxy for outages.

Which server and why: ``moto_server`` from PyPI ``moto[server]``. No S3-compatible server
is packaged for this machine (no MinIO, SeaweedFS or Garage in Debian or PyPI), and moto's
server mode is a genuine HTTP endpoint: boto3 signs and sends real requests (multipart
uploads, paginated listings, batched deletes) over TCP, so the tests exercise the same
code path as against AWS S3 or MinIO. It is NOT moto's in-process ``mock_aws`` patching of
botocore, and slot processes started by the runner reach it like any other endpoint.
moto keeps objects in memory: they live as long as the server process.

Outages: stopping moto would lose every object, so :class:`TcpProxy` sits between boto3
and moto. ``proxy.stop()`` closes its listening socket and cuts every open connection
(clients see "connection refused"/"reset", as when a server goes down); ``proxy.start()``
listens again on the same port, and the data behind it is intact. (Pausing moto with
SIGSTOP would also keep the data, but then requests hang until the client's read timeout
instead of failing like a stopped server, and a forgotten SIGCONT would wedge the session.)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from ports import free_port, hold_port


class MotoServer:
    """``moto_server -H 127.0.0.1 -p <free port>`` as a subprocess, stopped by its PID."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> MotoServer:
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode}; "
                                   f"see {self.log_path}")
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=1) as r:
                    if r.status < 500:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on {self.endpoint_url} within {timeout} s")

    def stop(self) -> None:
        p, self.process = self.process, None
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target`` with two threads per connection; can be
    stopped (the endpoint becomes unreachable) and started again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._held: socket.socket | None = None  # the port, while stopped
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._listener is not None

    def start(self) -> TcpProxy:
        if self._listener is not None:
            return self
        if self._held is not None:
            self._held.close()
            self._held = None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), name="s3-proxy-accept",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and reset the open ones; the port stays this proxy's."""
        sock, self._listener = self._listener, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            self._held = hold_port(self.port)
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            _close(c)

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return  # stopped
            if self._listener is not sock:
                _close(client)
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
                with self._lock:
                    self._conns.discard(s)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
