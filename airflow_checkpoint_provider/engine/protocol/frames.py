"""Wire format of data channels and of the control connection.

Every frame is ``<u32 length><u8 type><payload>``. Data channels carry record batches and
in-band events (barriers, cancel markers, end of input); the control connection between a
slot and the coordinator carries msgpack maps.
"""

from __future__ import annotations

import socket
import struct
import threading

from ..serialization import packb, unpackb
from .errors import ProtocolError
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
CHALLENGE = 8      # 16-byte nonce, first frame from the accepting side (runtime/auth.py)
AUTH = 9           # HMAC-SHA256 of the nonce under the job secret, the answer
WATERMARK = 10     # msgpack [watermark_ms, idle] (runtime/watermarks.py)


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


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ConnectionClosed()
        got += r
    return bytes(buf)


def recv_frame(sock: socket.socket) -> tuple[int, bytes]:
    length, kind = HEADER.unpack(recv_exact(sock, HEADER.size))
    return kind, recv_exact(sock, length) if length else b""


def send_frame(sock: socket.socket, kind: int, payload=b"") -> None:
    """Send one frame; ``payload`` is ``bytes`` or any buffer (an Arrow buffer is sent
    without a copy)."""
    size = len(payload)
    if size < 65536 and isinstance(payload, bytes):
        sock.sendall(HEADER.pack(size, kind) + payload)
        return
    sock.sendall(HEADER.pack(size, kind))
    if size:
        sock.sendall(payload)


class ControlConnection:
    """A thread-safe connection carrying typed control messages (:mod:`.messages`)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, msg: Message) -> None:
        data = packb(encode(msg))
        with self._lock:
            send_frame(self.sock, CONTROL, data)

    def recv(self) -> Message:
        """The next message; :class:`~.errors.ProtocolError` if it is malformed."""
        kind, payload = recv_frame(self.sock)
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
