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

from ports import free_port, hold_port


def pg_bin() -> str | None:
    for name in ("initdb", "pg_ctl", "postgres"):
        if shutil.which(name) is None:
            break
    else:
        return os.path.dirname(shutil.which("postgres"))
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else None


#: the sessions of a test in its database (``pg_stat_activity``): clients and their
#: walsenders, not the server's own workers (autovacuum comes and goes on its own)
CLIENTS = ("datname = current_database() "
           "AND backend_type IN ('client backend', 'walsender')")


class PostgresServer:
    """``created``: the databases :meth:`create_database` made, in order. After each test,
    tests/conftest.py calls :meth:`release` on the ones made during it, on each server of
    :data:`running` (the servers this process started)."""

    running: list[PostgresServer] = []

    def __init__(self) -> None:
        self.bin = pg_bin()
        if self.bin is None:
            raise RuntimeError("PostgreSQL server binaries not found: apt-get install -y postgresql")
        # A directory of its own under /tmp: the postgres user cannot enter pytest's (0700, root).
        self.workdir = tempfile.mkdtemp(prefix="ckpt-pg-")
        self.data = os.path.join(self.workdir, "data")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.held: socket.socket | None = None  # the port, while paused
        self.created: list[str] = []

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
        if self not in PostgresServer.running:
            PostgresServer.running.append(self)
        log = open(os.path.join(self.workdir, "postgres.log"), "ab")
        if self.held is not None:
            self.held.close()
            self.held = None
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
        """Stop the server but keep its data and its port: a DB outage. :meth:`start`
        ends it."""
        self._shutdown()
        self.held = hold_port(self.port)

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
        self.created.append(name)
        return self.url(name)

    def release(self, names: list[str], wait_s: float = 10.0) -> list[str]:
        """End what a test left in its databases ``names`` that would reach past them: its
        sessions (an open transaction holds back every logical slot's creation on the
        server), its prepared transactions (also ``max_prepared_transactions``) and its
        replication slots (server-wide names: a later job of the same name finds them). A
        walsender that was just closed may hold its slot a moment longer: retried within
        ``wait_s``. Returns what it released, for the message of a test that must not leave
        any."""
        import psycopg

        released: list[str] = []
        if self.proc is None or self.proc.poll() is not None:
            return released  # paused or stopped: nothing runs on it
        for name in names:
            dsn = f"postgresql://postgres@127.0.0.1:{self.port}/{name}"
            try:
                conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
            except psycopg.OperationalError:
                continue  # dropped by the test
            with conn:
                released += self._release(conn, name, time.monotonic() + wait_s)
        return released

    @staticmethod
    def _release(conn, name: str, deadline: float) -> list[str]:
        import psycopg

        released: list[str] = []
        while True:
            for (pid,) in conn.execute(
                    f"SELECT pid FROM pg_stat_activity WHERE {CLIENTS} "
                    "AND pid <> pg_backend_pid()").fetchall():
                # waits until it ended (its transaction with it), up to 5 s
                conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
                released.append(f"{name}: session {pid}")
            prepared = conn.execute("SELECT gid FROM pg_prepared_xacts "
                                    "WHERE database = current_database()").fetchall()
            slots = conn.execute("SELECT slot_name FROM pg_replication_slots "
                                 "WHERE database = current_database()").fetchall()
            if not prepared and not slots:
                return released
            if time.monotonic() > deadline:
                if slots:
                    raise RuntimeError(f"database {name}: replication slots {slots} stay in use")
                return released  # a transaction still being finished: its own business
            for (gid,) in prepared:
                try:
                    conn.execute(psycopg.sql.SQL("ROLLBACK PREPARED {}").format(
                        psycopg.sql.Literal(gid)))
                    released.append(f"{name}: prepared transaction {gid}")
                except (psycopg.errors.UndefinedObject,
                        psycopg.errors.ObjectNotInPrerequisiteState):
                    pass  # finished meanwhile, or being finished ("is busy"): looked at again
            for (slot,) in slots:
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    released.append(f"{name}: replication slot {slot}")
                except (psycopg.errors.ObjectInUse, psycopg.errors.UndefinedObject):
                    pass  # its walsender is still exiting (retried), or dropped meanwhile
            time.sleep(0.1)

    def stop(self) -> None:
        self._shutdown()
        if self.held is not None:
            self.held.close()
            self.held = None
        if self in PostgresServer.running:
            PostgresServer.running.remove(self)
        shutil.rmtree(self.workdir, ignore_errors=True)
