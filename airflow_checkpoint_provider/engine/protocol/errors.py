"""The errors of a malformed or unexpected message, of a frame over the limit and of a peer
that fails authentication."""

from __future__ import annotations

from ..errors import DeterministicError, EngineError


class ProtocolError(EngineError):
    """A message or frame that does not follow the protocol (a bug, or a peer of another
    version of this package)."""


class FrameTooLargeError(ProtocolError, DeterministicError):
    """A frame longer than the connection accepts: before authentication the handshake limit
    (1 KiB), after it ``$CKPT_MAX_FRAME_BYTES``. Checked before anything is allocated; the
    connection is then closed. A task that would send one fails at once (the same data
    would make the same frame after a restart)."""


class AuthenticationError(ProtocolError):
    """The other end of a runtime connection did not prove it holds the job's secret (it is
    not the job's coordinator or slot, or it runs an older, one-sided handshake)."""
