"""Operators: what a task runs for each node of its chain."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import pyarrow as pa

from ...changelog import OP_FIELD
from ...plan.functions import CheckpointedFunction, FunctionStateContext, RuntimeContext
from ...plan.graph import Node
from ...state.backend import KeyedStateBackend, PerKeyStateBackend, StateSnapshot
from ...state.columnar import AggregateSpec, AggregateTable
from ...state.heap import HeapKeyedStateBackend
from ...state.key_hashing import key_groups_for
from ...state.keygroups import KeyGroupRange
from ...state.keys import KeyContract
from ...state.operator_state import OperatorStateStore
from ..batches import Batch, to_record_batch
from .changelog_agg import changelog_update
from .timers import EVENT_TIME, PROCESSING_TIME, TimerService


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
    #: a vectorized operator that also takes a list of dicts as it is (no conversion to
    #: Arrow): a sink whose writer accepts both
    takes_rows = False
    #: the keyed state is columnar (``arrow`` snapshot files): aggregate() and windows
    columnar = False
    #: it has two inputs (``process_input(input, records)``): joins and connect()
    two_input = False
    #: a vectorized operator that takes a ``pyarrow.Table`` of queued batches as it is
    accepts_table = False

    def __init__(self, node: Node, ctx: RuntimeContext) -> None:
        self.node = node
        self.uid = node.uid
        self.ctx = ctx

    def metrics(self) -> dict[str, int] | None:
        """Counters of its own events since the attempt started (a regular join's
        ``dropped_retractions`` and ``expired_rows``, ...); ``None``: it counts none."""
        return None

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
            from ...extras import require

            require("rocksdb")
            from ...state.rocksdb import RocksDBKeyedStateBackend

            self.backend = RocksDBKeyedStateBackend(
                uid, key_groups, max_parallelism,
                incremental=(state_backend or {}).get("incremental", True))
        else:
            self.backend = HeapKeyedStateBackend(
                uid, key_groups, max_parallelism,
                incremental=(state_backend or {}).get("heap_incremental", False))
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
        groups = key_groups_for(keys, self.backend.max_parallelism)
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
