"""Attacks on the runtime ports before authentication (issue 25, item 3): a header claiming a
huge frame, a slow-loris handshake, a flood of idle connections, a fake coordinator or data
port. None may cost memory, hold the door shut for a real slot, or get a slot to decode
anything; a job under attack still runs exactly once."""

from __future__ import annotations

import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import cloudpickle
import pytest
from pipelines import (
    Background,
    check_exactly_once,
    descendant_pids,
    expected_running_sums,
    running_sum_pipeline,
)
from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.errors import JobFailedError
from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.protocol import messages as M
from airflow_checkpoint_provider.engine.protocol.errors import (
    AuthenticationError,
    FrameTooLargeError,
)
from airflow_checkpoint_provider.engine.runners.jobmaster.master import CoordinatorServer
from airflow_checkpoint_provider.engine.runners.jobmaster.slot_events import (
    SlotInvalid,
    SlotMessage,
)
from airflow_checkpoint_provider.engine.runtime.host import auth
from airflow_checkpoint_provider.engine.runtime.host.auth import (
    MAX_PENDING_HANDSHAKES,
    SECRET_ENV,
    accept_peer,
    connect_authenticated,
    connect_peer,
    new_secret,
)
from airflow_checkpoint_provider.engine.runtime.host.slot import Slot
from airflow_checkpoint_provider.engine.serialization import packb

ROOT = str(REPO_ROOT)
HUGE = 1536 * 1024 * 1024  # what one header claimed in the attack: 1.5 GiB
RSS_BOUND_KB = 64 * 1024   # what a refused frame may cost at most (it cost 1.6 GB before)


@pytest.fixture(autouse=True)
def _restore_frame_limit():
    saved = P._frame_limit, P._send_limit
    yield
    P._frame_limit, P._send_limit = saved


def _rss_kb(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class RssPeak:
    """Samples the resident memory of ``pid`` every 10 ms; ``growth_kb`` over the baseline."""

    def __init__(self, pid: int | str = "self") -> None:
        self.pid, self.base, self.peak = pid, _rss_kb(pid), 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss_kb(self.pid))

    def growth_kb(self) -> int:
        self._stop.set()
        self._t.join()
        return max(self.peak, _rss_kb(self.pid)) - self.base


def _closed_by_peer(sock: socket.socket, within: float) -> float | None:
    """Seconds until the other side closed ``sock`` (EOF or reset), reading and discarding
    what it sends; ``None`` if it was still open after ``within`` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        ready, _, _ = select.select([sock], [], [], 0.05)
        if ready:
            try:
                if not sock.recv(4096):
                    return time.monotonic() - start
            except OSError:
                return time.monotonic() - start
    return None


def _huge_header_attack(port: int) -> tuple[float | None, socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(P.HEADER.pack(HUGE, P.AUTH) + b"x" * 1000)
    return _closed_by_peer(sock, 5.0), sock


def _slot_process(port: int, secret: bytes, **popen) -> subprocess.Popen:
    """A real slot process (as the local runner starts it) connecting to ``port``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env[SECRET_ENV] = secret.hex()
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_checkpoint_provider.engine.runtime.host.slot", "--slot", "0",
         "--attempt", "0", "--coordinator", f"127.0.0.1:{port}"],
        env=env, stdin=subprocess.DEVNULL, **popen)


def _wait_register(server: CoordinatorServer, timeout: float) -> M.Register | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = server.events.get(timeout=0.1)
        except queue.Empty:
            continue
        if isinstance(event, SlotMessage) and isinstance(event.msg, M.Register):
            return event.msg
    return None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


# -- frames -----------------------------------------------------------------------------------

def test_recv_frame_checks_the_length_before_allocating():
    a, b = socket.socketpair()
    try:
        a.sendall(P.HEADER.pack(HUGE, P.CONTROL))
        tracemalloc.start()
        try:
            with pytest.raises(FrameTooLargeError) as err:
                P.recv_frame(b, 1 << 20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 64 * 1024, peak
        assert str(HUGE) in str(err.value) and "CKPT_MAX_FRAME_BYTES" in str(err.value)
        a.sendall(P.HEADER.pack(2000, P.AUTH))
        with pytest.raises(FrameTooLargeError, match="before authentication"):
            P.recv_frame(b, P.HANDSHAKE_FRAME_LIMIT)
    finally:
        a.close()
        b.close()


def test_a_frame_trickling_in_is_bounded_by_an_overall_deadline():
    a, b = socket.socketpair()
    try:
        def trickle():
            for byte in P.HEADER.pack(48, P.AUTH) + b"y" * 48:
                try:
                    a.send(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.1)

        threading.Thread(target=trickle, daemon=True).start()
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            P.recv_frame(b, P.HANDSHAKE_FRAME_LIMIT, deadline=time.monotonic() + 1.0)
        assert time.monotonic() - start < 2.0
    finally:
        a.close()
        b.close()


def test_a_slot_refuses_to_send_a_frame_over_the_limit_naming_the_option():
    a, b = socket.socketpair()
    try:
        P.set_frame_limit(100_000, check_sends=True)
        with pytest.raises(FrameTooLargeError, match="CKPT_MAX_FRAME_BYTES"):
            P.send_frame(a, P.ARROW, b"z" * 100_001)
        P.send_frame(a, P.ARROW, b"z" * 100_000)
        assert P.recv_frame(b) == (P.ARROW, b"z" * 100_000)
    finally:
        a.close()
        b.close()


# -- before authentication --------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("listener", ["coordinator", "slot-data"])
def test_a_header_claiming_1_5_gib_costs_no_memory_and_closes_the_connection(listener):
    secret = new_secret()
    if listener == "coordinator":
        server = CoordinatorServer("127.0.0.1", 0, secret=secret)
        port, close = server.address[1], server.close
    else:
        slot = Slot(0, 0, secret)
        slot.num_slots, slot.mailboxes, slot.gates = 1, {}, {}
        data = slot._serve_data("127.0.0.1")
        port, close = data.getsockname()[1], data.close
    try:
        rss = RssPeak()
        closed_after, sock = _huge_header_attack(port)
        growth = rss.growth_kb()
        sock.close()
        assert growth < RSS_BOUND_KB, f"resident memory grew by {growth} KiB"
        assert closed_after is not None, "the connection claiming 1.5 GiB was left open"
    finally:
        close()


@pytest.mark.timeout(60)
def test_an_authenticated_frame_over_the_limit_is_refused_with_the_option_named(monkeypatch):
    monkeypatch.setenv("CKPT_MAX_FRAME_BYTES", str(1 << 20))
    secret = new_secret()
    server = CoordinatorServer("127.0.0.1", 0, secret=secret)
    try:
        sock, limit = connect_authenticated("127.0.0.1", server.address[1], secret, "control")
        assert limit == 1 << 20  # the slot learns the coordinator's limit in the handshake
        rss = RssPeak()
        sock.sendall(P.HEADER.pack(HUGE, P.CONTROL))
        event = server.events.get(timeout=5)
        closed_after = _closed_by_peer(sock, 5.0)
        growth = rss.growth_kb()
        sock.close()
        assert isinstance(event, SlotInvalid)
        reason = event.reason
        assert "CKPT_MAX_FRAME_BYTES" in reason and str(1 << 20) in reason, reason
        assert closed_after is not None
        assert growth < RSS_BOUND_KB, f"resident memory grew by {growth} KiB"
    finally:
        server.close()


@pytest.mark.timeout(90)
def test_a_slow_loris_handshake_is_dropped_by_its_deadline_while_a_real_slot_connects(monkeypatch):
    monkeypatch.setattr(auth, "HANDSHAKE_TIMEOUT_S", 2.0)
    secret = new_secret()
    server = CoordinatorServer("127.0.0.1", 0, secret=secret)
    port = server.address[1]
    loris = socket.create_connection(("127.0.0.1", port), timeout=5)
    dropped: dict = {}

    def trickle():  # one byte per 0.3 s: each read is quick, the whole handshake is not
        start = time.monotonic()
        for byte in P.HEADER.pack(48, P.AUTH) + b"y" * 48:
            try:
                loris.send(bytes([byte]))
                ready, _, _ = select.select([loris], [], [], 0.3)
                if ready and not loris.recv(4096):  # (the challenge, then EOF)
                    break
            except OSError:
                break
        else:
            return
        dropped["after"] = time.monotonic() - start

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    proc = _slot_process(port, secret)
    try:
        registered = _wait_register(server, 30.0)
        assert registered is not None and registered.slot == 0, "the real slot did not get in"
        t.join(20)
        assert "after" in dropped, "the slow handshake was never dropped"
        assert dropped["after"] < 2.0 + 2.5, dropped
    finally:
        _stop(proc)
        loris.close()
        server.close()


@pytest.mark.timeout(90)
def test_more_unauthenticated_connections_than_the_cap_are_dropped_and_a_real_slot_gets_in():
    secret = new_secret()
    server = CoordinatorServer("127.0.0.1", 0, secret=secret)
    port = server.address[1]
    n = MAX_PENDING_HANDSHAKES + 30
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
    proc = _slot_process(port, secret)
    try:
        time.sleep(1.0)  # well inside the 10 s handshake deadline
        closed = sum(_closed_by_peer(s, 0.05) is not None for s in idle)
        assert closed >= n - MAX_PENDING_HANDSHAKES, (
            f"{n - closed} of {n} unauthenticated connections held open at once")
        registered = _wait_register(server, 30.0)
        assert registered is not None, "the real slot did not get in"
    finally:
        _stop(proc)
        for s in idle:
            s.close()
        server.close()


# -- mutual authentication --------------------------------------------------------------------

class _Marker:
    """Creates ``path`` when unpickled: proof that a slot decoded what a fake sent."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.timeout(60)
def test_a_slot_refuses_a_fake_coordinator_before_unpickling_anything(tmp_path):
    marker = str(tmp_path / "unpickled")
    fake = socket.socket()
    fake.bind(("127.0.0.1", 0))
    fake.listen(1)
    proc = _slot_process(fake.getsockname()[1], new_secret(), stderr=subprocess.PIPE, text=True)
    try:
        fake.settimeout(20)
        conn, _ = fake.accept()
        conn.settimeout(20)
        P.send_frame(conn, P.CHALLENGE, os.urandom(16))
        kind, _ = P.recv_frame(conn)  # the slot's answer; the fake cannot prove anything
        assert kind == P.AUTH
        job = M.JobDescription(payload=cloudpickle.dumps(_Marker(marker)))
        P.send_frame(conn, P.CONTROL, packb(M.encode(job)))
        _, err = proc.communicate(timeout=30)
        conn.close()
    finally:
        _stop(proc)
        fake.close()
    assert not os.path.exists(marker), "the slot unpickled a job from a fake coordinator"
    assert proc.returncode != 0
    assert "did not prove it holds the job's secret" in err, err


@pytest.mark.parametrize("answer", ["forged", "reflected", "wrong-label"])
def test_a_connector_refuses_an_acceptor_that_cannot_prove_the_secret(answer):
    secret = new_secret()
    acceptor, connector = socket.socketpair()
    try:
        def fake():
            nonce = os.urandom(16)
            P.send_frame(acceptor, P.CHALLENGE, nonce)
            _, theirs = P.recv_frame(acceptor)
            limit = (1 << 20).to_bytes(8, "big")
            if answer == "forged":
                proof = os.urandom(32)
            elif answer == "reflected":  # the connector's own MAC sent back
                proof = theirs[16:]
            else:  # a right MAC under the connector's label: reflection across directions
                proof = auth._mac(secret, "data", "connector", theirs[:16], nonce, limit)
            P.send_frame(acceptor, P.AUTH, limit + proof)
            P.send_frame(acceptor, P.HELLO, b"anything")

        t = threading.Thread(target=fake, daemon=True)
        t.start()
        with pytest.raises(AuthenticationError, match="did not prove"):
            connect_peer(connector, secret, "data")
        t.join(5)
    finally:
        acceptor.close()
        connector.close()


def test_a_data_connector_sends_nothing_to_a_port_without_the_secret():
    """A slot's output channel checks the acceptor before its HELLO or any record."""
    fake = socket.socket()
    fake.bind(("127.0.0.1", 0))
    fake.listen(1)
    received: list = []

    def serve():
        conn, _ = fake.accept()
        conn.settimeout(10)
        P.send_frame(conn, P.CHALLENGE, os.urandom(16))
        try:
            while True:
                received.append(P.recv_frame(conn)[0])
                P.send_frame(conn, P.AUTH, os.urandom(40))
        except (P.ConnectionClosed, OSError):
            pass
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(AuthenticationError):
            connect_authenticated("127.0.0.1", fake.getsockname()[1], new_secret(), "data")
        t.join(10)
    finally:
        fake.close()
    assert received == [P.AUTH], received  # its proof of the secret, and nothing else


def test_the_acceptor_still_drops_a_wrong_answer():
    secret = new_secret()
    acceptor, connector = socket.socketpair()
    try:
        out: dict = {}
        t = threading.Thread(target=lambda: out.update(ok=accept_peer(acceptor, secret, "data")))
        t.start()
        kind, nonce = P.recv_frame(connector)
        mine = os.urandom(16)  # a right MAC under the acceptor's label: refused
        P.send_frame(connector, P.AUTH, mine + auth._mac(secret, "data", "acceptor", nonce, mine))
        t.join(5)
        assert out["ok"] is False
    finally:
        acceptor.close()
        connector.close()


# -- a job under attack -----------------------------------------------------------------------

def _children_listening_ports() -> dict[int, list[int]]:
    """Slot process pid -> its listening TCP ports (from /proc, no psutil)."""
    kids = descendant_pids(os.getpid(), b"engine.runtime.host.slot")
    listening = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[3] == "0A":
                listening[cols[9]] = int(cols[1].split(":")[1], 16)
    out: dict[int, list[int]] = {}
    for pid in kids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        ports = [listening[inode] for link in links if link.startswith("socket:[")
                 for inode in [link[8:-1]] if inode in listening]
        if ports:
            out[pid] = ports
    return out


@pytest.mark.timeout(180)
def test_a_job_under_attack_runs_exactly_once_and_keeps_its_memory(workdir):
    n, keys, seed = 6000, 20, 3  # 10 s at 600 records/s: the attacks land while it runs
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    coordinator_port = port.getsockname()[1]
    port.close()
    p = running_sum_pipeline(str(workdir), num_records=n, num_keys=keys, seed=seed, rate=600,
                             source_parallelism=1, keyed_parallelism=2)
    bg = Background(p, coordinator_port=coordinator_port)
    bg.wait_running(min_checkpoints=1)
    slots = _children_listening_ports()
    assert slots, "no slot data port found"
    targets = [(os.getpid(), coordinator_port)] + [(pid, ports[0]) for pid, ports in slots.items()]
    for pid, target in targets:
        rss = RssPeak(pid)
        closed_after, sock = _huge_header_attack(target)
        growth = rss.growth_kb()
        sock.close()
        assert growth < RSS_BOUND_KB, f"process {pid} grew by {growth} KiB"
        assert closed_after is not None, f"port {target} left a 1.5 GiB claim open"
        idle = [socket.create_connection(("127.0.0.1", target), timeout=5)
                for _ in range(MAX_PENDING_HANDSHAKES + 10)]
        time.sleep(0.5)
        assert sum(_closed_by_peer(s, 0.02) is not None for s in idle) >= 10
        for s in idle:
            s.close()
    result = bg.result()
    assert result.status == "FINISHED" and result.restarts == 0, result
    check_exactly_once(str(workdir / "out"), expected_running_sums(n, keys, seed))


@pytest.mark.timeout(120)
def test_a_job_whose_frames_exceed_the_option_fails_at_once_naming_it(workdir, monkeypatch):
    """The driver's $CKPT_MAX_FRAME_BYTES reaches the slots; the task that would send a
    bigger batch fails the job without restarts, with the option in the reason."""
    monkeypatch.setenv("CKPT_MAX_FRAME_BYTES", "65536")
    # without buffer debloating: its credit would split the batches below the limit
    p = running_sum_pipeline(str(workdir), num_records=40_000, num_keys=50,
                             source_parallelism=1, keyed_parallelism=2,
                             buffer_debloat_target_ms=None)
    p.batch_size = 8192  # ~95 KiB of records per channel and batch
    with pytest.raises(JobFailedError) as err:
        p.run()
    assert err.value.result.restarts == 0
    assert "FrameTooLargeError" in str(err.value) and "CKPT_MAX_FRAME_BYTES" in str(err.value)
