"""A task's checkpoint side: barrier handling, snapshot, upload and ack, and the
coordinator's checkpoint messages (trigger, notify, abort, unalign).

Checkpoint at a task (Flink's "checkpoint on barrier"):

1. Barrier alignment decides the moment (see :mod:`.alignment`); sources decide it when
   the coordinator's trigger is taken from the mailbox, between two batches.
2. Synchronous part: every operator of the chain captures its state
   (:meth:`Operator.snapshot`): user ``snapshot_state`` hooks, keyed state serialized, sink
   transactions pre-committed.
3. The barrier is forwarded on every output channel, and held-back inputs are released.
4. Asynchronous part (on the slot's upload pool, off this thread): state files are written
   to checkpoint storage and the task acks with its handles and metrics.

:class:`SubtaskCheckpointCoordinator` (Flink's name) does this for one task. The task holds
it as ``task.checkpointing`` and hands it the barriers, cancel markers and closed channels of
its inputs and the coordinator's checkpoint messages; it owns the barrier handler, the
barriers seen, the channels held back for alignment and the unaligned checkpoints waiting
for their in-flight records.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, assert_never, cast

from ...eventtime import MIN_WATERMARK
from ...protocol import CheckpointBarrier
from ...protocol import frames as P
from ...protocol import messages as M
from ...serialization import packb, unpack_records, unpackb
from ...snapshot.codec import read_verified
from ...state.backend import write_state_file
from ...state.ttl import processing_time_at
from ..batches import Batch, decode_arrow, encode_arrow
from ..operators.base import Operator
from .alignment import (
    AlignmentAction,
    BarrierHandler,
    Block,
    Cancel,
    Captured,
    DropCapture,
    Release,
    Snapshot,
    SnapshotUnaligned,
)
from .failure_place import mark
from .mailbox import Mailbox
from .outputs import RecordOutput

if TYPE_CHECKING:
    from ...plan.graph import Vertex
    from .environment import TaskEnvironment

log = logging.getLogger(__name__)


class CheckpointedTask(Protocol):
    """What the checkpoint coordinator reads of its task: the chain's input watermark,
    whether it ran its end of input, its record counts, and its data path (the replay of
    restored in-flight records goes through it)."""

    watermark: int
    input_ended: bool

    def counts_by_operator(self) -> dict[str, list[int]]: ...

    def push_input(self, channel: int, records: Batch) -> None: ...


class SubtaskCheckpointCoordinator:
    """The checkpoint side of one task (see the module docstring)."""

    def __init__(self, task: CheckpointedTask, env: TaskEnvironment, vertex: Vertex,
                 subtask: int, name: str, mailbox: Mailbox, writers: Sequence[RecordOutput],
                 operators: list[Operator], channel_gates: dict[int, threading.Event]) -> None:
        self.task = task
        self.env = env
        self.vertex = vertex
        self.subtask = subtask
        self.name = name
        self.mailbox = mailbox
        self.writers = writers
        #: the task's chain (the task's own list: filled when the task opens)
        self.operators = operators
        self.channel_gates = channel_gates  # channel -> Event the reader waits on after a barrier
        self.handler = BarrierHandler(vertex.num_input_channels(), env.exactly_once)
        self.barriers: dict[int, CheckpointBarrier] = {}  # checkpoint -> its barrier here
        #: unaligned checkpoint -> its snapshot, waiting for its channel state to be captured
        self.unaligned: dict[int, tuple] = {}
        #: restored in-flight records to replay: (directory, handle, checkpoint time in ms)
        self.channel_state: tuple | None = None
        self.held: dict[int, list] = {}        # blocked channel -> items behind its barrier
        self.replay: collections.deque = collections.deque()  # released held items

    # -- restore --------------------------------------------------------------------------
    def replay_channel_state(self) -> None:
        """Restored from an unaligned checkpoint: the records that were in flight to this
        task go through its chain before any new input (they precede it), at the
        checkpoint's processing time (:func:`~...state.ttl.processing_time_at`: the restored
        state they add to must not expire over the downtime)."""
        if self.channel_state is None:
            return
        directory, handle, at_ms = self.channel_state
        self.channel_state = None
        data = read_verified(handle.location_in(directory), handle.size, handle.sha256)
        with processing_time_at(at_ms):
            for channel, kind, payload in cast(list, unpackb(data)):
                self.task.push_input(channel, decode_arrow(payload) if kind == "arrow"
                                     else unpack_records(payload))
        log.debug("Task %s replayed %d in-flight records", self.name, handle.records)

    # -- input events ---------------------------------------------------------------------
    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        self.barriers[barrier.checkpoint_id] = barrier
        self._apply(self.handler.on_barrier(channel, barrier.checkpoint_id), barrier)

    def on_unaligned_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        self.barriers[barrier.checkpoint_id] = barrier
        self._apply(self.handler.on_unaligned_barrier(channel, barrier.checkpoint_id), barrier)

    def on_cancel(self, channel: int, checkpoint_id: int) -> None:
        self._apply(self.handler.on_cancel(channel, checkpoint_id), None)

    def on_channel_closed(self, channel: int) -> None:
        self._apply(self.handler.on_channel_closed(channel), None)

    # -- barrier handler actions ----------------------------------------------------------
    def _apply(self, actions: list[AlignmentAction], barrier: CheckpointBarrier | None) -> None:
        for action in actions:
            match action:
                case Release(channels):
                    for ch in channels:
                        self.replay.extend(self.held.pop(ch, ()))
                        self.channel_gates[ch].set()
                case Block(ch):
                    # Hold back what this channel delivers after its barrier: items already
                    # in the mailbox are set aside, and the reader stops before its next
                    # item (so at most a mailbox's worth is held). Until the task reached the
                    # barrier, the reader kept reading: no stall between the barrier's
                    # arrival and its processing.
                    self.held.setdefault(ch, [])
                    self.channel_gates[ch].clear()
                case Snapshot(chk, alignment_ms):
                    # a closed input channel can complete the alignment too (its upstream's
                    # connection dropped): the barrier is then the one this task holds
                    held = self.barriers.get(chk, barrier)
                    self.checkpoint(cast(CheckpointBarrier, held), alignment_ms)
                case SnapshotUnaligned(chk, alignment_ms):
                    self.checkpoint(self.barriers[chk].as_unaligned(), alignment_ms,
                                    unaligned=True)
                case Captured(chk):
                    pending = self.unaligned.pop(chk, None)
                    captured = self.mailbox.finish_capture(chk)
                    if pending is not None and captured is not None:
                        args, timing, started = pending
                        # capture: from the snapshot to the last input's barrier
                        timing["capture_ms"] = round((time.perf_counter() - started) * 1000, 3)
                        self.env.upload_pool.submit(self._upload_and_ack, *args,
                                                    timing=timing, channel_items=captured)
                case DropCapture(chk, reason):
                    self.unaligned.pop(chk, None)
                    self.mailbox.end_unaligned(chk)
                    if reason is not None:
                        self._decline(chk, reason)
                case Cancel(chk, reason):
                    for w in self.writers:
                        w.emit_event(P.CANCEL, packb(chk))
                    if reason is not None:
                        self._decline(chk, reason)
                case _:
                    assert_never(action)

    # -- the coordinator's checkpoint messages --------------------------------------------
    def trigger(self, barrier: CheckpointBarrier) -> None:
        """A source task's trigger (the task ended its input first for a draining stop)."""
        self.checkpoint(barrier, 0.0)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: sinks commit what they pre-committed."""
        for op in self.operators:
            try:
                op.notify_complete(checkpoint_id)
            except Exception as exc:
                mark(exc, op.node, "commit")
                raise

    def unalign(self, checkpoint_id: int) -> None:
        """The aligned checkpoint ``checkpoint_id`` passed its alignment timeout."""
        self._apply(self.handler.on_unalign(checkpoint_id), self.barriers.get(checkpoint_id))

    def abort(self, checkpoint_id: int) -> None:
        """The coordinator aborted the checkpoint: alignment or capture ends, sinks abort."""
        self._apply(self.handler.on_abort(checkpoint_id), None)
        for op in self.operators:
            try:
                op.notify_abort(checkpoint_id)
            except Exception as exc:
                mark(exc, op.node, "abort")
                raise

    def _decline(self, chk: int, reason: str) -> None:
        self.env.send(M.Decline(vertex=self.vertex.id, subtask=self.subtask, checkpoint_id=chk,
                                reason=reason))

    # -- checkpoint -----------------------------------------------------------------------
    def checkpoint(self, barrier: CheckpointBarrier, alignment_ms: float, *,
                    unaligned: bool = False) -> None:
        """Steps 2-4 of the module docstring; the files go to ``barrier.location``. An
        unaligned checkpoint starts capturing the in-flight records here and acks once they
        are complete (the handler's ``captured`` action)."""
        chk, location = barrier.checkpoint_id, barrier.location
        self.barriers = {c: b for c, b in self.barriers.items() if c > chk}
        t0 = time.perf_counter()
        self.mailbox.snapshot()  # debloating: no measurement of the task is lowered by it
        # 2. synchronous part: capture every operator's state
        snapshots = []
        for op in self.operators:
            try:
                snapshots.append((op, op.snapshot(chk)))
            except Exception as exc:
                mark(exc, op.node, "snapshot")
                raise
        if unaligned:
            self.mailbox.start_capture(chk)
        sync_ms = (time.perf_counter() - t0) * 1000.0
        # 3. forward the barrier (held-back inputs were released by the handler's actions)
        payload = barrier.encode()
        for w in self.writers:
            w.emit_event(P.BARRIER, payload)
        # 4. asynchronous part: write files, then ack. Start delay: from the trigger to
        # this snapshot (Flink's "checkpoint start delay"), on the wall clock
        timing: dict = {
            "start_delay_ms": round(max(0.0, time.time() * 1000 - barrier.timestamp_ms), 3),
            # records in/out per operator up to this barrier, since the attempt started,
            # and the input watermark: throughput and lag between checkpoints (stability)
            "records": self.task.counts_by_operator()}
        if self.task.watermark != MIN_WATERMARK:
            timing["watermark"] = self.task.watermark
        if self.task.input_ended and not barrier.kind.is_savepoint:
            # recorded per subtask in _metadata: a restore does not run it again (FLIP-147).
            # Not in savepoints: a drained one (stop --drain) ends the input of a job that
            # is meant to go on reading when it is restored
            timing["finished"] = True
        lag = source_lag(self.operators)
        if lag:
            timing["source_lag"] = lag
        credit = self.mailbox.credit_per_channel
        if credit is not None and self.vertex.num_input_channels():
            # buffer debloating: what the barrier could wait behind, and its base
            timing.update(queued_records=self.mailbox.queued_rows, credit_records=credit,
                          throughput=round(self.mailbox.meter.rate or 0.0, 1))
        counters = operator_counters(self.operators)
        if counters:  # the operators' own counters up to this barrier (this attempt)
            timing["counters"] = counters
        args = (chk, location, snapshots, sync_ms, alignment_ms, barrier.kind.is_savepoint)
        if unaligned:
            self.unaligned[chk] = (args, timing, time.perf_counter())
        else:
            self.env.upload_pool.submit(self._upload_and_ack, *args, timing=timing)

    def _write_channel_state(self, chk_dir: str, items: list) -> dict:
        """The captured in-flight records of an unaligned checkpoint, as one state file."""
        # an Arrow batch as its IPC bytes (msgpack cannot take a pyarrow.Buffer)
        entries = [[channel, kind, encode_arrow(payload).to_pybytes() if kind == "arrow"
                    else payload] for channel, kind, payload, _ in items]
        handle, _, _ = write_state_file(chk_dir, f"channel-{self.vertex.id}-{self.subtask}",
                                        "inflight", packb(entries),
                                        {"records": sum(item[3] for item in items)})
        return handle

    def _upload_and_ack(self, chk: int, chk_dir: str, snapshots: list, sync_ms: float,
                        alignment_ms: float, full: bool, *, timing: dict,
                        channel_items: list | None = None) -> None:
        t0 = time.perf_counter()
        writing = None
        self.mailbox.snapshot(uploading=True)
        try:
            operators: dict[str, dict] = {}
            size = uploaded = 0
            channel = None
            holder = None
            if channel_items is not None:
                holder = channel_holder(self.vertex, snapshots)
                channel = self._write_channel_state(chk_dir, channel_items)
                if holder == self.vertex.auto_uid:  # a chain without any uid
                    operators[holder] = {"operator_state": [], "states": {}, "keyed": None,
                                         "channel_state": channel}
                    size += channel["size"]
                    uploaded += channel["size"]
            for op, snap in snapshots:
                if not op.uid or (snap is None and op.uid != holder):
                    continue
                writing = op  # a failure below declines naming this operator
                entry: dict = {"operator_state": snap.operator_state if snap else [],
                               "states": snap.states if snap else {}, "keyed": None}
                if op.keyed and snap is not None:
                    entry["key_group_range"] = op.backend.key_groups.to_list()
                    if snap.keyed is not None and snap.keyed.write is not None:
                        # state captured in the synchronous part, written here (off the task
                        # thread): a serialized file, or RocksDB's new SST files
                        handle, state_size, sent = snap.keyed.write(
                            chk_dir, f"{op.uid}-{self.subtask}", full)
                        entry["keyed"] = handle
                        size += state_size
                        uploaded += sent
                if channel is not None and op.uid == holder:
                    entry["channel_state"] = channel
                    size += channel["size"]
                    uploaded += channel["size"]
                operators[op.uid] = entry
            async_ms = (time.perf_counter() - t0) * 1000.0
            metrics = {"sync_ms": round(sync_ms, 3), "async_ms": round(async_ms, 3),
                       "alignment_ms": round(alignment_ms, 3), "state_size": size,
                       "checkpointed_size": uploaded, **timing}
            if channel is not None:
                metrics.update(unaligned=True, inflight_bytes=channel["size"],
                               inflight_records=channel["records"])
            self.env.send(M.Ack(
                vertex=self.vertex.id, subtask=self.subtask, checkpoint_id=chk,
                operators=operators, metrics=metrics))
        except Exception as exc:  # noqa: BLE001 - a failed upload declines the checkpoint
            where = (f" (operator {writing.node.name!r}, uid {writing.uid!r}, asynchronous "
                     "snapshot)" if writing is not None else "")
            log.warning("Task %s could not write checkpoint %d%s: %s", self.name, chk, where,
                        exc)
            try:
                self._decline(chk, f"{type(exc).__name__}: {exc}{where}")
            except OSError:
                pass
        finally:
            self.mailbox.snapshot(uploading=False)


def channel_holder(vertex, snapshots: list) -> str:
    """Where an unaligned checkpoint stores a task's in-flight records: with the chain's
    first operator that has a uid and state, else its first operator with a uid, else under
    the chain's derived id (:attr:`~..graph.Vertex.auto_uid`: a chain of stateless operators
    without uids, e.g. a ``map_batches`` between two exchanges)."""
    return next((op.uid for op, snap in snapshots if op.uid and snap is not None),
                next((op.uid for op, _ in snapshots if op.uid), vertex.auto_uid))


def source_lag(operators) -> dict:
    """``{operator uid: {"lag_bytes", "lag_seconds"}}`` of the source operators whose split
    readers measure how far behind their upstream they are (a CDC source's replication lag:
    the largest over the task's readers; ``None`` values: unknown, a reader is not connected),
    or ``{"lag_records", "partitions"}`` for a Kafka source (the sum over the task's
    partitions, and each one's offsets: :mod:`..connectors.kafka.lag`)."""
    out: dict = {}
    for op in operators:
        for reader in (getattr(op, "readers", None) or {}).values():
            measure = getattr(reader, "lag", None)
            if measure is None:
                continue
            lag = measure()
            if "partitions" in lag:  # a Kafka source: lag per partition (connectors.kafka.lag)
                mine = out.setdefault(op.uid, {"lag_records": 0, "partitions": {}})
                mine["partitions"].update(lag["partitions"])
                mine["lag_records"] = (None if mine["lag_records"] is None
                                       or lag["lag_records"] is None
                                       else mine["lag_records"] + lag["lag_records"])
                continue
            mine = out.setdefault(op.uid, {"lag_bytes": 0, "lag_seconds": 0.0})
            if lag["lag_bytes"] is None or mine["lag_bytes"] is None:  # not connected: unknown
                mine["lag_bytes"] = mine["lag_seconds"] = None
                continue
            mine["lag_bytes"] = max(mine["lag_bytes"], int(lag["lag_bytes"]))
            mine["lag_seconds"] = max(mine["lag_seconds"], float(lag["lag_seconds"]))
    return out


def operator_counters(operators) -> dict[str, dict[str, int]]:
    """``{operator uid: {counter: n}}`` of the operators that count events of their own
    (``metrics()``: a regular join's ``dropped_retractions`` and ``expired_rows``, an upsert
    materializer's ``dropped_retractions``), cumulative since the attempt started."""
    out = {}
    for op in operators:
        counters = op.metrics()
        if counters is not None:
            out[op.uid or op.node.name] = {k: int(v) for k, v in counters.items()}
    return out
