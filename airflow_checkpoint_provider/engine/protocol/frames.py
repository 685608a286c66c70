"""Wire format of data channels and of the control connection.

Every frame is ``<u32 length><u8 type><payload>``. Data channels carry record batches and
in-band events (barriers, cancel markers, end of input); the control connection between a
slot and the coordinator carries msgpack maps.

Every read checks the length in the header before it allocates: at most
:data:`HANDSHAKE_FRAME_LIMIT` bytes until the peer is authenticated (``runtime/host/auth.py``),
then :func:`frame_limit` (``$CKPT_MAX_FRAME_BYTES``); a longer frame is a
:class:`~.errors.FrameTooLargeError` and its connection is closed by the caller.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from ..config import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES_ENV, max_frame_bytes
from ..serialization import packb, unpackb
from .errors import FrameTooLargeError, ProtocolError
from .messages import Message, decode, encode

HEADER = struct.Struct("!IB")

# data channel frame types
RECORDS = 1        # msgpack list of dicts
ARROW = 2          # Arrow IPC stream (schema + one RecordBatch)
BARRIER = 3        # msgpack [checkpoint_id, timestamp_ms, kind, location] (barrier.py)
CANCEL = 4         # msgpack checkpoint_id
END_OF_INPUT = 5   # empty
HELLO = 6          # msgpack {"vertex", "subtask", "channel"} sent first on a data connection
CONTROL = 7        # msgpack map of a control message (messages.py)
CHALLENGE = 8      # 16-byte nonce, first frame from the accepting side (runtime/host/auth.py)
AUTH = 9           # the connecting side's nonce and HMAC; then the accepting side's HMAC
WATERMARK = 10     # msgpack [watermark_ms, idle] (runtime/operators/watermarks.py)
CREDIT = 11        # u32 records: receiver -> sender, more credit (runtime/debloat.py)


def encode_watermark(watermark: int, idle: bool) -> bytes:
    return packb([watermark, idle])


def decode_watermark(payload: bytes) -> tuple[int, bool]:
    """The ``(watermark, idle)`` of a WATERMARK frame; :class:`ProtocolError` if malformed."""
    fields = unpackb(payload)
    if (not isinstance(fields, list) or len(fields) != 2 or not isinstance(fields[0], int)
            or isinstance(fields[0], bool) or not isinstance(fields[1], bool)):
        raise ProtocolError(f"watermark frame: expected [watermark, idle], got {fields!r:.200}")
    return fields[0], fields[1]


class ConnectionClosed(Exception):
    pass


#: the largest frame read before the peer is authenticated: the handshake's frames are
#: 16-48 bytes (runtime/host/auth.py), so a header claiming more is refused unread
HANDSHAKE_FRAME_LIMIT = 1024
#: frames longer than this are read in growing steps, so that memory follows the bytes that
#: actually arrived, not the length a header claims
_CHUNK = 1 << 20

_frame_limit: int | None = None   # this process's limit (None: read the configuration)
_send_limit: int | None = None    # set in slot processes: a task fails before sending more


def frame_limit() -> int:
    """The largest frame an authenticated connection of this process accepts: the value a
    slot received from its coordinator (:func:`set_frame_limit`), else
    ``$CKPT_MAX_FRAME_BYTES`` (default 256 MiB)."""
    global _frame_limit
    if _frame_limit is None:
        _frame_limit = max_frame_bytes()
    return _frame_limit


def set_frame_limit(limit: int, *, check_sends: bool = False) -> None:
    """Use ``limit`` for this process's connections; ``check_sends``: also refuse to send a
    frame over it (slots: the task that would send it fails with the option named, instead
    of its receiver dropping the channel)."""
    global _frame_limit, _send_limit
    _frame_limit = limit
    _send_limit = limit if check_sends else None


def _too_large(length: int, kind: int, limit: int, what: str) -> FrameTooLargeError:
    if limit <= HANDSHAKE_FRAME_LIMIT:
        return FrameTooLargeError(
            f"a frame of {length} bytes (type {kind}) {what} before authentication, where "
            f"at most {limit} bytes are accepted (handshake frames are 16-48 bytes): the "
            "peer is not a slot or coordinator of this job; connection closed")
    return FrameTooLargeError(
        f"a frame of {length} bytes (type {kind}) {what} over the limit of {limit} bytes "
        f"({MAX_FRAME_BYTES_ENV}, default {DEFAULT_MAX_FRAME_BYTES}): raise "
        f"{MAX_FRAME_BYTES_ENV} where the job is started, or send smaller batches "
        "(Pipeline arrow_batch_size / batch_size)")


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes from ``sock``. ``deadline`` (``time.monotonic()``): the whole read must
    end by then (``socket.timeout`` otherwise), however slowly the bytes trickle in."""
    buf = bytearray(min(n, _CHUNK))
    got = 0
    while got < n:
        if got == len(buf):  # a long frame: grow as its bytes arrive
            buf.extend(bytes(min(n, 2 * len(buf)) - len(buf)))
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the peer did not send its frame in time")
            sock.settimeout(remaining)
        with memoryview(buf) as view:
            r = sock.recv_into(view[got:], len(buf) - got)
        if r == 0:
            raise ConnectionClosed()
        got += r
    return bytes(buf)


def recv_frame(sock: socket.socket, limit: int | None = None, *,
               deadline: float | None = None) -> tuple[int, bytes]:
    """The next frame ``(type, payload)``. A header claiming more than ``limit`` bytes
    (default :func:`frame_limit`) raises :class:`FrameTooLargeError` before anything is
    allocated; the caller closes the connection."""
    length, kind = HEADER.unpack(recv_exact(sock, HEADER.size, deadline))
    if limit is None:
        limit = frame_limit()
    if length > limit:
        raise _too_large(length, kind, limit, "was announced")
    return kind, recv_exact(sock, length, deadline) if length else b""


def send_frame(sock: socket.socket, kind: int, payload=b"") -> None:
    """Send one frame; ``payload`` is ``bytes`` or any buffer (an Arrow buffer is sent
    without a copy)."""
    size = len(payload)
    if _send_limit is not None and size > _send_limit:
        raise _too_large(size, kind, _send_limit, "would be sent")
    if size < 65536 and isinstance(payload, bytes):
        sock.sendall(HEADER.pack(size, kind) + payload)
        return
    sock.sendall(HEADER.pack(size, kind))
    if size:
        sock.sendall(payload)


class ControlConnection:
    """A thread-safe connection carrying typed control messages (:mod:`.messages`)."""

    def __init__(self, sock: socket.socket, *, limit: int | None = None) -> None:
        self.sock = sock
        self.limit = limit  # largest frame accepted (None: this process's frame_limit())
        self._lock = threading.Lock()

    def send(self, msg: Message) -> None:
        data = packb(encode(msg))
        with self._lock:
            send_frame(self.sock, CONTROL, data)

    def recv(self) -> Message:
        """The next message; :class:`~.errors.ProtocolError` if it is malformed."""
        kind, payload = recv_frame(self.sock, self.limit)
        if kind != CONTROL:
            raise ConnectionClosed(f"unexpected frame type {kind} on control connection")
        return decode(unpackb(payload))

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# Kernel buffers of data channels. Small on purpose: in-flight data delays aligned
# barriers (a barrier waits behind everything buffered before it), and a slow consumer
# must stall its producer quickly.
DATA_SOCKET_BUFFER = 128 * 1024


def connect(host: str, port: int, timeout: float = 30.0, *, buffer: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
    sock.settimeout(timeout)
    sock.connect((host, port))
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
