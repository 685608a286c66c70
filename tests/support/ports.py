"""TCP ports of the test servers on 127.0.0.1."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port no socket is bound to now (another process may take it once this returns)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hold_port(port: int) -> socket.socket:
    """Keep ``port`` while its server is down (an outage a test makes): a socket bound to it
    and not listening, so connecting is refused as with no socket at all, but no other
    process can bind the port meanwhile (a ``bind(0)`` of another test on the machine could
    take a free port within seconds). Close it just before the server binds the port again."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    return s
