"""Authenticated runtime connections: a per-job secret checked when a slot connects to the
coordinator and when one slot connects to another.

The job master draws a random 32-byte secret per job. It reaches the slots through their
launcher -- the environment of the slot processes (``CKPT_JOB_SECRET``, removed from the
environment on read) with the local runner, the closure of the barrier stage's function
with the Spark runner -- and is never logged or written to the metadata DB.

Handshake, on every new connection, before anything else: the accepting side sends a
``CHALLENGE`` frame with a fresh 16-byte nonce; the connecting side answers with an ``AUTH``
frame holding ``HMAC-SHA256(secret, purpose | nonce)``; the accepting side compares it in
constant time. A peer that answers wrongly, not at all within the timeout, or with another
frame is dropped (logged at WARNING with its address) before it can register as a slot,
receive the job description or send data, so it cannot cause a failover either.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import socket

from ..protocol import frames as P

log = logging.getLogger(__name__)

#: environment variable carrying the job secret (hex) to local slot processes
SECRET_ENV = "CKPT_JOB_SECRET"
HANDSHAKE_TIMEOUT_S = 10.0


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def secret_from_env() -> bytes | None:
    """The secret handed to this slot process; removed from the environment so child
    processes (user code) do not inherit it."""
    value = os.environ.pop(SECRET_ENV, None)
    return bytes.fromhex(value) if value else None


def _mac(secret: bytes, purpose: str, nonce: bytes) -> bytes:
    return hmac.new(secret, purpose.encode() + b"|" + nonce, hashlib.sha256).digest()


def accept_peer(sock: socket.socket, secret: bytes | None, purpose: str) -> bool:
    """Accepting side: challenge the peer; ``False`` (and a warning) if it fails."""
    if secret is None:
        return True
    try:
        peer = sock.getpeername()
    except OSError:
        peer = "?"
    nonce = secrets.token_bytes(16)
    old_timeout = sock.gettimeout()
    try:
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        P.send_frame(sock, P.CHALLENGE, nonce)
        kind, payload = P.recv_frame(sock)
        ok = kind == P.AUTH and hmac.compare_digest(payload, _mac(secret, purpose, nonce))
    except (P.ConnectionClosed, OSError):
        ok = False
    if not ok:
        log.warning("Dropped an unauthenticated %s connection from %s", purpose, peer)
        return False
    sock.settimeout(old_timeout)
    return True


def connect_peer(sock: socket.socket, secret: bytes | None, purpose: str) -> None:
    """Connecting side: answer the challenge. Raises ``ConnectionClosed`` if the other side
    sends anything else."""
    if secret is None:
        return
    kind, nonce = P.recv_frame(sock)
    if kind != P.CHALLENGE:
        raise P.ConnectionClosed(f"expected an authentication challenge, got frame {kind}")
    P.send_frame(sock, P.AUTH, _mac(secret, purpose, nonce))
