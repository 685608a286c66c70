"""Window operators: event-time windows per key.

* :class:`WindowAggregateOperator` (``window(...).aggregate(...)``): vectorized, columnar
  state (:mod:`..state.columnar.windows`).
* :class:`WindowFunctionOperator` (``window(...).reduce(fn)`` / ``.process(fn)``): a Python
  function per record or per window; each key's open windows are map state
  (``window-contents``: window start -> reduced record, or the window's records) and each
  window's end is an event-time timer of the key, so both live in the keyed state backend
  (heap or RocksDB), in every checkpoint, and move with their key group on rescale.

Both fire a window when the watermark reaches ``end - 1``, keep it ``allowed_lateness``
longer (a late record updates it and its new result is emitted at once), and drop and count
records later than that.
"""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa

from ...errors import CorruptCheckpointError
from ...eventtime import MIN_WATERMARK, SessionWindows
from ...plan.functions import ProcessWindowFunction, RuntimeContext, Window
from ...plan.graph import Node
from ...state.backend import PerKeyStateBackend
from ...state.columnar import AggregateTable
from ...state.columnar.windows import WindowAggregateTable, WindowFunctionSpec, WindowSpec
from ...state.keygroups import KeyGroupRange
from .base import KeyedOperator, _emitted, _KeyedStateOperator
from .timers import EVENT_TIME, TimerService


def restored_watermark(entries: list | None, key_groups: KeyGroupRange, uid: str | None) -> int:
    """The lowest watermark of the snapshot's subtasks that held any of ``key_groups``
    (all of them after a rescale that mixes key groups; its own at the same parallelism)."""
    marks = []
    for e in entries or []:
        wm, kg = e.get("watermark"), e.get("key_groups")
        if (not isinstance(wm, int) or isinstance(wm, bool) or not isinstance(kg, list)
                or len(kg) != 2 or not all(isinstance(k, int) for k in kg)):
            raise CorruptCheckpointError(
                f"operator {uid!r}: window watermark state {e!r:.200} is malformed")
        if len(key_groups.intersect(KeyGroupRange(*kg))):
            marks.append(wm)
    return min(marks) if marks else MIN_WATERMARK


class _CheckpointedWatermark:
    """The input watermark of a window operator, kept in its operator state. Without it a
    restored window would start at no watermark, and records replayed after the checkpoint
    that were late before the failure would open windows that had already fired."""

    watermark = MIN_WATERMARK
    #: a WindowAggregateTable or a PerKeyStateBackend: the operators below say which
    backend: Any
    uid: str | None

    def _restore_watermark(self, entries: list | None) -> None:
        self.watermark = restored_watermark(entries, self.backend.key_groups, self.uid)

    def _advance(self, watermark: int) -> int:
        """The watermark never goes back (a restored one may be ahead of the first new one)."""
        self.watermark = max(self.watermark, watermark)
        return self.watermark

    def snapshot(self, checkpoint_id):
        snap = super().snapshot(checkpoint_id)  # type: ignore[misc]
        snap.operator_state = [{"watermark": self.watermark,
                                "key_groups": self.backend.key_groups.to_list()}]
        return snap


class WindowAggregateOperator(_CheckpointedWatermark, _KeyedStateOperator):
    """``key_by(field).window(assigner).aggregate(...)``: built-in aggregations per key and
    event-time window, vectorized like :class:`AggregateOperator`; a window's rows are
    emitted when the watermark passes its end (:mod:`..state.columnar.windows`)."""

    vectorized = True
    columnar = True
    backend: WindowAggregateTable

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        # the API requires a uid on window(...).aggregate()
        self.backend = WindowAggregateTable(cast(WindowSpec, node.payload), key_groups,
                                            max_parallelism, cast(str, node.uid))

    def open(self, restored_operator_state):
        self._restore_watermark(restored_operator_state)
        AggregateTable(self.backend.spec.aggregate, self.backend.key_groups,
                       self.backend.max_parallelism, self.uid).warm_up()

    def process(self, records: pa.RecordBatch):
        late = self.backend.update(records, self.watermark)
        return _one_batch(late)

    def on_watermark(self, watermark):
        return self.backend.fire(self._advance(watermark))

    @property
    def dropped_late(self) -> int:
        return self.backend.dropped_late

    @property
    def collect_late(self) -> bool:
        return self.backend.collect_late

    @collect_late.setter
    def collect_late(self, value: bool) -> None:
        self.backend.collect_late = value

    def take_late(self):
        late, self.backend.late = self.backend.late, []
        return _one_batch(late) if late else None


def _one_batch(batches: list[pa.RecordBatch]) -> pa.RecordBatch | list:
    if not batches:
        return []
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(
        [b.cast(batches[0].schema) for b in batches]).combine_chunks().to_batches()[0]


class WindowFunctionOperator(_CheckpointedWatermark, KeyedOperator):
    """``window(...).reduce(fn)`` or ``window(...).process(ProcessWindowFunction)``."""

    collect_late = False
    backend: PerKeyStateBackend

    def open(self, restored_operator_state):
        self.spec: WindowFunctionSpec = self.node.payload
        self.contents = self.ctx.map_state("window-contents")
        self.merging = isinstance(self.spec.assigner, SessionWindows)
        self.timers = TimerService(self.backend)
        self.timers.rebuild()
        self._restore_watermark(restored_operator_state)
        self.timers.watermark = self.watermark
        self.dropped_late = 0
        self.late: list[dict] = []
        if isinstance(self.spec.fn, ProcessWindowFunction):
            self.spec.fn.open(self.ctx)

    def process(self, records):
        spec, backend, sel, check = self.spec, self.backend, self.selector, self.keys.check
        size, lateness, uid = spec.assigner.size, spec.allowed_lateness_ms, self.uid
        reduce = spec.mode == "reduce"
        out: list = []
        for r in records:
            backend.set_current_key(check(sel(r)))
            ts = spec.timestamp.of_record(r, uid)
            if self.merging:
                self._process_session(r, ts, out)
                continue
            starts = [s for s in spec.assigner.starts(ts) if s + size - 1 + lateness > self.watermark]
            if not starts:
                self._late(r)
            for start in starts:
                last = start + size - 1
                acc = self.contents.get(start)
                if reduce:
                    acc = r if acc is None else spec.fn(acc, r)
                else:
                    acc = [*(acc or ()), r]
                self.contents.put(start, acc)
                if last <= self.watermark:       # fired already: the new result at once
                    out.extend(self._result(start, acc))
                else:
                    self.timers.register_event_time_timer(last)
                if lateness:
                    self.timers.register_event_time_timer(last + lateness)
        return out

    def _late(self, record: dict) -> None:
        if self.collect_late:
            self.late.append(record)
        else:
            self.dropped_late += 1

    def take_late(self):
        late, self.late = self.late, []
        return late or None

    # -- session windows: contents are start -> [end, accumulated] ---------------------------
    def _process_session(self, r: dict, ts: int, out: list) -> None:
        spec, lateness = self.spec, self.spec.allowed_lateness_ms
        start, end = ts, ts + cast(SessionWindows, spec.assigner).gap
        if end - 1 + lateness <= self.watermark:
            self._late(r)
            return
        acc = r if spec.mode == "reduce" else [r]
        merged = []
        for s, (e, other) in self.contents.items():
            if s < end and start < e:  # overlapping sessions merge into one
                self.contents.remove(s)
                merged.append(e)
                start, end = min(start, s), max(end, e)
                acc = spec.fn(other, acc) if spec.mode == "reduce" else [*other, *acc]
        if merged:
            self._cancel_timers(merged)
        self.contents.put(start, [end, acc])
        if end - 1 <= self.watermark:            # fired already: the new result at once
            out.extend(self._result(start, acc, end))
        else:
            self.timers.register_event_time_timer(end - 1)
        if lateness:
            self.timers.register_event_time_timer(end - 1 + lateness)

    def _cancel_timers(self, ends: list[int]) -> None:
        """Delete the timers of merged-away sessions, except those another session of the
        key still needs (a fire time may equal another session's clean-up time)."""
        lateness = self.spec.allowed_lateness_ms

        def times(end: int) -> set[int]:
            return {end - 1, end - 1 + lateness}

        needed = set().union(*(times(e) for e, _ in (v for _, v in self.contents.items())))
        for ts in set().union(*(times(e) for e in ends)) - needed:
            self.timers.delete_event_time_timer(ts)

    def _result(self, start: int, acc, end: int | None = None) -> list[dict]:
        window = Window(start, end if end is not None else start + self.spec.assigner.size)
        if self.spec.mode == "reduce":
            return [{**acc, "window_start": window.start, "window_end": window.end}]
        out: list = []
        _emitted(self.spec.fn.process(self.backend.current_key, window, acc, self.ctx), out)
        return out

    def on_watermark(self, watermark):
        watermark = self.timers.watermark = self._advance(watermark)
        size, lateness = self.spec.assigner.size, self.spec.allowed_lateness_ms
        out: list = []
        for ts in self.timers.due(EVENT_TIME, watermark):
            for start, acc in self.contents.items():
                if self.merging:
                    end, acc = acc
                    size = end - start
                last = start + size - 1
                if last == ts:
                    out.extend(self._result(start, acc, start + size))
                if last + lateness == ts:
                    self.contents.remove(start)
        return [out] if out else []

    def close(self):
        try:
            if isinstance(self.spec.fn, ProcessWindowFunction):
                self.spec.fn.close()
        finally:
            super().close()
