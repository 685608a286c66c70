"""A partition's log as the broker stores it, batch by batch: which producer (id, epoch)
wrote each record batch, whether it is transactional, and the transaction markers (control
batches: COMMIT / ABORT of a producer's transaction). The clients hide exactly this (a
consumer never returns control batches), and it says whether records a ``read_committed``
reader got belong to a committed or an aborted transaction (chaos FINDINGS 8).

A raw Fetch (version 4, ``read_uncommitted``) over a socket: no Kafka library of the
environment exposes record batches. Only the batch headers and control records are decoded
(neither is ever compressed).

    python -m bench.chaos.kafka_log 127.0.0.1:PORT TOPIC [PARTITION]
"""

from __future__ import annotations

import socket
import struct
import sys
from dataclasses import dataclass

_FETCH, _VERSION = 1, 4


@dataclass
class Batch:
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    #: ``None`` for a data batch, else ``"COMMIT"`` / ``"ABORT"`` (a transaction marker)
    control: str | None
    records: int


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _fetch_request(correlation: int, topic: str, partition: int, offset: int) -> bytes:
    header = struct.pack(">hhi", _FETCH, _VERSION, correlation) + _string("chaos-log")
    body = struct.pack(">iiiib", -1, 100, 1, 4 << 20, 0)  # replica, wait, min, max, uncommitted
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, 4 << 20)
    msg = header + body
    return struct.pack(">i", len(msg)) + msg


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = b[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), i  # zigzag
        shift += 7


def _batches(records: bytes) -> list[Batch]:
    out = []
    i = 0
    while i + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, i)
        end = i + 12 + length
        if end > len(records):
            break  # a partial batch at the end of the answer
        attributes, last_delta = struct.unpack_from(">hi", records, i + 21)
        pid, pepoch = struct.unpack_from(">qh", records, i + 43)
        (count,) = struct.unpack_from(">i", records, i + 57)
        control = None
        if attributes & 0x20:  # a control batch: its one record's key is (version, type)
            j = i + 61
            _length, j = _varint(records, j)
            j += 1  # record attributes
            _ts, j = _varint(records, j)
            _od, j = _varint(records, j)
            _klen, j = _varint(records, j)
            _version, kind = struct.unpack_from(">hh", records, j)
            control = {0: "ABORT", 1: "COMMIT"}.get(kind, f"type {kind}")
        out.append(
            Batch(base, base + last_delta, pid, pepoch, bool(attributes & 0x10), control, count)
        )
        i = end
    return out


def partition_log(
    bootstrap: str, topic: str, partition: int, *, timeout: float = 10.0
) -> list[Batch]:
    """Every record batch of ``topic``/``partition`` from offset 0, in offset order."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    out: list[Batch] = []
    offset = 0
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        for correlation in range(1, 100_000):
            sock.sendall(_fetch_request(correlation, topic, partition, offset))
            (size,) = struct.unpack(">i", _recv(sock, 4))
            resp = _recv(sock, size)
            i = 4 + 4  # correlation id, throttle time
            (_ntopics,) = struct.unpack_from(">i", resp, i)
            i += 4
            (tlen,) = struct.unpack_from(">h", resp, i)
            i += 2 + tlen
            i += 4  # partitions count (1)
            _p, error, _hw, _lso = struct.unpack_from(">ihqq", resp, i)
            i += 22
            if error:
                raise RuntimeError(f"Fetch {topic}[{partition}] at {offset}: error code {error}")
            (naborted,) = struct.unpack_from(">i", resp, i)
            i += 4 + max(naborted, 0) * 16
            (rlen,) = struct.unpack_from(">i", resp, i)
            batches = _batches(resp[i + 4 : i + 4 + max(rlen, 0)])
            batches = [b for b in batches if b.last_offset >= offset]
            if not batches:
                return out
            out += batches
            offset = batches[-1].last_offset + 1
    return out


def aborted_offsets(batches: list[Batch]) -> set[int]:
    """The offsets of the records of aborted transactions: the data batches of a producer
    id between its previous transaction marker and an ABORT marker (Apache Kafka keeps them
    in its aborted-transaction index and a ``read_committed`` consumer skips them; the test
    broker keeps no such index and returns them, its caveat (1))."""
    pending: dict[int, list[Batch]] = {}
    aborted: set[int] = set()
    for b in batches:
        if b.control == "ABORT":
            for d in pending.pop(b.producer_id, []):
                aborted.update(range(d.base_offset, d.last_offset + 1))
        elif b.control:
            pending.pop(b.producer_id, None)
        elif b.transactional:
            pending.setdefault(b.producer_id, []).append(b)
    return aborted


def summary(batches: list[Batch]) -> list[str]:
    """One line per run of consecutive batches of one producer (id/epoch), with its
    transaction markers."""
    lines: list[str] = []
    run: list[Batch] = []

    def flush() -> None:
        if run:
            b0, b1 = run[0], run[-1]
            n = sum(b.records for b in run)
            lines.append(
                f"offsets {b0.base_offset}-{b1.last_offset}: producer "
                f"{b0.producer_id}/{b0.producer_epoch}, {len(run)} batches, {n} "
                f"records{' (transactional)' if b0.transactional else ''}"
            )
            run.clear()

    for b in batches:
        if b.control:
            flush()
            lines.append(
                f"offset {b.base_offset}: {b.control} marker of producer "
                f"{b.producer_id}/{b.producer_epoch}"
            )
        elif run and (b.producer_id, b.producer_epoch) != (
            run[0].producer_id,
            run[0].producer_epoch,
        ):
            flush()
            run.append(b)
        else:
            run.append(b)
    flush()
    return lines


def main(argv: list[str]) -> int:
    bootstrap, topic = argv[0], argv[1]
    partitions = [int(argv[2])] if len(argv) > 2 else [0]
    for p in partitions:
        print(f"{topic}[{p}]:")
        for line in summary(partition_log(bootstrap, topic, p)):
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
