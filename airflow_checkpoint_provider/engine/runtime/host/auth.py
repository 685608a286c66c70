"""Authenticated runtime connections: a per-job secret proven in both directions when a slot
connects to the coordinator and when one slot connects to another.

The job master draws a random 32-byte secret per job. It reaches the slots through their
launcher -- the environment of the slot processes (``CKPT_JOB_SECRET``, removed from the
environment on read) with the local runner, the closure of the barrier stage's function
with the Spark runner -- and is never logged or written to the metadata DB.

Handshake, on every new connection, before anything else (A accepts, C connects):

1. A -> C ``CHALLENGE``: a fresh 16-byte nonce ``na``;
2. C -> A ``AUTH``: a fresh nonce ``nc`` and ``HMAC(secret, "<purpose>|connector" | na | nc)``;
3. A checks it in constant time, then A -> C ``AUTH``: its frame limit (u64) and
   ``HMAC(secret, "<purpose>|acceptor" | nc | na | limit)``;
4. C checks that before it reads or sends anything else.

The two MACs are over different labels (and nonce orders), so neither side's answer can be
reflected back as the other's. A peer that fails, sends another frame, or does not finish
within :data:`HANDSHAKE_TIMEOUT_S` overall (however slowly it trickles bytes) is dropped:
an acceptor logs a warning with its address before it can register as a slot, receive the
job description or send data (so it cannot cause a failover either); a slot refuses a
coordinator or data port that cannot prove the secret before it decodes (unpickles) any
job description or sends any record. Frames read during the handshake are limited to
:data:`~..protocol.frames.HANDSHAKE_FRAME_LIMIT` bytes, and a listener has at most
:data:`MAX_PENDING_HANDSHAKES` (or twice the job's slots) connections in their handshake at
once: one more evicts the oldest, so idle peers cannot pile up threads and memory, and a
real slot (a few milliseconds to authenticate) still gets in. The accept loop never waits
for a handshake.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable

from ...protocol import frames as P
from ...protocol.errors import AuthenticationError, ProtocolError
from ...settings import JOB_SECRET

log = logging.getLogger(__name__)

#: environment variable carrying the job secret (hex) to local slot processes
SECRET_ENV = JOB_SECRET.name
#: the whole handshake must end within this many seconds (not per read)
HANDSHAKE_TIMEOUT_S = 10.0
#: connections of one listener in their handshake at once (at least twice the job's slots)
MAX_PENDING_HANDSHAKES = 64
_NONCE = 16
_LIMIT = struct.Struct("!Q")
_MAC = hashlib.sha256().digest_size


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def secret_from_env() -> bytes | None:
    """The secret handed to this slot process; removed from the environment so child
    processes (user code) do not inherit it."""
    value = JOB_SECRET.take()
    return bytes.fromhex(value) if value else None


def _mac(secret: bytes, purpose: str, side: str, *parts: bytes) -> bytes:
    label = f"{purpose}|{side}".encode()
    return hmac.new(secret, label + b"|" + b"".join(parts), hashlib.sha256).digest()


def _old_mac(secret: bytes, purpose: str, nonce: bytes) -> bytes:
    """The one-sided answer of versions before the mutual handshake (only to name them)."""
    return hmac.new(secret, purpose.encode() + b"|" + nonce, hashlib.sha256).digest()


def _peer(sock: socket.socket) -> str:
    try:
        name = sock.getpeername()
    except OSError:
        return "?"
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name or "?")


def accept_peer(sock: socket.socket, secret: bytes | None, purpose: str, *,
                limit: int | None = None, timeout: float | None = None) -> bool:
    """Accepting side: challenge the peer, then prove the secret to it and announce
    ``limit`` (default: this process's frame limit) as the frame limit of the connection.
    ``False`` (and a warning) if the peer fails."""
    if secret is None:
        return True
    peer = _peer(sock)
    timeout = HANDSHAKE_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    nonce = secrets.token_bytes(_NONCE)
    old_timeout = sock.gettimeout()
    reason = "a wrong or missing proof of the job secret"
    try:
        sock.settimeout(timeout)
        P.send_frame(sock, P.CHALLENGE, nonce)
        kind, payload = P.recv_frame(sock, P.HANDSHAKE_FRAME_LIMIT, deadline=deadline)
        theirs = payload[:_NONCE]
        ok = (kind == P.AUTH and len(payload) == _NONCE + _MAC and hmac.compare_digest(
            payload[_NONCE:], _mac(secret, purpose, "connector", nonce, theirs)))
        if not ok and kind == P.AUTH and len(payload) == _MAC and hmac.compare_digest(
                payload, _old_mac(secret, purpose, nonce)):
            reason = ("the one-sided handshake of an older airflow-checkpoint-provider: "
                      "install the same version on every worker (or ship_code=True)")
        if ok:
            announced = _LIMIT.pack(P.frame_limit() if limit is None else limit)
            P.send_frame(sock, P.AUTH, announced + _mac(secret, purpose, "acceptor", theirs,
                                                        nonce, announced))
    except TimeoutError:
        ok, reason = False, f"no complete answer within {timeout:g} s"
    except (P.ConnectionClosed, OSError):
        ok, reason = False, "the connection closed during the handshake"
    except ProtocolError as exc:
        ok, reason = False, str(exc)
    if not ok:
        log.warning("Dropped an unauthenticated %s connection from %s: %s", purpose, peer,
                    reason)
        return False
    sock.settimeout(old_timeout)
    return True


def connect_peer(sock: socket.socket, secret: bytes | None, purpose: str, *,
                 timeout: float | None = None) -> int | None:
    """Connecting side: answer the challenge, then check the acceptor's proof; the frame
    limit it announced (``None`` without a secret). :class:`AuthenticationError` if the
    acceptor cannot prove the secret (or sends anything else);
    :class:`~..protocol.frames.ConnectionClosed` if it closed the connection (it refused
    our proof, or evicted us); ``TimeoutError`` after ``timeout`` seconds overall."""
    if secret is None:
        return None
    peer = _peer(sock)
    timeout = HANDSHAKE_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    old_timeout = sock.gettimeout()
    sock.settimeout(timeout)
    kind, nonce = P.recv_frame(sock, P.HANDSHAKE_FRAME_LIMIT, deadline=deadline)
    if kind != P.CHALLENGE or len(nonce) != _NONCE:
        raise AuthenticationError(
            f"the {purpose} peer at {peer} sent frame {kind} instead of an authentication "
            "challenge: it is not part of this job; nothing it sent was decoded")
    mine = secrets.token_bytes(_NONCE)
    P.send_frame(sock, P.AUTH, mine + _mac(secret, purpose, "connector", nonce, mine))
    kind, proof = P.recv_frame(sock, P.HANDSHAKE_FRAME_LIMIT, deadline=deadline)
    if (kind != P.AUTH or len(proof) != _LIMIT.size + _MAC or not hmac.compare_digest(
            proof[_LIMIT.size:], _mac(secret, purpose, "acceptor", mine, nonce,
                                      proof[:_LIMIT.size]))):
        raise AuthenticationError(
            f"the {purpose} peer at {peer} did not prove it holds the job's secret (frame "
            f"{kind}, {len(proof)} bytes): it is not this job's "
            f"{'coordinator' if purpose == 'control' else 'slot'}, or runs an older version "
            "of airflow-checkpoint-provider; nothing it sent was decoded")
    sock.settimeout(old_timeout)
    limit = _LIMIT.unpack(proof[:_LIMIT.size])[0]
    return max(P.HANDSHAKE_FRAME_LIMIT, min(limit, 2**32 - 1))


def connect_authenticated(host: str, port: int, secret: bytes | None, purpose: str, *,
                          buffer: int | None = None,
                          attempts: int = 3) -> tuple[socket.socket, int | None]:
    """Connect to ``host:port`` and run the handshake; retried (``attempts`` times) when the
    acceptor closes the connection during it -- a listener under a flood of unauthenticated
    connections may have evicted this one. A failed proof is not retried."""
    for attempt in range(1, attempts + 1):
        sock = P.connect(host, port, buffer=buffer)
        try:
            return sock, connect_peer(sock, secret, purpose)
        except (P.ConnectionClosed, ConnectionResetError, BrokenPipeError):
            sock.close()
            if attempt == attempts:
                raise
            log.warning("The %s peer at %s:%d closed the connection during the handshake; "
                        "retrying (%d/%d)", purpose, host, port, attempt, attempts)
            time.sleep(0.2 * attempt)
        except BaseException:
            sock.close()
            raise
    raise AssertionError("unreachable")


class HandshakeGate:
    """Bounds the connections of one listener that have not authenticated yet: admitting
    one more than ``capacity`` shuts the oldest pending one down (its handshake thread then
    ends at once)."""

    def __init__(self, capacity: int, purpose: str) -> None:
        self.capacity, self.purpose = max(1, capacity), purpose
        self._pending: collections.OrderedDict[socket.socket, None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.evicted = 0

    def admit(self, sock: socket.socket) -> None:
        with self._lock:
            while len(self._pending) >= self.capacity:
                oldest, _ = self._pending.popitem(last=False)
                self.evicted += 1
                if self.evicted == 1 or self.evicted % 100 == 0:
                    log.warning("More than %d unauthenticated %s connections at once: dropping "
                                "the oldest (%d so far)", self.capacity, self.purpose,
                                self.evicted)
                try:
                    oldest.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._pending[sock] = None

    def release(self, sock: socket.socket) -> None:
        with self._lock:
            self._pending.pop(sock, None)


def serve_authenticated(server: socket.socket, secret: bytes | None, purpose: str,
                        on_peer: Callable[[socket.socket], None], *, name: str,
                        capacity: int = MAX_PENDING_HANDSHAKES,
                        limit: Callable[[], int] | None = None) -> threading.Thread:
    """Accept connections on ``server`` until it is closed; each one is authenticated in its
    own thread (the accept loop never waits for a handshake), at most ``capacity`` at once
    (:class:`HandshakeGate`), and handed to ``on_peer`` in that thread once it has passed.
    ``limit``: the frame limit to announce (default: this process's)."""
    gate = HandshakeGate(capacity, purpose)

    def handshake(conn: socket.socket) -> None:
        try:
            ok = accept_peer(conn, secret, purpose, limit=limit() if limit else None)
        finally:
            gate.release(conn)
        if not ok:
            conn.close()
            return
        on_peer(conn)

    def accept_loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                conn.close()
                continue
            if secret is not None:
                gate.admit(conn)
            threading.Thread(target=handshake, args=(conn,), name=f"{name}-peer",
                             daemon=True).start()

    thread = threading.Thread(target=accept_loop, name=name, daemon=True)
    thread.start()
    return thread
