"""TCP ports of the test servers on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A port no socket is bound to now (another process may take it once this returns)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hold_port(port: int) -> socket.socket:
    """Keep ``port`` (0: a free one) while its server is down (an outage a test makes): a
    socket bound to it and not listening, so connecting is refused as with no socket at all,
    but no other process can bind the port meanwhile (a ``bind(0)`` of another test on the
    machine could take a free port within seconds). Close it just before the server binds
    the port again."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    return s


@contextmanager
def closed_port() -> Iterator[int]:
    """A port where nothing listens, for the block (:func:`hold_port`). A port that was free
    and then released can be taken meanwhile, by another test's listener or by a connect's
    own source port (Linux then connects the socket to itself), and the "unreachable" address
    answers."""
    held = hold_port(0)
    try:
        yield held.getsockname()[1]
    finally:
        held.close()
