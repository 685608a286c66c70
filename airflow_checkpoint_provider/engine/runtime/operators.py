"""Operators: what a task runs for each node of its chain."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable
from typing import Any, cast

import pyarrow as pa

from ..changelog import OP_FIELD
from ..connectors.base import SourceContext
from ..errors import CorruptCheckpointError, RestoreError
from ..eventtime import WatermarkStrategy
from ..functions import CheckpointedFunction, FunctionStateContext, RuntimeContext
from ..graph import Node
from ..state.backend import KeyedStateBackend, PerKeyStateBackend, StateSnapshot
from ..state.columnar import AggregateSpec, AggregateTable
from ..state.heap import HeapKeyedStateBackend
from ..state.keygroups import KeyGroupRange, key_group_for
from ..state.keys import KeyContract
from ..state.operator_state import OperatorStateStore
from ..state.vectorized import key_groups_of
from ..timers import EVENT_TIME, PROCESSING_TIME, TimerService
from .batches import Batch, to_record_batch
from .changelog_agg import changelog_update
from .watermarks import SourceWatermarks, Status


class OperatorSnapshot:
    """The synchronous part of one operator's snapshot."""

    __slots__ = ("states", "operator_state", "keyed")

    def __init__(self, *, states=None, operator_state=None,
                 keyed: StateSnapshot | None = None):
        self.states: dict[str, dict] = states or {}
        self.operator_state: list = operator_state or []
        #: the keyed state backend's snapshot; its ``write`` is the asynchronous part
        self.keyed = keyed


class Operator:
    """One node of a task's chain. ``process`` takes a batch and returns a batch: a list of
    dicts, or a ``pyarrow.RecordBatch`` when ``vectorized`` (the task converts between them
    at the entry of each operator, see :meth:`StreamTask._push`)."""

    keyed = False
    vectorized = False
    #: the keyed state is columnar (``arrow`` snapshot files): aggregate() and windows
    columnar = False

    def __init__(self, node: Node, ctx: RuntimeContext) -> None:
        self.node = node
        self.uid = node.uid
        self.ctx = ctx

    def open(self, restored_operator_state: list | None) -> None:
        pass

    def process(self, records: list[dict]) -> list[dict]:
        return records

    def end_input(self) -> list[dict]:
        return []

    def on_watermark(self, watermark: int) -> list[Batch]:
        """The operator's input watermark advanced to ``watermark``: return what it emits
        (fired timers and windows) before the watermark goes downstream."""
        return []

    def take_late(self):
        """The late records collected since the last call (windows with a late-data side
        output), or None."""
        return None

    def next_processing_timer(self) -> int | None:
        """Epoch ms of the earliest processing-time timer, if any."""
        return None

    def on_processing_time(self, now_ms: int) -> list[Batch]:
        """Fire processing-time timers due at ``now_ms``."""
        return []

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot | None:
        return None

    def notify_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_abort(self, checkpoint_id: int) -> None:
        pass

    def close(self) -> None:
        pass


class _FunctionOperator(Operator):
    """An operator running one user function; a :class:`CheckpointedFunction` gets its
    operator state here."""

    def open(self, restored_operator_state):
        fn = self.node.payload
        self.fn_state: FunctionStateContext | None = None
        if isinstance(fn, CheckpointedFunction):
            store = OperatorStateStore(self.uid or self.node.name, self.ctx.subtask_index,
                                       self.ctx.parallelism, restored_operator_state)
            self.fn_state = FunctionStateContext(self.ctx, store)
            fn.initialize_state(self.fn_state)

    def snapshot(self, checkpoint_id):
        if self.fn_state is None:
            return None
        self.node.payload.snapshot_state(checkpoint_id, self.fn_state)
        return OperatorSnapshot(operator_state=self.fn_state.state.snapshot())


class MapOperator(_FunctionOperator):
    def process(self, records):
        fn = self.node.payload
        return [fn(r) for r in records]


class FlatMapOperator(_FunctionOperator):
    def process(self, records):
        fn = self.node.payload
        out: list = []
        for r in records:
            res = fn(r)
            if res:
                out.extend(res)
        return out


class FilterOperator(_FunctionOperator):
    def process(self, records):
        fn = self.node.payload
        return [r for r in records if fn(r)]


class MapBatchesOperator(_FunctionOperator):
    vectorized = True

    def process(self, records: pa.RecordBatch) -> pa.RecordBatch:
        fn: Any = self.node.payload
        return to_record_batch(fn(records),
                               f"map_batches function {self.node.name!r}")


def _emitted(result: Iterable[dict] | None, out: list) -> None:
    if result is None:
        return
    if isinstance(result, dict):
        out.append(result)
    else:
        out.extend(result)


class _KeyedStateOperator(Operator):
    """An operator whose state lives in a keyed state backend (``self.backend``)."""

    keyed = True
    backend: KeyedStateBackend

    def snapshot(self, checkpoint_id):
        snap = self.backend.snapshot_state(checkpoint_id)
        return OperatorSnapshot(states=snap.states, keyed=snap)

    def notify_complete(self, checkpoint_id):
        self.backend.notify_complete(checkpoint_id)

    def close(self):
        self.backend.close()


class KeyedOperator(_KeyedStateOperator):

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int, state_backend: dict | None = None) -> None:
        super().__init__(node, ctx)
        backend = (state_backend or {}).get("kind", "heap")
        self.backend: PerKeyStateBackend
        uid = cast(str, node.uid)  # the API requires a uid on keyed operators
        if backend == "rocksdb":
            from ..extras import require

            require("rocksdb")
            from ..state.rocksdb import RocksDBKeyedStateBackend

            self.backend = RocksDBKeyedStateBackend(
                uid, key_groups, max_parallelism,
                incremental=(state_backend or {}).get("incremental", True))
        else:
            self.backend = HeapKeyedStateBackend(uid, key_groups, max_parallelism)
        ctx._backend = self.backend
        self.selector = node.key_selector
        self.keys = KeyContract(node.uid or node.name)  # one key contract for both backends



class ProcessOperator(KeyedOperator):
    @property
    def fn(self) -> Any:
        """The user's function (a two-input operator keeps it in its spec)."""
        return self.node.payload

    def open(self, restored_operator_state):
        self.timers = TimerService(self.backend)
        self.timers.rebuild()
        self.ctx._timers = self.timers
        self.fn.open(self.ctx)

    def process(self, records):
        return self._run(records, self.selector, self.fn.process_element, self.node.timestamp)

    def _run(self, records, sel, process, stamp):
        """``process(record, ctx)`` per record with its key (from ``sel``) in scope and
        ``ctx.timestamp`` its event time (from ``stamp``, if any)."""
        backend, ctx, check = self.backend, self.ctx, self.keys.check
        out: list = []
        # every key of the batch checked, then hashed to its key group in one vectorized
        # pass (str or int keys; else key by key)
        keys = [check(sel(r)) for r in records]
        groups = key_groups_of(keys, self.backend.max_parallelism)
        if groups is None:
            groups = [key_group_for(k, self.backend.max_parallelism) for k in keys]
        set_key, append = backend.set_current_key_in_group, out.append
        if stamp is None:
            for r, key, group in zip(records, keys, groups, strict=True):
                set_key(key, group)
                result = process(r, ctx)
                if type(result) is dict:
                    append(result)
                elif result is not None:
                    _emitted(result, out)
        else:
            uid = self.uid or self.node.name
            for r, key, group in zip(records, keys, groups, strict=True):
                set_key(key, group)
                ctx.timestamp = stamp.of_record(r, uid)
                _emitted(process(r, ctx), out)
            ctx.timestamp = None
        return out

    def _fire(self, domain: str, until: int) -> list[dict]:
        fn = self.fn
        ctx = self.ctx
        out: list[dict] = []
        ctx.time_domain = domain
        try:
            for ts in self.timers.due(domain, until):
                ctx.timestamp = ts
                _emitted(fn.on_timer(ts, ctx), out)
        finally:
            ctx.timestamp = ctx.time_domain = None
        return out

    def on_watermark(self, watermark):
        self.timers.watermark = watermark
        out = self._fire(EVENT_TIME, watermark)
        return [out] if out else []

    def next_processing_timer(self):
        return self.timers.next_processing_time()

    def on_processing_time(self, now_ms):
        out = self._fire(PROCESSING_TIME, now_ms)
        return [out] if out else []

    def end_input(self):
        out: list = []
        _emitted(self.fn.end_input(self.ctx), out)
        return out

    def snapshot(self, checkpoint_id):
        self.fn.snapshot_state(checkpoint_id)
        return super().snapshot(checkpoint_id)

    def notify_complete(self, checkpoint_id):
        self.fn.notify_checkpoint_complete(checkpoint_id)
        super().notify_complete(checkpoint_id)

    def close(self):
        try:
            self.fn.close()
        finally:
            super().close()


class ReduceOperator(KeyedOperator):
    def open(self, restored_operator_state):
        self.state = self.ctx.value_state("reduce")

    def process(self, records):
        fn, backend, sel, state = self.node.payload, self.backend, self.selector, self.state
        check = self.keys.check
        out: list = []
        for r in records:
            backend.set_current_key(check(sel(r)))
            prev = state.value()
            new = r if prev is None else fn(prev, r)
            state.update(new)
            out.append(new)
        return out


class AggregateOperator(_KeyedStateOperator):
    """Built-in keyed aggregations over Arrow batches (``KeyedStream.aggregate``).

    Each batch is grouped by key in Arrow's C++ hash aggregation, the partial results are
    folded into columnar per-key accumulators (:mod:`..state.columnar`), and the operator
    emits one row per key touched by the batch with that key's running results (Structured
    Streaming's "update" output mode). No Python code runs per record or per key.

    The state is columnar in memory with either state backend; a snapshot copies the
    columns (synchronous part) and writes one Arrow IPC file per subtask (asynchronous).
    """

    vectorized = True
    columnar = True
    #: queued input batches may come as one ``pyarrow.Table`` (see StreamTask._with_queued)
    accepts_table = True

    backend: AggregateTable

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.spec: AggregateSpec = cast(AggregateSpec, node.payload)
        # the API requires a uid on aggregate()
        self.backend = AggregateTable(self.spec, key_groups, max_parallelism, cast(str, node.uid))

    def open(self, restored_operator_state):
        # Warm up (lazy imports, Arrow's hash-aggregation kernels) before the task reports
        # RUNNING, so the first checkpoint does not wait behind a cold operator.
        AggregateTable(self.spec, self.backend.key_groups, self.backend.max_parallelism,
                       self.uid).warm_up()

    def process(self, records: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        if self.spec.emit is None and OP_FIELD not in records.schema.names:
            return self.backend.update(records)
        return changelog_update(self.backend, records, self.spec.emit)



#: the union list state of a source's split positions
SPLITS_STATE = "splits"
#: continuous sources: the modification time at or below which every split was read
FLOOR_STATE = "discovered_floor"


def _split_entries(uid: str | None, entries: list) -> list[dict]:
    """Restored split entries ``{split, position, finished, max_timestamp?}`` (untrusted
    input: from a ``_metadata`` file)."""
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("split"), str):
            raise CorruptCheckpointError(
                f"source {uid!r}: split entry {e!r:.200} in the snapshot is malformed")
    return entries


def _restored_timestamp(entry: dict, uid: str | None) -> int | None:
    """A split's largest timestamp from a snapshot (untrusted input)."""
    ts = entry.get("max_timestamp")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
        raise CorruptCheckpointError(
            f"source {uid!r}: split {entry.get('split')!r} has max_timestamp {ts!r} in the "
            "snapshot, not an integer")
    return ts


class SourceOperator(Operator):
    """Reads the splits assigned to this subtask (split j runs on subtask j % parallelism).

    ``splits`` is the job's split list, taken once by the job master so every subtask and
    every attempt sees the same list.
    """

    splits: list[str] | None = None

    def open(self, restored_operator_state):
        src = self.node.payload
        # Split positions are union list state (Flink's legacy sources keep theirs the same
        # way): every subtask gets every old subtask's splits and picks its own, so a
        # restore at any parallelism finds each split's position.
        self.state = OperatorStateStore(self.uid or self.node.name, self.ctx.subtask_index,
                                        self.ctx.parallelism, restored_operator_state)
        self.split_state = self.state.get_union_list_state(SPLITS_STATE)
        restored = _split_entries(self.uid, [
            *self.split_state.get(),
            # snapshots before the operator-state API held bare split entries
            *(e for e in restored_operator_state or [] if isinstance(e, dict) and "split" in e)])
        positions = {e["split"]: e.get("position") for e in restored}
        self.finished_splits: set[str] = {e["split"] for e in restored if e.get("finished")}
        sctx = SourceContext(self.ctx.job_id, self.ctx.job_name, self.uid,
                             self.ctx.subtask_index, self.ctx.parallelism, self.ctx.attempt)
        self.sctx = sctx
        # A continuous source (monitor_interval set) discovers splits while it runs: each
        # subtask lists the source and takes the new splits it owns by hash; finished ones
        # older than the source's retention are folded into a modification-time floor.
        self.monitor_interval: float | None = getattr(src, "monitor_interval", None)
        self.floor_state = self.state.get_union_list_state(FLOOR_STATE)
        self.floor = max((f for f in self.floor_state.get() if isinstance(f, int | float)),
                         default=float("-inf"))
        self._next_discovery = time.monotonic() + (self.monitor_interval or 0.0)
        splits = list(self.splits if self.splits is not None else src.splits())
        if self.monitor_interval is not None:  # every split ever seen counts as offered
            splits += sorted(self.finished_splits - set(splits))
            # and so does a split discovered after the job's split list was taken and not
            # finished at the checkpoint, if the source still offers it: it resumes at its
            # recorded position
            unfinished = set(positions) - set(splits)
            if unfinished:
                splits += sorted(unfinished & set(src.splits()))
        vanished = sorted(set(positions) - set(splits) - self.finished_splits)
        if vanished:
            raise RestoreError(
                f"source {self.uid!r}: split(s) {', '.join(vanished)} recorded in the restored "
                "snapshot are no longer offered by the source (a file was removed?)"
            )
        self.assigned = [s for j, s in enumerate(splits) if self._owns(s, j)]
        self.readers = {}
        self.positions = {}
        self._checkpointed: list[tuple[int, dict]] = []  # (checkpoint id, split positions)
        for s in self.assigned:
            self.positions[s] = positions.get(s)
            if s not in self.finished_splits:
                self.readers[s] = src.open_split(s, positions.get(s), sctx)
        self._order = [s for s in self.assigned if s in self.readers]
        self._next = 0
        strategy = self.node.watermarks
        self.watermarks: SourceWatermarks | None = None
        if strategy is not None:
            self.watermarks = SourceWatermarks(
                strategy, self._order,
                {e["split"]: _restored_timestamp(e, self.uid) for e in restored},
                time.monotonic())

    def _owns(self, split: str, index: int) -> bool:
        """Bounded sources: split j runs on subtask j % parallelism. Continuous ones: by a
        hash of the split id, so a split discovered later has the same owner everywhere."""
        n = self.ctx.parallelism
        if self.monitor_interval is None:
            return index % n == self.ctx.subtask_index
        return zlib.crc32(split.encode()) % n == self.ctx.subtask_index

    def _discover(self) -> None:
        src: Any = self.node.payload
        known = set(self.positions)
        for split in src.splits():
            if split in known or not self._owns(split, -1):
                continue
            if src.modified_time(split) <= self.floor:
                continue  # older than the retained seen-set: read before
            self.assigned.append(split)
            self.positions[split] = None
            self.readers[split] = src.open_split(split, None, self.sctx)
            self._order.append(split)
            if self.watermarks is not None:
                self.watermarks.add_split(split, time.monotonic())

    def read_batch(self, max_records: int) -> list[dict] | None:
        """Round-robin over the splits; ``None`` when every split is exhausted (never for a
        continuous source, which looks for new splits every ``monitor_interval``)."""
        if self.monitor_interval is not None:
            now = time.monotonic()
            if now >= self._next_discovery:
                self._next_discovery = now + self.monitor_interval
                self._discover()
            if not self._order:
                return []
        for _ in range(len(self._order)):
            split = self._order[self._next % len(self._order)]
            self._next += 1
            batch = self.readers[split].read_batch(max_records)
            if batch is None:
                self.positions[split] = self.readers[split].position()
                self.readers.pop(split).close()
                self.finished_splits.add(split)
                self._order.remove(split)
                if self.watermarks is not None:
                    self.watermarks.on_split_finished(split)
                return [] if self._order or self.monitor_interval is not None else None
            self.positions[split] = self.readers[split].position()
            if batch:
                if self.watermarks is not None:
                    self._observe(split, batch)
                return batch
        return None if not self._order and self.monitor_interval is None else []

    def _observe(self, split: str, batch: Batch) -> None:
        # only called when the source has a watermark strategy (and so self.watermarks)
        stamp = cast(WatermarkStrategy, self.node.watermarks).timestamp
        uid = self.uid or self.node.name
        ts = (stamp.of_batch(batch, uid) if isinstance(batch, pa.RecordBatch)
              else stamp.of_rows(batch, uid))
        cast(SourceWatermarks, self.watermarks).on_records(split, int(ts.max()), time.monotonic())

    def poll_watermark(self, *, force: bool = False) -> Status | None:
        """The watermark (or idle status) to send downstream now, if any."""
        if self.watermarks is None:
            return None
        return self.watermarks.poll(time.monotonic(), force=force)

    def snapshot(self, checkpoint_id):
        self._compact()
        wm = self.watermarks
        self.split_state.update([
            {"split": s, "position": self.positions.get(s), "finished": s in self.finished_splits,
             **({"max_timestamp": wm.state(s)} if wm is not None else {})}
            for s in self.assigned])
        self._checkpointed.append((checkpoint_id, {s: self.positions.get(s) for s in self.readers}))
        return OperatorSnapshot(operator_state=self.state.snapshot())

    def notify_complete(self, checkpoint_id):
        """Hand each open reader the position checkpoint ``checkpoint_id`` (or the newest one
        before it this subtask took) holds for its split: readers that acknowledge upstream
        (a replication slot) do it only for what a completed checkpoint covers."""
        done: dict = {}
        for c, positions in self._checkpointed:
            if c <= checkpoint_id:
                done.update(positions)
        self._checkpointed = [(c, p) for c, p in self._checkpointed if c > checkpoint_id]
        for split, position in done.items():
            if split in self.readers:
                self.readers[split].notify_checkpoint_complete(checkpoint_id, position)

    def notify_abort(self, checkpoint_id):
        self._checkpointed = [(c, p) for c, p in self._checkpointed if c != checkpoint_id]

    def _compact(self) -> None:
        """Continuous sources: finished splits modified longer ago than the source's
        ``retain_seconds`` leave the state; the floor (their newest modification time)
        stands for them, so the seen-set stays bounded."""
        retain = getattr(self.node.payload, "retain_seconds", None)
        if self.monitor_interval is None or retain is None:
            return
        horizon = time.time() - retain
        src: Any = self.node.payload
        old = set()
        for split in self.finished_splits & set(self.assigned):
            try:
                mtime = src.modified_time(split)
            except FileNotFoundError:
                old.add(split)  # removed after it was read
                continue
            if mtime < horizon:
                old.add(split)
                self.floor = max(self.floor, mtime)
        if old:
            self.assigned = [s for s in self.assigned if s not in old]
            self.finished_splits -= old
            for split in old:
                self.positions.pop(split, None)
        self.floor_state.update([] if self.floor == float("-inf") else [self.floor])

    def close(self):
        for r in self.readers.values():
            r.close()


class SinkOperator(Operator):
    """Two-phase commit: pre-commit at the barrier, commit on notify-complete.

    Fenced (the job runs with ``fence_sinks``, a blue-green validation run): transactions are
    pre-committed as usual but never committed; the snapshot records a ``fenced`` marker
    instead of them, so no restore can publish them and an unfenced job refuses to restore
    the snapshot (its source positions are past output that was never published). The job
    master discards what the fenced job staged when it ends."""

    def open(self, restored_operator_state):
        sctx = SourceContext(self.ctx.job_id, self.ctx.job_name, self.uid,
                             self.ctx.subtask_index, self.ctx.parallelism, self.ctx.attempt)
        self.fenced = bool(getattr(self.ctx, "fence_sinks", False))
        entries = list(restored_operator_state or [])
        if not self.fenced and any(isinstance(e, dict) and e.get("fenced") for e in entries):
            raise RestoreError(
                f"sink {self.uid!r}: the snapshot was taken by a job with fenced sinks (a "
                "blue-green validation run); its output was never published, so restoring it "
                "unfenced would lose records. Restore the blue job's savepoint instead")
        self.writer = self.node.payload.create_writer(sctx)
        self.vectorized = bool(getattr(self.writer, "accepts_arrow", False))
        restored = [t for e in entries for t in e["transactions"]]
        self.writer.recover(restored)
        self.pending: list[tuple[int, list]] = []

    def process(self, records):
        if records:
            self.writer.write(records)
        return []

    def snapshot(self, checkpoint_id):
        txns = self.writer.pre_commit(checkpoint_id)
        if self.fenced:  # held: staged, never named in a snapshot, never committed
            return OperatorSnapshot(operator_state=[
                {"checkpoint_id": checkpoint_id, "transactions": [], "fenced": True}])
        if txns:
            self.pending.append((checkpoint_id, list(txns)))
        state = [{"checkpoint_id": c, "transactions": t} for c, t in self.pending]
        return OperatorSnapshot(operator_state=state)

    def notify_complete(self, checkpoint_id):
        if self.fenced:
            return
        ready = [t for c, ts in self.pending if c <= checkpoint_id for t in ts]
        if ready:
            self.writer.commit(ready)
        self.pending = [(c, ts) for c, ts in self.pending if c > checkpoint_id]

    def notify_abort(self, checkpoint_id):
        txns = [t for c, ts in self.pending if c == checkpoint_id for t in ts]
        abort = getattr(self.writer, "abort", None)  # writers that predate it keep theirs
        if txns and abort is not None and abort(txns):  # undone, records carried into the open epoch
            self.pending = [(c, ts) for c, ts in self.pending if c != checkpoint_id]

    def close(self):
        self.writer.close()
