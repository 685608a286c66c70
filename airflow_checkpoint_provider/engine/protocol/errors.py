"""The error of a malformed or unexpected message."""

from __future__ import annotations

from ..errors import EngineError


class ProtocolError(EngineError):
    """A message or frame that does not follow the protocol (a bug, or a peer of another
    version of this package)."""
