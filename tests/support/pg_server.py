"""A private PostgreSQL server for tests: initdb in a temp dir, run as the postgres OS user,
listening on 127.0.0.1 on a free port; stopped by the PID it started."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid


def pg_bin() -> str | None:
    for name in ("initdb", "pg_ctl", "postgres"):
        if shutil.which(name) is None:
            break
    else:
        return os.path.dirname(shutil.which("postgres"))
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self) -> None:
        self.bin = pg_bin()
        if self.bin is None:
            raise RuntimeError("PostgreSQL server binaries not found: apt-get install -y postgresql")
        # A directory of its own under /tmp: the postgres user cannot enter pytest's (0700, root).
        self.workdir = tempfile.mkdtemp(prefix="ckpt-pg-")
        self.data = os.path.join(self.workdir, "data")
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    def _as_postgres(self) -> dict:
        if os.geteuid() != 0:
            return {}
        import pwd

        pw = pwd.getpwnam("postgres")
        return {"user": pw.pw_uid, "group": pw.pw_gid}

    def start(self) -> PostgresServer:
        """Create the cluster (first time) and start the server; again after :meth:`pause`."""
        run_as = self._as_postgres()
        if not os.path.exists(self.data):
            if os.geteuid() == 0:
                shutil.chown(self.workdir, "postgres", "postgres")
            subprocess.run([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres",
                            "--auth=trust", "-E", "UTF8"], check=True, capture_output=True, **run_as)
        log = open(os.path.join(self.workdir, "postgres.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin, "postgres"), "-D", self.data, "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.workdir}",
             "-c", "fsync=off", "-c", "max_connections=200",
             "-c", "max_prepared_transactions=100",
             # logical replication for the CDC source's tests (harmless to the others)
             "-c", "wal_level=logical", "-c", "max_replication_slots=20",
             "-c", "max_wal_senders=20"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **run_as)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    time.sleep(0.3)
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"postgres exited; see {self.workdir}/postgres.log") from None
                time.sleep(0.1)
        raise RuntimeError("postgres did not start within 30 s")

    def pause(self) -> None:
        """Stop the server but keep its data: a DB outage. :meth:`start` ends it."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        from sqlalchemy import create_engine, text

        name = f"t_{uuid.uuid4().hex[:12]}"
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)

    def stop(self) -> None:
        self._shutdown()
        shutil.rmtree(self.workdir, ignore_errors=True)
