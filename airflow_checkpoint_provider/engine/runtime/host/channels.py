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

from ...errors import BadRecordError
from ...plan.graph import BROADCAST, FORWARD, HASH, REBALANCE
from ...protocol import CheckpointBarrier
from ...protocol import frames as P
from ...serialization import pack_records, unpack_records, unpackb
from ...state.key_hashing import channels_for, key_groups_of
from ...state.keygroups import key_group_for
from ..batches import Batch, encode_arrow, split_by_channel
from ..task.debloat import SenderCredit
from ..task.mailbox import ChannelItem, ItemKind, Mailbox


def _rows(records: Batch, start: int, n: int) -> Batch:
    """Records ``start .. start + n`` of a batch (an Arrow slice: no copy)."""
    if start == 0 and n == len(records):
        return records
    if isinstance(records, list):
        return records[start:start + n]
    return records.slice(start, n)


class OutputChannel:
    """A TCP connection to one downstream subtask. ``sendall`` blocks when the receiver is
    slow (TCP flow control): that is the backpressure. With buffer debloating
    (``credit_based``) a batch is sent in parts of at most the credit the receiver granted
    (:mod:`.debloat`), waiting for more between them."""

    def __init__(self, sock, *, credit_based: bool = False) -> None:
        self.sock = sock
        self.credit = SenderCredit(sock) if credit_based else None

    def send_records(self, kind: int, records: Batch, encode, encoded=None) -> None:
        """Send a batch (``encoded``: its frame payload, if already encoded)."""
        credit = self.credit
        if credit is None:
            P.send_frame(self.sock, kind, encode(records) if encoded is None else encoded)
            return
        n, start = len(records), 0
        while start < n:
            have = credit.credit if credit.credit >= n - start else credit.refresh()
            if have <= 0:
                have = credit.wait()
            part = min(have, n - start)
            payload = (encoded if encoded is not None and part == n
                       else encode(_rows(records, start, part)))
            P.send_frame(self.sock, kind, payload)
            credit.credit -= part
            start += part

    def available(self, timeout: float = 0.0) -> int | None:
        """Records this channel can send now (after waiting up to ``timeout`` seconds for
        credit); ``None``: no credit-based flow control."""
        if self.credit is None:
            return None
        return self.credit.wait(timeout) if timeout else self.credit.refresh()

    def send(self, kind: int, payload: bytes = b"") -> None:
        P.send_frame(self.sock, kind, payload)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def event_item(kind: int, payload: bytes, channel: int) -> ChannelItem:
    """The mailbox item of an in-band event frame (barrier, cancel marker, end of input)
    received on input channel ``channel``, over TCP or in memory."""
    if kind == P.BARRIER:
        return (ItemKind.BARRIER, channel, CheckpointBarrier.decode(payload))
    if kind == P.CANCEL:
        return (ItemKind.CANCEL, channel, unpackb(payload))
    if kind == P.END_OF_INPUT:
        return (ItemKind.END_OF_INPUT, channel, None)
    if kind == P.WATERMARK:
        return (ItemKind.WATERMARK, channel, P.decode_watermark(payload))
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

    def send_records(self, kind: int, records: Batch, encode, encoded=None) -> None:
        if kind != P.ARROW:
            records = unpack_records(encode(records) if encoded is None else encoded)
        n, start = len(records), 0
        while start < n:  # in parts of at most the receiver's credit (runtime/debloat.py)
            part = self.mailbox.reserve(self.channel, n - start)
            if part <= 0:
                raise P.ConnectionClosed("the downstream task of this slot has stopped")
            self._put((ItemKind.RECORDS, self.channel, _rows(records, start, part)))
            start += part

    def available(self, timeout: float = 0.0) -> int | None:
        free = self.mailbox.credit_available(self.channel, timeout)
        return None if self.mailbox.credit_per_channel is None else free

    def send(self, kind: int, payload: bytes = b"") -> None:
        self._put(event_item(kind, payload, self.channel))

    def close(self) -> None:
        self.mailbox.put_data((ItemKind.CLOSED, self.channel, None))


class RecordWriter:
    """Partitions an output batch over the channels of one output edge."""

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
        #: records emitted so far (a source sizes its reads by what its chain emits here)
        self.emitted = 0
        #: channel of each key group, for ``_channel_n`` channels (built on first use)
        self._channel_table: list[int] = []
        self._channel_n = 0

    def emit(self, records: Batch) -> None:
        """Send a batch: Arrow batches as Arrow IPC frames, lists of dicts as msgpack."""
        if not len(records):
            return
        self.emitted += len(records)
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
            data = None  # encoded once for every remote channel (sent whole: no credit)
            for ch in self.channels:
                if isinstance(ch, LocalChannel):
                    ch.send_records(kind, records, encode)
                else:
                    if data is None and (ch.credit is None or ch.credit.credit >= len(records)):
                        data = encode(records)
                    ch.send_records(kind, records, encode, data)
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
        table = self._channel_table
        if len(table) != self.max_parallelism or self._channel_n != n:
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

    def available(self, timeout: float = 0.0) -> int | None:
        """Records a source may read for this output without waiting for credit: its
        channels' smallest credit; ``None``: no credit-based flow control. Waits up to
        ``timeout`` seconds on a channel without credit. Not that times the channels with
        hash partitioning: a batch's part for one channel is as often over as under its
        share, and a source waiting for credit in the middle of a batch takes no checkpoint
        trigger and feeds none of its other channels (debloat.py)."""
        smallest: int | None = None
        for ch in self.channels:
            free = ch.available()
            if free is not None and free <= 0 and timeout:
                free = ch.available(timeout)
            if free is not None:
                smallest = free if smallest is None else min(smallest, free)
            if smallest == 0:
                return 0
        return smallest

    def emit_event(self, kind: int, payload: bytes = b"") -> None:
        for ch in self.channels:
            ch.send(kind, payload)
