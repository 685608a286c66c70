"""The local runner's slot fork server (engine/runtime/host/forkserver.py): a slot forked from it
runs exactly as ``python -m ...runtime.host.slot`` would (command line, working directory,
environment, umask, standard streams, exit code), and a job survives the server's death."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

import pytest
from pipelines import (
    check_exactly_once,
    child_pids,
    cmdline,
    descendant_pids,
    expected_running_sums,
    process_alive,
    running_sum_pipeline,
)
from ports import closed_port

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    read_committed,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.runners.local import slot_imports
from airflow_checkpoint_provider.engine.runtime.host.forkserver import (
    ForkClient,
    ForkServer,
    server_key,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def silent_coordinator():
    """A coordinator address that accepts connections and never answers: a slot waits there."""
    server = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    t.join(5)
    for c in conns:
        c.close()
    server.close()


def _argv(coordinator: str, failure_file: str, slot: int = 0) -> list[str]:
    return ["--slot", str(slot), "--attempt", "0", "--coordinator", coordinator,
            "--failure-file", failure_file]


def test_a_forked_slot_reports_its_exit_code_streams_cwd_and_umask(tmp_path, monkeypatch, capfd):
    client = ForkClient(dict(os.environ))
    try:
        monkeypatch.chdir(tmp_path)
        old = os.umask(0o077)
        # nothing listens: the slot's connection is refused, it exits 1
        with closed_port() as port:
            try:
                pid = client.spawn(_argv(f"127.0.0.1:{port}", "failure.txt"), dict(os.environ))
                assert pid in child_pids(client.server.proc.pid)  # forked, not started
                assert client.wait(pid, 60) == 1
            finally:
                os.umask(old)
        # the failure file is relative: written in the launcher's working directory, with
        # the launcher's umask (0o077), not the server's
        failure = tmp_path / "failure.txt"
        assert "Connection refused" in failure.read_text()
        assert failure.stat().st_mode & 0o777 == 0o600
        # the slot's log went to the launcher's stderr at the time of the spawn
        assert "slot 0 ended" in capfd.readouterr().err
    finally:
        client.close()


def test_a_forked_slot_takes_the_requests_environment_and_shows_its_command_line(
        tmp_path, silent_coordinator, capfd):
    env = {**os.environ, "CKPT_LOG_LEVEL": "WARNING"}
    client = ForkClient(env)
    try:
        # the request's environment, not the server's: at ERROR the slot logs no warning
        pid = client.spawn(_argv("127.0.0.1:1", str(tmp_path / "a.txt")),
                           {**env, "CKPT_LOG_LEVEL": "ERROR"})
        assert client.wait(pid, 60) == 1
        assert "slot 0 ended" not in capfd.readouterr().err
        pid = client.spawn(_argv(silent_coordinator, str(tmp_path / "b.txt"), slot=3), env)
        deadline = time.monotonic() + 30
        while b"--slot 3" not in cmdline(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"engine.runtime.host.slot --slot 3 --attempt 0" in cmdline(pid)
        assert client.returncode(pid) is None  # waiting for its coordinator
        client.kill(pid)
        assert client.wait(pid, 30) == -signal.SIGKILL
        client.kill(os.getpid())  # not a child of this connection: the server ignores it
        assert client.returncode(pid) == -signal.SIGKILL
    finally:
        client.close()


def test_the_server_imports_a_jobs_connector_libraries_once_before_it_forks(tmp_path, monkeypatch):
    probe = tmp_path / "imported-by.txt"
    monkeypatch.setenv("CKPT_TEST_PRELOAD_PROBE", str(probe))
    # as the launcher, plus a search-path entry of its own: a server of its own, started now
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*(p for p in sys.path if p), str(tmp_path)])}
    client = ForkClient(env)
    try:
        for slot in range(2):
            pid = client.spawn(_argv("127.0.0.1:1", str(tmp_path / f"{slot}.txt"), slot=slot),
                               env, preload=["preload_probe", "no_such_module_xyz"])
            assert client.wait(pid, 60) == 1  # the slot itself ran (and found no coordinator)
        # imported in the server, once; a module that does not import is the slot's problem
        assert probe.read_text().split() == [str(client.server.proc.pid)]
    finally:
        client.close()


def test_one_server_forks_for_every_environment_its_imports_do_not_read(tmp_path):
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([*(p for p in sys.path if p), str(tmp_path)])}
    clients = [ForkClient({**base, "PYTEST_CURRENT_TEST": "a", "CKPT_LOG_LEVEL": "INFO"}),
               ForkClient({**base, "PYTEST_CURRENT_TEST": "b", "AIRFLOW_CTX_TASK_ID": "t"}),
               ForkClient({**base, "OMP_NUM_THREADS": "1"})]
    try:
        # what differs only in what the child sets before its slot runs shares a server;
        # a thread-pool size read when numpy is imported gets a server of its own
        assert clients[0].server is clients[1].server
        assert clients[2].server is not clients[0].server
        assert server_key(base) == server_key({**base, "CKPT_X": "1", "PYTEST_CURRENT_TEST": "c"})
    finally:
        for client in clients:
            client.close()


def test_a_jobs_slot_imports_come_from_its_connectors(tmp_path):
    p = Pipeline("preload", checkpoint=CheckpointConfig(directory=str(tmp_path)))
    (p.source(GeneratorSource(10), uid="gen")
      .sink(PostgresSink("postgresql://nobody@127.0.0.1:1/db", "t"), uid="pg"))
    assert slot_imports(p.execution_graph()) == ["psycopg"]
    assert IcebergSink.slot_imports and not FileSink.slot_imports


def test_the_server_ends_when_its_owner_lets_go():
    server = ForkServer(dict(os.environ))
    assert server.alive()
    server.close()
    assert server.proc.returncode == 0


def test_a_job_whose_fork_server_is_killed_restarts_and_stays_exactly_once(workdir):
    p = running_sum_pipeline(str(workdir), num_records=20_000, rate=4000, interval_ms=100)
    result: dict = {}
    job = threading.Thread(target=lambda: result.update(r=p.run()))
    job.start()
    try:
        deadline = time.monotonic() + 90
        store = None
        while time.monotonic() < deadline:
            if store is None and os.path.exists(workdir / "meta.db"):
                store = MetadataStore(p.metadata_url)
            if store is not None and any(
                    c.status == "COMPLETED" for j in store.list_jobs()
                    for c in store.list_checkpoints(j.job_id)):
                break
            time.sleep(0.1)
        servers = descendant_pids(os.getpid(), b"engine.runtime.host.forkserver")
        slots = [pid for s in servers for pid in child_pids(s, b"engine.runtime.host.slot")]
        assert servers and slots, (servers, slots)
        for pid in servers:
            os.kill(pid, signal.SIGKILL)  # the slots are orphans now; the job must notice
    finally:
        job.join(100)
    r = result["r"]
    assert r.status == "FINISHED" and r.restarts >= 1
    check_exactly_once(str(workdir / "out"), expected_running_sums(20_000, 50, 7))
    assert not [pid for pid in slots if process_alive(pid)]  # killed by PID at the restart


def test_without_the_fork_server_each_slot_is_a_process_of_its_own(workdir, monkeypatch):
    monkeypatch.setenv("CKPT_SLOT_FORK_SERVER", "0")
    p = running_sum_pipeline(str(workdir), num_records=4_000, rate=2000, interval_ms=100)
    seen: set[int] = set()
    servers: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(child_pids(os.getpid(), b"engine.runtime.host.slot"))
            servers.update(descendant_pids(os.getpid(), b"engine.runtime.host.forkserver"))
            time.sleep(0.05)

    before = set(descendant_pids(os.getpid(), b"engine.runtime.host.forkserver"))
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        assert p.run().status == "FINISHED"
    finally:
        done.set()
        t.join(5)
    # the job's three slots, children of this process; no fork server was started
    assert len(seen) == 3 and servers <= before
    check_exactly_once(str(workdir / "out"), expected_running_sums(4_000, 50, 7))


def _frozen(record: dict) -> dict:
    import gc

    return {**record, "frozen": gc.get_freeze_count()}


@pytest.mark.parametrize("fork_server", ["1", "0"])
def test_a_slot_processes_records_with_its_job_and_imports_out_of_the_collectors_reach(
        workdir, monkeypatch, fork_server):
    """A slot's full collections scan the records in flight, not the modules and the job it
    holds for its life (each scanned them all again: a quarter of a short slot's CPU)."""
    monkeypatch.setenv("CKPT_SLOT_FORK_SERVER", fork_server)
    p = Pipeline("frozen", checkpoint=CheckpointConfig(interval_ms=100,
                                                       directory=str(workdir / "ckpt")),
                 metadata_url=f"sqlite:///{workdir / 'meta.db'}")
    (p.source(GeneratorSource(200, num_keys=4), uid="gen", parallelism=2)
      .map(_frozen, uid="frozen")
      .sink(FileSink(str(workdir / "out")), uid="out"))
    assert p.run().status == "FINISHED"
    rows = list(read_committed(str(workdir / "out")))
    assert len(rows) == 200
    # the slot runtime alone is tens of thousands of objects
    assert min(r["frozen"] for r in rows) > 10_000
