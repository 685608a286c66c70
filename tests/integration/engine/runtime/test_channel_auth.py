"""Runtime connections are authenticated with a per-job secret: a local process that
connects to the coordinator (or to a slot's data port) without it gets nothing and cannot
force a failover."""

from __future__ import annotations

import socket
import threading

import pytest
from pipelines import Background, check_exactly_once, expected_running_sums, running_sum_pipeline

from airflow_checkpoint_provider.engine.protocol import frames as P
from airflow_checkpoint_provider.engine.runtime.host.auth import accept_peer, connect_peer
from airflow_checkpoint_provider.engine.serialization import packb

N, KEYS, SEED = 6000, 20, 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _impostor(port: int) -> list[int]:
    """Connect as slot 0 of attempt 0 without the secret; the frame kinds received."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    received = []
    try:
        # skip the challenge, claim to be slot 0 straight away (as the old protocol allowed)
        P.send_frame(sock, P.CONTROL, packb({"type": "register", "slot": 0, "attempt": 0,
                                             "pid": 1, "host": "impostor"}))
        while True:
            kind, _ = P.recv_frame(sock)
            received.append(kind)
    except (P.ConnectionClosed, OSError):
        pass
    finally:
        sock.close()
    return received


@pytest.mark.timeout(120)
def test_an_impostor_slot_gets_no_job_and_causes_no_failover(workdir):
    port = _free_port()
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, rate=3000,
                             source_parallelism=1, keyed_parallelism=1)
    bg = Background(p, coordinator_port=port)
    bg.wait_running(min_checkpoints=1)

    received = _impostor(port)
    wrong_answer = socket.create_connection(("127.0.0.1", port), timeout=15)
    kind, nonce = P.recv_frame(wrong_answer)
    P.send_frame(wrong_answer, P.AUTH, b"\x00" * 32)
    with pytest.raises((P.ConnectionClosed, OSError)):
        P.recv_frame(wrong_answer)
    wrong_answer.close()

    result = bg.result()
    assert received == [P.CHALLENGE], received  # the challenge, then the door closed
    assert kind == P.CHALLENGE and len(nonce) == 16
    assert result.status == "FINISHED" and result.restarts == 0
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))


def test_handshake_accepts_the_secret_and_refuses_anything_else():
    secret = b"s" * 32
    for client_secret, purpose, expected in [(secret, "data", True), (b"x" * 32, "data", False),
                                             (secret, "control", False)]:
        server, client = socket.socketpair()
        try:
            outcome: dict = {}

            def serve(sock=server, out=outcome):
                out["ok"] = accept_peer(sock, secret, "data", limit=12345)
                if not out["ok"]:
                    sock.close()  # as the listeners do

            t = threading.Thread(target=serve)
            t.start()
            try:
                limit = connect_peer(client, client_secret, purpose)
            except (P.ConnectionClosed, OSError):
                limit = None  # the acceptor refused our proof and closed
            t.join(5)
            assert outcome["ok"] is expected
            assert limit == (12345 if expected else None)
        finally:
            server.close()
            client.close()
