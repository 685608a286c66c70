"""The task loop: one thread per subtask, running a chain of operators.

A task takes items from its :class:`~.mailbox.Mailbox` (record batches and in-band events
from input channels, control messages from the coordinator), pushes records through its
operator chain and writes the results to its output channels (:mod:`.channels`).

This module holds the task's lifecycle, its input loops (mailbox dispatch) and its data
and event-time paths; the checkpoint side (barrier alignment, snapshot, upload and ack) is a
collaborator the task holds, ``task.checkpointing``: a
:class:`~.checkpointing.SubtaskCheckpointCoordinator`, whose docstring lists the steps of a
checkpoint at a task.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Sequence
from typing import assert_never, cast

import pyarrow as pa

from ...errors import CorruptCheckpointError, DeterministicError, RestoreError
from ...eventtime import MAX_WATERMARK, MIN_WATERMARK
from ...plan.functions import RuntimeContext
from ...plan.graph import Vertex
from ...protocol import BarrierKind
from ...protocol import frames as P
from ...protocol import messages as M
from ...state.keygroups import key_group_range_for
from ..batches import Batch, as_arrow, as_rows
from ..operators.base import (
    Operator,
    ProcessOperator,
)
from ..operators.edges import SourceOperator
from ..operators.registry import open_operator
from ..operators.watermarks import WatermarkValve
from ..operators.windowing import WindowAggregateOperator, WindowFunctionOperator
from .checkpointing import SubtaskCheckpointCoordinator, operator_counters
from .debloat import INITIAL_BATCH_CREDIT, SourceReadSize
from .environment import TaskEnvironment
from .failure_place import FailurePlace, describe_node, mark, place_of
from .mailbox import (
    AbortCheckpoint,
    ControlItem,
    Finish,
    ItemKind,
    Mailbox,
    NotifyComplete,
    TriggerCheckpoint,
    Unalign,
)
from .outputs import RecordOutput

__all__ = ["StreamTask"]

log = logging.getLogger(__name__)

METRICS_REPORT_SECONDS = 1.0
#: a vectorized operator takes up to this many batch sizes of queued input in one call
COALESCE_BATCHES = 4



class StreamTask:
    def __init__(self, env: TaskEnvironment, vertex: Vertex, subtask: int, restore: dict | None,
                 mailbox: Mailbox, writers: Sequence[RecordOutput],
                 channel_gates: dict[int, threading.Event],
                 start_gate: threading.Event | None = None) -> None:
        self.env = env
        # every task of the slot opened: a source pushing data while a task of the same
        # process still opens would starve it of the GIL
        self.start_gate = start_gate
        self.vertex = vertex
        self.subtask = subtask
        self.name = f"{vertex.name} ({subtask + 1}/{vertex.parallelism})"
        self.restore = restore or {}
        self.mailbox = mailbox
        self.writers = writers
        self._read_size = SourceReadSize(writers)  # a source's reads (debloat.py)
        self.main_writers = [w for w in writers if w.side is None]
        self.side_writers = [w for w in writers if w.side == "late"]
        self.channel_gates = channel_gates  # channel -> Event the reader waits on after a barrier
        self.valve = WatermarkValve(vertex.num_input_channels())
        self.watermark = MIN_WATERMARK          # the chain's input watermark
        self.operators: list[Operator] = []
        #: set by _open: the operators with processing-time timers (by index) ...
        self._timer_ops: list[int] = []
        #: ... and, when a two-input operator heads the chain, the input (1 or 2) of each
        #: input channel (``None``: one input)
        self._input_of: list[int | None] | None = None
        self.counts: list[list[int]] = [[0, 0] for _ in vertex.nodes]  # records in/out per operator
        self._last_report = time.monotonic()
        self.finished = False
        self.exhausted = False                  # sources: every split read (or drained)
        #: the chain ran its end of input (checkpoints say so: a restore skips it, FLIP-147)
        self.input_ended = False
        #: restored from a snapshot where this task had already ended its input
        self.restored_finished = False
        self.suspended_for: int | None = None   # sources: stopped by stop-with-savepoint N
        #: the checkpoint side: alignment, snapshot, upload and ack (checkpointing.py)
        self.checkpointing = SubtaskCheckpointCoordinator(
            self, env, vertex, subtask, self.name, mailbox, writers, self.operators,
            channel_gates)
        self._coalesced: list = []              # items _with_queued folded into a batch
        self.opened = threading.Event()         # set once open() returned or failed
        self.open_failed = False
        #: the task's phase where no finer place is marked on an exception (failure_place.py)
        self.phase = "open"
        self.thread = threading.Thread(target=self._run, name=f"task-{vertex.id}-{subtask}",
                                       daemon=True)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            try:
                self._open()
            except BaseException:
                self.open_failed = True
                raise
            finally:
                self.opened.set()
            if self.start_gate is not None:
                self.start_gate.wait()
            if self.vertex.is_source:
                self.phase = "processing"
                self._source_loop()
            else:
                if self.operators[0].vectorized:  # Arrow batches: no 128-record start
                    self.mailbox.start_batched(INITIAL_BATCH_CREDIT)
                restoring = self.checkpointing.channel_state is not None
                self.phase = "restore" if restoring else "processing"
                self.checkpointing.replay_channel_state()
                self.phase = "processing"
                self._input_loop()
            self.phase = "close"
            self._close()
            self.env.send(M.TaskFinished(vertex=self.vertex.id, subtask=self.subtask))
        except Exception as exc:  # noqa: BLE001 - every task failure is reported
            place = self.failure_place(exc)
            log.warning("Task %s failed in phase %s of %s (uid %r): %s: %s", self.name,
                        place.phase, place.operator, place.uid, type(exc).__name__, exc)
            tb = traceback.format_exc()
            # before reporting: the slot may be stopped right after, and a restart on a
            # reused process must not meet this attempt's connections (a CDC reader's slot)
            self._close_after_failure()
            try:
                # A snapshot that cannot be restored, bad input: restarting cannot help.
                fatal = isinstance(exc, RestoreError | CorruptCheckpointError
                                   | DeterministicError)
                self.env.send(M.TaskFailed(vertex=self.vertex.id, subtask=self.subtask,
                                           error=f"{type(exc).__name__}: {exc}",
                                           traceback=tb, fatal=fatal,
                                           operator=place.operator, uid=place.uid,
                                           phase=place.phase,
                                           parallelism=self.vertex.parallelism))
            except OSError:
                pass

    def failure_place(self, exc: BaseException) -> FailurePlace:
        """Where ``exc`` was raised: the operator and phase marked on it, else the task's
        phase and its chain (one operator: that one)."""
        place = place_of(exc)
        if place is not None:
            return place
        nodes = self.vertex.nodes
        if len(nodes) == 1:
            return FailurePlace(describe_node(nodes[0]), nodes[0].uid or "", self.phase)
        return FailurePlace(f"chain {self.vertex.name!r}",
                            ",".join(n.uid or n.name for n in nodes), self.phase)

    def _open(self) -> None:
        g, v = self.env.graph, self.vertex
        kg_range = key_group_range_for(self.subtask, v.parallelism, g.max_parallelism)
        for node in v.nodes:
            ctx = RuntimeContext(job_id=self.env.job_id, job_name=self.env.job_name,
                                 operator_uid=node.uid or node.name, subtask_index=self.subtask,
                                 parallelism=v.parallelism, attempt=self.env.attempt,
                                 fence_sinks=self.env.fence_sinks)
            spec = self.restore.get(node.uid) if node.uid else None
            if spec and spec.get("finished"):
                self.restored_finished = True
            if spec and spec.get("channel_state") is not None:
                self.checkpointing.channel_state = (spec["directory"], spec["channel_state"],
                                       spec.get("timestamp_ms"))
            try:
                self.operators.append(open_operator(node, ctx, kg_range, g.max_parallelism,
                                                    self.env.state_backend, spec,
                                                    # a node without a uid is no source
                                                    splits=self.env.source_splits.get(
                                                        node.uid)))  # type: ignore[arg-type]
            except Exception as exc:
                mark(exc, node, "restore" if spec else "open")
                raise
        chain = self.restore.get(v.auto_uid)  # a stateless chain's in-flight records
        if chain and chain.get("channel_state") is not None:
            self.checkpointing.channel_state = (chain["directory"], chain["channel_state"],
                                   chain.get("timestamp_ms"))
        # the operators with processing-time timers (a regular join's state TTL too)
        self._timer_ops = [i for i, op in enumerate(self.operators)
                           if isinstance(op, ProcessOperator)
                           or type(op).next_processing_timer is not Operator.next_processing_timer]
        #: a two-input operator heads the chain: the input (1 or 2) of each input channel
        self._input_of = (v.input_of_channels()
                          if self.operators[0].two_input else None)
        if self.side_writers:  # a side output starts a new chain: its window is the last op
            cast(WindowAggregateOperator | WindowFunctionOperator,
                 self.operators[-1]).collect_late = True

    def _close_after_failure(self) -> None:
        """Close every opened operator of a failed task (split readers, sink writers): an
        error from one close is logged and the others still close; the task's failure stays
        the original error."""
        for op in self.operators:
            try:
                op.close()
            except Exception:  # noqa: BLE001 - the original failure is what gets reported
                log.warning("Task %s: closing %s after its failure failed too", self.name,
                            op.uid or op.node.name, exc_info=True)

    def _close(self) -> None:
        for op in self.operators:
            try:
                op.close()
            except Exception as exc:
                mark(exc, op.node, "close")
                raise
        for w in self.writers:
            for ch in w.channels:
                ch.close()

    # -- data path ------------------------------------------------------------------------
    def _push(self, records: Batch, start: int = 0) -> None:
        counts, i = self.counts, start
        try:
            for i in range(start, len(self.operators)):
                if not len(records):
                    break
                c = counts[i]
                c[0] += len(records)
                op = self.operators[i]
                # Arrow stays Arrow into vectorized operators; per-record ones get dicts, and
                # so do the vectorized ones that take them as they are (a discarding sink)
                records = op.process(
                    records if op.takes_rows and type(records) is list
                    else as_arrow(records) if op.vectorized else as_rows(records))
                c[1] += len(records)
        except Exception as exc:
            mark(exc, self.operators[i].node, "processing")
            raise
        if len(records):
            for w in self.main_writers:
                w.emit(records)
        if self.side_writers:
            late = self.operators[-1].take_late()
            if late is not None and len(late):
                for w in self.side_writers:
                    w.emit(late)
        now = time.monotonic()
        if now - self._last_report >= METRICS_REPORT_SECONDS:
            self.report_counts(now)

    def push_input(self, channel: int, records: Batch) -> None:
        """Records from input channel ``channel`` into the chain: a two-input operator at
        its head learns which of its inputs they came from."""
        if self._input_of is None:
            self._push(records)
            return
        op, c = self.operators[0], self.counts[0]
        c[0] += len(records)
        try:
            out = op.process_input(  # type: ignore[attr-defined]
                self._input_of[channel], as_arrow(records) if op.vectorized else as_rows(records))
        except Exception as exc:
            mark(exc, op.node, "processing")
            raise
        c[1] += len(out)
        self._push(out, 1)

    def counts_by_operator(self) -> dict[str, list[int]]:
        """Records in/out per operator of the chain since the attempt started."""
        return {op.uid or op.node.name: list(c)
                for op, c in zip(self.operators, self.counts, strict=True)}

    def report_counts(self, now: float) -> None:
        """Send cumulative records in/out per operator (this attempt) to the job master."""
        self._last_report = now
        self.env.send(M.TaskMetrics(
            vertex=self.vertex.id, subtask=self.subtask,
            counts=self.counts_by_operator(),
            watermark=None if self.watermark == MIN_WATERMARK else self.watermark,
            late={op.uid: op.dropped_late for op in self.operators
                  if hasattr(op, "dropped_late")} or None,
            counters=operator_counters(self.operators) or None))

    # -- event time -----------------------------------------------------------------------
    def _on_watermark_status(self, status, start: int) -> None:
        """Act on what the valve (or the source) says: a new watermark goes through the
        chain from operator ``start`` (timers and windows fire, their output goes first),
        then downstream; an idle status only goes downstream."""
        if status is None:
            return
        watermark, idle = status
        if idle:
            for w in self.writers:
                w.emit_event(P.WATERMARK, P.encode_watermark(watermark, True))
            return
        self._advance_watermark(watermark, start)

    def _advance_watermark(self, watermark: int, start: int) -> None:
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        for i in range(start, len(self.operators)):
            try:
                fired = self.operators[i].on_watermark(watermark)
            except Exception as exc:
                mark(exc, self.operators[i].node, "timer")
                raise
            for out in fired:
                self._push(out, i + 1)
        payload = P.encode_watermark(watermark, False)
        for w in self.writers:
            w.emit_event(P.WATERMARK, payload)

    def _fire_processing_timers(self) -> float:
        """Fire due processing-time timers; return seconds until the next one (or 0.5)."""
        wait = 0.5
        if not self._timer_ops:
            return wait
        now_ms = int(time.time() * 1000)
        for i in self._timer_ops:
            op = self.operators[i]
            try:
                nxt = op.next_processing_timer()
                fired = op.on_processing_time(now_ms) if nxt is not None and nxt <= now_ms else None
            except Exception as exc:
                mark(exc, op.node, "timer")
                raise
            if fired is not None:
                for out in fired:
                    self._push(out, i + 1)
                nxt = op.next_processing_timer()
            if nxt is not None:
                wait = min(wait, max(0.0, (nxt - now_ms) / 1000.0))
        return wait

    def _end_input(self, start: int = 0) -> None:
        self.input_ended = True
        if self.restored_finished:
            # FLIP-147: the snapshot this task restored was taken after its end of input:
            # what that emitted is in the snapshot (and the sinks' transactions) already
            log.info("Task %s was restored finished: its end of input is not run again",
                     self.name)
            for w in self.writers:
                w.emit_event(P.END_OF_INPUT)
            self.env.send(M.EndOfInput(vertex=self.vertex.id, subtask=self.subtask))
            return
        # end of input is the largest watermark: every event-time timer and window fires
        self._advance_watermark(MAX_WATERMARK, start)
        for i in range(start, len(self.operators)):
            try:
                out = self.operators[i].end_input()
            except Exception as exc:
                mark(exc, self.operators[i].node, "end_input")
                raise
            if out:
                self._push(out, i + 1)
        for w in self.writers:
            w.emit_event(P.END_OF_INPUT)
        self.env.send(M.EndOfInput(vertex=self.vertex.id, subtask=self.subtask))
        log.debug("Task %s reached end of input", self.name)

    def _source_loop(self) -> None:
        source: SourceOperator = self.operators[0]  # type: ignore[assignment]
        batch_size = self.env.batch_size
        if self.restored_finished:  # it read everything before the snapshot: not again
            self.exhausted = True
            self._end_input(1)
        while not self.finished:
            # a source has no input channels: its mailbox holds control items only
            if self.exhausted or self.suspended_for is not None:
                item = self.mailbox.take(0.5, control_only=True)
                if item is not None:
                    self._control(cast(ControlItem, item))
                continue
            item = self.mailbox.poll_control()
            if item is not None:
                self._control(cast(ControlItem, item))
                continue
            room = self._output_room(batch_size)
            if room <= 0:  # no credit downstream: wait a little, then look at the mailbox
                for w in self.writers:
                    if not w.available(0.01):
                        break
                continue
            try:
                batch = source.read_batch(room)
            except Exception as exc:
                mark(exc, source.node, "processing")
                raise
            if isinstance(batch, pa.RecordBatch):
                batch_size = self.env.arrow_batch_size  # Arrow: bigger batches from now on
            if batch is None:
                self.exhausted = True
                self._end_input(1)
                continue
            if batch:
                self.counts[0][1] += len(batch)
                self._push(batch, 1)
                self._read_size.read(len(batch))
            else:
                item = self.mailbox.take(0.005, control_only=True)
                if item is not None:
                    self._control(cast(ControlItem, item))
            self._on_watermark_status(source.poll_watermark(), 1)

    def _output_room(self, batch_size: int) -> int:
        """Records a source reads now: its batch size, or what its outputs' credit allows
        (buffer debloating: a source slows down instead of filling buffers), counted in the
        source's records (:class:`.debloat.SourceReadSize`)."""
        return self._read_size.room(batch_size)

    def _input_loop(self) -> None:
        channels = self.vertex.num_input_channels()
        ended: set[int] = set()
        while not self.finished:
            # items of a channel released after alignment first: they precede anything of
            # that channel still in the mailbox
            wait = self._fire_processing_timers()
            if self.checkpointing.handler.capturing:
                # An unaligned checkpoint waits for its other inputs' barriers: they come as
                # control items, and the inputs read ahead to them. Processing records now
                # could block this thread on a full output and hold those barriers back.
                item = self.mailbox.take(wait, control_only=True)
            else:
                replay = self.checkpointing.replay
                item = replay.popleft() if replay else self.mailbox.take(wait)
            if item is None:
                continue
            held = self.checkpointing.held
            # a channel item is a (kind, channel, payload) tuple, indexed: the hot path
            # (mailbox.ChannelItem says why it is not a dataclass)
            if (type(item) is tuple and item[1] in held
                    and item[0] != ItemKind.UNALIGNED_BARRIER):
                held[item[1]].append(item)  # behind a barrier: wait for alignment
                continue
            match item:
                case (ItemKind.RECORDS, _, _):
                    self._on_records(item)
                case (ItemKind.BARRIER, channel, barrier):
                    self.checkpointing.on_barrier(channel, barrier)
                case (ItemKind.UNALIGNED_BARRIER, channel, barrier):
                    self.checkpointing.on_unaligned_barrier(channel, barrier)
                case (ItemKind.CANCEL, channel, checkpoint_id):
                    self.checkpointing.on_cancel(channel, checkpoint_id)
                case (ItemKind.WATERMARK, channel, (watermark, idle)):
                    self._on_watermark_status(self.valve.on_watermark(channel, watermark, idle),
                                              0)
                case (ItemKind.END_OF_INPUT, channel, _):
                    ended.add(channel)
                    if len(ended) == channels:
                        self._end_input(0)
                    else:
                        self._on_watermark_status(self.valve.on_end(channel), 0)
                case (ItemKind.CLOSED, channel, _):
                    self.checkpointing.on_channel_closed(channel)
                case _:
                    self._control(cast(ControlItem, item))

    def _control(self, item: ControlItem) -> None:
        """A control item of the coordinator: checkpoint messages go to the checkpointing
        collaborator; what they change of the task's loop (a draining stop ends the input
        first, a stop savepoint suspends a source, ``finish`` ends the loop) happens here."""
        match item:
            case TriggerCheckpoint(barrier):
                if barrier.kind == BarrierKind.SAVEPOINT_DRAIN and not self.exhausted:
                    self.exhausted = True       # drain: end the input first, then the savepoint
                    self._end_input(1)
                self.checkpointing.trigger(barrier)
                if barrier.kind == BarrierKind.SAVEPOINT_STOP:
                    self.suspended_for = barrier.checkpoint_id  # emit nothing after it
            case NotifyComplete(checkpoint_id):
                self.checkpointing.notify_complete(checkpoint_id)
            case Unalign(checkpoint_id):
                self.checkpointing.unalign(checkpoint_id)
            case AbortCheckpoint(checkpoint_id):
                if self.suspended_for == checkpoint_id:
                    self.suspended_for = None   # the stop savepoint failed: keep running
                self.checkpointing.abort(checkpoint_id)
            case Finish():
                self.finished = True
            case _:
                assert_never(item)

    def _on_records(self, item: tuple) -> None:
        """A records item of an input channel through the chain; then its credit goes back
        to the channel's sender (buffer debloating, :mod:`.debloat`)."""
        step = self.mailbox.credit_step(len(item[2]))
        replaying = bool(self.checkpointing.replay)
        if step and not replaying and not self.operators[0].vectorized:
            # a slow per-record consumer returns credit as it goes, not once per item: its
            # sender (a source that must emit a batch before it takes a trigger) is held
            # for at most a step of processing (debloat.py)
            channel, records = item[1], item[2]
            for start in range(0, len(records), step):
                part = records[start:start + step]
                self.push_input(channel, part)
                self.mailbox.consumed(channel, len(part))
            return
        if self._input_of is not None:
            self.push_input(item[1], item[2])
        elif replaying:
            self._push(item[2])
        else:
            self._push(self._with_queued(item[2]))
            for more in self._coalesced:  # folded into the batch: processed too
                self.mailbox.consumed(more[1], len(more[2]))
            self._coalesced = []
        self.mailbox.consumed(item[1], len(item[2]))

    def _with_queued(self, records: Batch) -> Batch:
        """An Arrow batch for a vectorized operator, together with the Arrow batches queued
        right behind it (any channel not held for alignment, up to 4 x ``arrow_batch_size``
        rows): one call instead of many when the input outruns the operator, so its per-batch cost is
        paid once; nothing waits for more input, so an idle job adds no latency. Only a
        prefix of the queue is taken, never past a barrier or another event."""
        cap = COALESCE_BATCHES * self.env.arrow_batch_size
        if (not isinstance(records, pa.RecordBatch) or not self.operators[0].vectorized
                or len(records) >= cap):
            return records
        schema, held, rows = records.schema, self.checkpointing.held, [len(records)]

        def accept(item) -> bool:
            batch = item[2] if item[0] == ItemKind.RECORDS else None
            if (not isinstance(batch, pa.RecordBatch) or item[1] in held
                    or not batch.schema.equals(schema)
                    or rows[0] + len(batch) > cap):
                return False
            rows[0] += len(batch)
            return True

        more = self.mailbox.take_following(accept, limit=64)
        if not more:
            return records
        self._coalesced = more
        table = pa.Table.from_batches([records, *(m[2] for m in more)])
        if self.operators[0].accepts_table:
            return table  # folded chunk by chunk: no copy into one batch
        return table.combine_chunks().to_batches()[0]
