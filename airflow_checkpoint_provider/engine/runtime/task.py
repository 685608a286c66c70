"""The task loop: one thread per subtask, running a chain of operators.

A task takes items from its :class:`~.mailbox.Mailbox` (record batches and in-band events
from input channels, control messages from the coordinator), pushes records through its
operator chain and writes the results to its output channels.

Checkpoint at a task (Flink's "checkpoint on barrier"):

1. Barrier alignment decides the moment (see :mod:`.alignment`); sources decide it when
   the coordinator's trigger is taken from the mailbox, between two batches.
2. Synchronous part: every operator of the chain captures its state
   (:meth:`Operator.snapshot`): user ``snapshot_state`` hooks, keyed state serialized, sink
   transactions pre-committed.
3. The barrier is forwarded on every output channel, and held-back inputs are released.
4. Asynchronous part (on the slot's upload pool, off this thread): state files are written
   to checkpoint storage and the task acks with its handles and metrics.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from ..errors import BadRecordError, CorruptCheckpointError, DeterministicError, RestoreError
from ..eventtime import MAX_WATERMARK, MIN_WATERMARK
from ..functions import RuntimeContext
from ..graph import BROADCAST, FORWARD, HASH, REBALANCE, ExecutionGraph, Vertex
from ..protocol import BarrierKind, CheckpointBarrier
from ..protocol import frames as P
from ..protocol import messages as M
from ..serialization import pack_records, packb, unpack_records, unpackb
from ..snapshot.codec import read_verified
from ..snapshot.handles import keyed_handle_from_dict
from ..state.backend import write_state_file
from ..state.keygroups import key_group_for, key_group_range_for
from ..state.keys import expect_restored_key_type
from ..state.vectorized import channels_for, key_groups_of
from .alignment import BarrierHandler
from .batches import Batch, as_arrow, as_rows, decode_arrow, encode_arrow, split_by_channel
from .factory import create_operator
from .mailbox import Mailbox
from .operators import (
    Operator,
    ProcessOperator,
    SourceOperator,
)
from .watermarks import WatermarkValve
from .windowing import WindowAggregateOperator, WindowFunctionOperator

log = logging.getLogger(__name__)

METRICS_REPORT_SECONDS = 1.0
#: a vectorized operator takes up to this many batch sizes of queued input in one call
COALESCE_BATCHES = 4

# mailbox items that belong to one input channel (item[1] is the channel)
_CHANNEL_ITEMS = ("records", "barrier", "cancel", "eoi", "closed", "watermark")


class TaskEnvironment:
    """What every task of a slot shares."""

    def __init__(self, *, job_id: str, job_name: str, attempt: int, graph: ExecutionGraph,
                 job_dir: str, exactly_once: bool, batch_size: int,
                 arrow_batch_size: int | None = None,
                 send: callable, upload_pool: ThreadPoolExecutor,
                 source_splits: dict[str, list[str]] | None = None,
                 state_backend: dict | None = None) -> None:
        self.job_id = job_id
        self.job_name = job_name
        self.attempt = attempt
        self.graph = graph
        self.job_dir = job_dir
        self.exactly_once = exactly_once
        self.batch_size = batch_size
        #: rows per read once the source emits Arrow batches
        self.arrow_batch_size = arrow_batch_size or batch_size
        self.send = send
        self.upload_pool = upload_pool
        self.source_splits = source_splits or {}
        self.state_backend = state_backend or {"kind": "heap"}


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
            records, arrow = records.to_pylist(), False  # key_by(function): per-record keys
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
            parts = self._split_arrow(records, field, n) if arrow else self._split_rows(records, n)
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


def open_operator(node, ctx: RuntimeContext, key_groups, max_parallelism: int,
                  state_backend: dict | None, spec: dict | None, *,
                  splits: list[str] | None = None) -> Operator:
    """Create the operator of ``node`` and open it on its restored state ``spec`` (an entry
    of :func:`~..checkpoint.restore.assign_restore`, or ``None``): keyed state of the key
    groups in ``key_groups``, then operator state. ``splits``: a source's split list."""
    op = create_operator(node, ctx, key_groups, max_parallelism, state_backend)
    if isinstance(op, SourceOperator):
        op.splits = splits
    # decoded (and validated) again here: the spec's handles came from a _metadata file
    handles = [keyed_handle_from_dict(h, location=spec["directory"])
               for h in (spec or {}).get("keyed") or []]
    kinds = {h.type for h in handles}
    if spec and ("arrow" in kinds) != op.columnar and handles:
        raise RestoreError(
            f"operator {node.uid!r}: the snapshot holds "
            f"{'aggregate()' if 'arrow' in kinds else 'process()/reduce()'} state, but "
            f"the operator with this uid is now a {node.kind}(); give it a new uid "
            "and restore with allow_non_restored_state=True")
    if spec and op.keyed:  # the backend keeps exactly the key groups it owns
        op.backend.restore_state(spec["directory"], handles, spec["states"])
        expect_restored_key_type(op, spec["directory"])  # a restore keeps the key type
    try:
        op.open(spec.get("operator_state") if spec else None)
    except CorruptCheckpointError as exc:
        if not spec:
            raise
        raise CorruptCheckpointError(
            f"{exc} (operator {node.uid!r}, restored from {spec['directory']})") from exc
    return op


class StreamTask:
    def __init__(self, env: TaskEnvironment, vertex: Vertex, subtask: int, restore: dict | None,
                 mailbox: Mailbox, writers: list[RecordWriter],
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
        self.main_writers = [w for w in writers if w.side is None]
        self.side_writers = [w for w in writers if w.side == "late"]
        self.channel_gates = channel_gates  # channel -> Event the reader waits on after a barrier
        self.handler = BarrierHandler(vertex.num_input_channels(), env.exactly_once)
        self.valve = WatermarkValve(vertex.num_input_channels())
        self.watermark = MIN_WATERMARK          # the chain's input watermark
        self.operators: list[Operator] = []
        self.counts: list[list[int]] = [[0, 0] for _ in vertex.nodes]  # records in/out per operator
        self._last_report = time.monotonic()
        self.finished = False
        self.exhausted = False                  # sources: every split read (or drained)
        self.suspended_for: int | None = None   # sources: stopped by stop-with-savepoint N
        self._barriers: dict[int, CheckpointBarrier] = {}  # checkpoint -> its barrier here
        #: unaligned checkpoint -> its snapshot, waiting for its channel state to be captured
        self._unaligned: dict[int, tuple] = {}
        self._channel_state: tuple | None = None  # restored in-flight records to replay
        self._held: dict[int, list] = {}        # blocked channel -> items behind its barrier
        self._replay: collections.deque = collections.deque()  # released held items
        self.opened = threading.Event()         # set once open() returned or failed
        self.open_failed = False
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
                self._source_loop()
            else:
                self._replay_channel_state()
                self._input_loop()
            self._close()
            self.env.send(M.TaskFinished(vertex=self.vertex.id, subtask=self.subtask))
        except Exception as exc:  # noqa: BLE001 - every task failure is reported
            log.warning("Task %s failed: %s", self.name, exc)
            try:
                # A snapshot that cannot be restored, bad input: restarting cannot help.
                fatal = isinstance(exc, RestoreError | CorruptCheckpointError
                                   | DeterministicError)
                self.env.send(M.TaskFailed(vertex=self.vertex.id, subtask=self.subtask,
                                           error=f"{type(exc).__name__}: {exc}",
                                           traceback=traceback.format_exc(), fatal=fatal))
            except OSError:
                pass

    def _open(self) -> None:
        g, v = self.env.graph, self.vertex
        kg_range = key_group_range_for(self.subtask, v.parallelism, g.max_parallelism)
        for node in v.nodes:
            ctx = RuntimeContext(job_id=self.env.job_id, job_name=self.env.job_name,
                                 operator_uid=node.uid or node.name, subtask_index=self.subtask,
                                 parallelism=v.parallelism, attempt=self.env.attempt)
            spec = self.restore.get(node.uid) if node.uid else None
            if spec and spec.get("channel_state") is not None:
                self._channel_state = (spec["directory"], spec["channel_state"])
            self.operators.append(open_operator(node, ctx, kg_range, g.max_parallelism,
                                                self.env.state_backend, spec,
                                                splits=self.env.source_splits.get(node.uid)))
        self._timer_ops = [i for i, op in enumerate(self.operators)
                           if isinstance(op, ProcessOperator)]
        if self.side_writers:  # a side output starts a new chain: its window is the last op
            self.operators[-1].collect_late = True

    def _replay_channel_state(self) -> None:
        """Restored from an unaligned checkpoint: the records that were in flight to this
        task go through its chain before any new input (they precede it)."""
        if self._channel_state is None:
            return
        directory, handle = self._channel_state
        self._channel_state = None
        data = read_verified(handle.location_in(directory), handle.size, handle.sha256)
        for _channel, kind, payload in unpackb(data):
            self._push(decode_arrow(payload) if kind == "arrow" else unpackb(payload))
        log.debug("Task %s replayed %d in-flight records", self.name, handle.records)

    def _close(self) -> None:
        for op in self.operators:
            op.close()
        for w in self.writers:
            for ch in w.channels:
                ch.close()

    # -- data path ------------------------------------------------------------------------
    def _push(self, records: Batch, start: int = 0) -> None:
        counts = self.counts
        for i in range(start, len(self.operators)):
            if not len(records):
                break
            c = counts[i]
            c[0] += len(records)
            op = self.operators[i]
            # Arrow stays Arrow into vectorized operators; per-record operators get dicts.
            records = op.process(as_arrow(records) if op.vectorized else as_rows(records))
            c[1] += len(records)
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
                  if isinstance(op, WindowAggregateOperator | WindowFunctionOperator)} or None))

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
            for out in self.operators[i].on_watermark(watermark):
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
            nxt = op.next_processing_timer()
            if nxt is not None and nxt <= now_ms:
                for out in op.on_processing_time(now_ms):
                    self._push(out, i + 1)
                nxt = op.next_processing_timer()
            if nxt is not None:
                wait = min(wait, max(0.0, (nxt - now_ms) / 1000.0))
        return wait

    def _end_input(self, start: int = 0) -> None:
        # end of input is the largest watermark: every event-time timer and window fires
        self._advance_watermark(MAX_WATERMARK, start)
        for i in range(start, len(self.operators)):
            out = self.operators[i].end_input()
            if out:
                self._push(out, i + 1)
        for w in self.writers:
            w.emit_event(P.END_OF_INPUT)
        self.env.send(M.EndOfInput(vertex=self.vertex.id, subtask=self.subtask))
        log.debug("Task %s reached end of input", self.name)

    def _source_loop(self) -> None:
        source: SourceOperator = self.operators[0]  # type: ignore[assignment]
        batch_size = self.env.batch_size
        while not self.finished:
            if self.exhausted or self.suspended_for is not None:
                item = self.mailbox.take(0.5, control_only=True)
                if item is not None:
                    self._control(item)
                continue
            item = self.mailbox.poll_control()
            if item is not None:
                self._control(item)
                continue
            batch = source.read_batch(batch_size)
            if isinstance(batch, pa.RecordBatch):
                batch_size = self.env.arrow_batch_size  # Arrow: bigger batches from now on
            if batch is None:
                self.exhausted = True
                self._end_input(1)
                continue
            if batch:
                self.counts[0][1] += len(batch)
                self._push(batch, 1)
            else:
                item = self.mailbox.take(0.005, control_only=True)
                if item is not None:
                    self._control(item)
            self._on_watermark_status(source.poll_watermark(), 1)

    def _input_loop(self) -> None:
        channels = self.vertex.num_input_channels()
        ended: set[int] = set()
        while not self.finished:
            # items of a channel released after alignment first: they precede anything of
            # that channel still in the mailbox
            wait = self._fire_processing_timers()
            if self.handler.capturing:
                # An unaligned checkpoint waits for its other inputs' barriers: they come as
                # control items, and the inputs read ahead to them. Processing records now
                # could block this thread on a full output and hold those barriers back.
                item = self.mailbox.take(wait, control_only=True)
            else:
                item = self._replay.popleft() if self._replay else self.mailbox.take(wait)
            if item is None:
                continue
            kind = item[0]
            if kind in _CHANNEL_ITEMS and item[1] in self._held:
                self._held[item[1]].append(item)  # behind a barrier: wait for alignment
                continue
            if kind == "records":
                self._push(self._with_queued(item[2]) if not self._replay else item[2])
            elif kind == "barrier":
                _, channel, barrier = item
                self._barriers[barrier.checkpoint_id] = barrier
                self._apply(self.handler.on_barrier(channel, barrier.checkpoint_id), barrier)
            elif kind == "ubarrier":
                _, channel, barrier = item
                self._barriers[barrier.checkpoint_id] = barrier
                self._apply(self.handler.on_unaligned_barrier(channel, barrier.checkpoint_id),
                            barrier)
            elif kind == "cancel":
                self._apply(self.handler.on_cancel(item[1], item[2]), None)
            elif kind == "watermark":
                watermark, idle = item[2]
                self._on_watermark_status(self.valve.on_watermark(item[1], watermark, idle), 0)
            elif kind == "eoi":
                ended.add(item[1])
                if len(ended) == channels:
                    self._end_input(0)
                else:
                    self._on_watermark_status(self.valve.on_end(item[1]), 0)
            elif kind == "closed":
                self._apply(self.handler.on_channel_closed(item[1]), None)
            else:
                self._control(item)

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
        schema, held, rows = records.schema, self._held, [len(records)]

        def accept(item) -> bool:
            batch = item[2] if item[0] == "records" else None
            if (not isinstance(batch, pa.RecordBatch) or item[1] in held
                    or not batch.schema.equals(schema)
                    or rows[0] + len(batch) > cap):
                return False
            rows[0] += len(batch)
            return True

        more = self.mailbox.take_following(accept, limit=64)
        if not more:
            return records
        table = pa.Table.from_batches([records, *(m[2] for m in more)])
        if getattr(self.operators[0], "accepts_table", False):
            return table  # folded chunk by chunk: no copy into one batch
        return table.combine_chunks().to_batches()[0]

    def _apply(self, actions: list, barrier: CheckpointBarrier | None) -> None:
        for action in actions:
            if action[0] == "release":
                for ch in action[1]:
                    self._replay.extend(self._held.pop(ch, ()))
                    self.channel_gates[ch].set()
            elif action[0] == "block":
                # Hold back what this channel delivers after its barrier: items already in
                # the mailbox are set aside, and the reader stops before its next item (so
                # at most a mailbox's worth is held). Until the task reached the barrier,
                # the reader kept reading: no stall between the barrier's arrival and its
                # processing.
                ch = action[1]
                self._held.setdefault(ch, [])
                self.channel_gates[ch].clear()
            elif action[0] == "checkpoint":
                self._checkpoint(barrier, action[2])
            elif action[0] == "unaligned":
                self._checkpoint(self._barriers[action[1]].as_unaligned(), action[2],
                                 unaligned=True)
            elif action[0] == "captured":
                chk = action[1]
                pending = self._unaligned.pop(chk, None)
                captured = self.mailbox.finish_capture(chk)
                if pending is not None and captured is not None:
                    args, timing, started = pending
                    # capture: from the snapshot to the last input's barrier
                    timing["capture_ms"] = round((time.perf_counter() - started) * 1000, 3)
                    self.env.upload_pool.submit(self._upload_and_ack, *args, timing=timing,
                                                channel_items=captured)
            elif action[0] == "drop_capture":
                _, chk, reason = action
                self._unaligned.pop(chk, None)
                self.mailbox.end_unaligned(chk)
                if reason is not None:
                    self._decline(chk, reason)
            elif action[0] == "cancel":
                _, chk, reason = action
                for w in self.writers:
                    w.emit_event(P.CANCEL, packb(chk))
                if reason is not None:
                    self._decline(chk, reason)

    # -- control --------------------------------------------------------------------------
    def _control(self, item) -> None:
        kind = item[0]
        if kind == "trigger":
            barrier: CheckpointBarrier = item[1]
            if barrier.kind == BarrierKind.SAVEPOINT_DRAIN and not self.exhausted:
                self.exhausted = True       # drain: end the input first, then the savepoint
                self._end_input(1)
            self._checkpoint(barrier, 0.0)
            if barrier.kind == BarrierKind.SAVEPOINT_STOP:
                self.suspended_for = barrier.checkpoint_id  # emit nothing after it
        elif kind == "notify":
            for op in self.operators:
                op.notify_complete(item[1])
        elif kind == "unalign":
            barrier = self._barriers.get(item[1])
            self._apply(self.handler.on_unalign(item[1]), barrier)
        elif kind == "abort":
            self._apply(self.handler.on_abort(item[1]), None)
            if self.suspended_for == item[1]:
                self.suspended_for = None   # the stop savepoint failed: keep running
            for op in self.operators:
                op.notify_abort(item[1])
        elif kind == "finish":
            self.finished = True

    def _decline(self, chk: int, reason: str) -> None:
        self.env.send(M.Decline(vertex=self.vertex.id, subtask=self.subtask, checkpoint_id=chk,
                                reason=reason))

    # -- checkpoint -----------------------------------------------------------------------
    def _checkpoint(self, barrier: CheckpointBarrier, alignment_ms: float, *,
                    unaligned: bool = False) -> None:
        """Steps 2-4 of the module docstring; the files go to ``barrier.location``. An
        unaligned checkpoint starts capturing the in-flight records here and acks once they
        are complete (the handler's ``captured`` action)."""
        chk, location = barrier.checkpoint_id, barrier.location
        self._barriers = {c: b for c, b in self._barriers.items() if c > chk}
        t0 = time.perf_counter()
        # 2. synchronous part: capture every operator's state
        snapshots = [(op, op.snapshot(chk)) for op in self.operators]
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
            "records": self.counts_by_operator()}
        if self.watermark != MIN_WATERMARK:
            timing["watermark"] = self.watermark
        args = (chk, location, snapshots, sync_ms, alignment_ms, barrier.kind.is_savepoint)
        if unaligned:
            self._unaligned[chk] = (args, timing, time.perf_counter())
        else:
            self.env.upload_pool.submit(self._upload_and_ack, *args, timing=timing)

    def _write_channel_state(self, chk_dir: str, items: list) -> dict:
        """The captured in-flight records of an unaligned checkpoint, as one state file."""
        entries = [[channel, kind, encode_arrow(payload) if kind == "arrow" else payload]
                   for channel, kind, payload, _ in items]
        handle, _, _ = write_state_file(chk_dir, f"channel-{self.vertex.id}-{self.subtask}",
                                        "inflight", packb(entries),
                                        {"records": sum(item[3] for item in items)})
        return handle

    def _upload_and_ack(self, chk: int, chk_dir: str, snapshots: list, sync_ms: float,
                        alignment_ms: float, full: bool, *, timing: dict,
                        channel_items: list | None = None) -> None:
        t0 = time.perf_counter()
        try:
            operators = {}
            size = uploaded = 0
            channel = None
            if channel_items is not None:
                holder = next((op.uid for op, snap in snapshots if op.uid and snap is not None),
                              None)
                if holder is None:
                    raise ValueError(
                        f"an unaligned checkpoint needs a uid on one operator of the chain "
                        f"{self.vertex.name!r} (its in-flight records are stored with it)")
                channel = self._write_channel_state(chk_dir, channel_items)
            for op, snap in snapshots:
                if snap is None or not op.uid:
                    continue
                entry: dict = {"operator_state": snap.operator_state, "states": snap.states,
                               "keyed": None}
                if op.keyed:
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
            log.warning("Task %s could not write checkpoint %d: %s", self.name, chk, exc)
            try:
                self._decline(chk, f"{type(exc).__name__}: {exc}")
            except OSError:
                pass
