"""Where a task's records go: the channels to downstream subtasks and the writer that
partitions a task's output over them.

An :class:`OutputChannel` is a TCP connection to a subtask in another slot process; a
:class:`LocalChannel` puts items straight into the mailbox of a subtask of the same slot.
A :class:`RecordWriter` sends each batch of one output edge to the channel(s) its
partitioning picks (forward, rebalance, broadcast or hash on the key group), and in-band
events (barriers, cancel markers, watermarks, end of input) to every channel.
"""

from __future__ import annotations

import threading
from typing import cast

import pyarrow as pa

from ..errors import BadRecordError
from ..plan.graph import BROADCAST, FORWARD, HASH, REBALANCE
from ..protocol import CheckpointBarrier
from ..protocol import frames as P
from ..serialization import pack_records, unpack_records, unpackb
from ..state.keygroups import key_group_for
from ..state.vectorized import channels_for, key_groups_of
from .batches import Batch, encode_arrow, split_by_channel
from .mailbox import Mailbox


class OutputChannel:
    """A TCP connection to one downstream subtask. ``sendall`` blocks when the receiver is
    slow (TCP flow control): that is the backpressure."""

    def __init__(self, sock) -> None:
        self.sock = sock

    def send_records(self, kind: int, records: Batch, encode) -> None:
        P.send_frame(self.sock, kind, encode(records))

    def send(self, kind: int, payload: bytes = b"") -> None:
        P.send_frame(self.sock, kind, payload)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def event_item(kind: int, payload: bytes, channel: int) -> tuple:
    """The mailbox item of an in-band event frame (barrier, cancel marker, end of input)
    received on input channel ``channel``, over TCP or in memory."""
    if kind == P.BARRIER:
        return ("barrier", channel, CheckpointBarrier.decode(payload))
    if kind == P.CANCEL:
        return ("cancel", channel, unpackb(payload))
    if kind == P.END_OF_INPUT:
        return ("eoi", channel, None)
    if kind == P.WATERMARK:
        return ("watermark", channel, P.decode_watermark(payload))
    raise P.ConnectionClosed(f"unexpected frame type {kind}")


class LocalChannel:
    """A downstream subtask in the same slot process: items go straight into its mailbox, in
    the order a TCP channel would deliver them, with no socket and, for Arrow batches
    (immutable), no encoding. Flow control as on TCP: the sender waits while the channel is
    blocked for barrier alignment (``gate``) and while the mailbox is full. Lists of dicts
    still go through msgpack, which copies them: the receiver may mutate its records."""

    def __init__(self, mailbox: Mailbox, gate: threading.Event, channel: int) -> None:
        self.mailbox, self.gate, self.channel = mailbox, gate, channel

    def _put(self, item: tuple) -> None:
        self.gate.wait()
        if not self.mailbox.put_data(item):
            raise P.ConnectionClosed("the downstream task of this slot has stopped")

    def send_records(self, kind: int, records: Batch, encode) -> None:
        if kind != P.ARROW:
            records = unpack_records(encode(records))
        self._put(("records", self.channel, records))

    def send(self, kind: int, payload: bytes = b"") -> None:
        self._put(event_item(kind, payload, self.channel))

    def close(self) -> None:
        self.mailbox.put_data(("closed", self.channel, None))


class RecordWriter:
    """Partitions an output batch over the channels of one output edge."""

    #: channel of each key group, for ``_channel_n`` channels (built on first use)
    _channel_table: list[int]
    _channel_n: int

    def __init__(self, partitioning: str, channels: list[OutputChannel | LocalChannel],
                 key_selector, max_parallelism: int, subtask: int, *,
                 side: str | None = None) -> None:
        self.partitioning = partitioning
        #: ``None``: the main output; ``"late"``: the late records of the chain's window
        self.side = side
        self.channels = channels
        self.key_selector = key_selector
        # key_by("field"): Arrow batches are partitioned on that column, in numpy
        self.key_field: str | None = getattr(key_selector, "field", None)
        self.max_parallelism = max_parallelism
        self._rr = subtask  # start round-robin at a different channel in each subtask

    def emit(self, records: Batch) -> None:
        """Send a batch: Arrow batches as Arrow IPC frames, lists of dicts as msgpack."""
        if not len(records):
            return
        arrow = isinstance(records, pa.RecordBatch)
        field = self.key_field
        if arrow and self.partitioning == HASH and field is None:
            # key_by(function): per-record keys
            records, arrow = cast(pa.RecordBatch, records).to_pylist(), False
        kind, encode = (P.ARROW, encode_arrow) if arrow else (P.RECORDS, pack_records)
        n = len(self.channels)
        if self.partitioning == FORWARD or n == 1:
            self.channels[0].send_records(kind, records, encode)
        elif self.partitioning == REBALANCE:
            self.channels[self._rr % n].send_records(kind, records, encode)
            self._rr += 1
        elif self.partitioning == BROADCAST:
            data = None  # encoded once for every remote channel
            for ch in self.channels:
                if isinstance(ch, LocalChannel):
                    ch.send_records(kind, records, encode)
                else:
                    data = encode(records) if data is None else data
                    ch.send(kind, data)
        elif self.partitioning == HASH:
            # Arrow batches reach here only with a key field (else they became rows above)
            parts = (self._split_arrow(records, cast(str, field), n) if arrow
                     else self._split_rows(records, n))
            for ch, part in zip(self.channels, parts, strict=True):
                if part:
                    ch.send_records(kind, part, encode)
        else:  # pragma: no cover - graph validation prevents it
            raise ValueError(f"unknown partitioning {self.partitioning}")

    def _split_rows(self, records: list[dict], n: int) -> list[list]:
        parts: list[list] = [[] for _ in range(n)]
        sel, m = self.key_selector, self.max_parallelism
        keys = [sel(r) for r in records]
        groups = key_groups_of(keys, m)  # str or int keys: one vectorized pass
        if groups is None:
            for r, k in zip(records, keys, strict=True):
                if isinstance(k, list):
                    k = tuple(k)
                parts[key_group_for(k, m) * n // m].append(r)
            return parts
        channel_of = self._channel_of_group(n)
        appends = [p.append for p in parts]
        for r, g in zip(records, groups, strict=True):
            appends[channel_of[g]](r)
        return parts

    def _channel_of_group(self, n: int) -> list[int]:
        table = getattr(self, "_channel_table", None)
        if table is None or len(table) != self.max_parallelism or self._channel_n != n:
            m = self.max_parallelism
            table = self._channel_table = [g * n // m for g in range(m)]
            self._channel_n = n
        return table

    def _split_arrow(self, batch: pa.RecordBatch, field: str, n: int) -> list:
        """Hash, key group and channel of every row in numpy, then one take."""
        try:
            column = batch.column(field)
        except KeyError:
            raise BadRecordError(f"key_by field {field!r} is not a column of the batch "
                                 f"(columns: {', '.join(batch.schema.names)})") from None
        return split_by_channel(batch, channels_for(column, n, self.max_parallelism), n)

    def emit_event(self, kind: int, payload: bytes = b"") -> None:
        for ch in self.channels:
            ch.send(kind, payload)
