"""Two-input operators: ``connect(...).process(KeyedCoProcessFunction)``, interval joins and
window joins (the DSL and the specs are :mod:`..joins`).

A two-input operator is the first operator of its task (it has two inputs, so it never
chains to an upstream one). The task maps each input channel to its input (1 or 2,
:meth:`~..graph.Vertex.input_of_channels`) and calls :meth:`process_input` instead of
``process``. Barriers are aligned over the channels of both inputs like those of a union,
and the operator's watermark is the minimum over both inputs' channels (the task's
:class:`~.watermarks.WatermarkValve`).

All their state is keyed state in the operator's backend (heap or RocksDB), so it is in
every checkpoint and savepoint and moves with its key group on rescale:

* co-process: the function's own state and timers (as a keyed ``process()``);
* interval join: per key, the rows of each side still able to match
  (``interval-join.left`` / ``.right``: timestamp -> ``[[record, matched], ...]``, one map
  per key and side) and one event-time timer per timestamp at which rows stop being able to
  match; when it fires they leave the state (an outer join emits those that matched nothing
  then);
* window join: per key, each side's rows per open window (``window-join.left.rows`` /
  ``.right.rows``: each record at its window's start) and a timer at each window's end.

The window join keeps each row as one entry of its state (:mod:`.join_state`): in RocksDB
buffering a row writes that row, not the key's other rows of the window. Its snapshots of
the layout before (one map per key and side) are converted when the operator opens.

The joins keep their input watermark in operator state (as the window operators do, see
:class:`~.windowing._CheckpointedWatermark`): rows at or behind it are late, dropped and
counted (``dropped_late``), before and after a restore alike.

The operators take lists of dicts; the vectorized joins (``vectorized=True``,
:mod:`.vector_joins`) take Arrow batches through the same :meth:`process_input`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from ....changelog import INSERT, OP_FIELD
from ....errors import BadRecordError
from ....plan.functions import ProcessJoinFunction, RuntimeContext
from ....plan.specs import CoProcessSpec, IntervalJoinSpec, WindowJoinSpec, merge_rows
from ....state.key_hashing import key_groups_for
from ..base import KeyedOperator, ProcessOperator, _emitted
from ..timers import EVENT_TIME, TimerService
from ..windowing import _CheckpointedWatermark
from .state import RowBuffer, convert_legacy

LEFT, RIGHT = 0, 1
#: the interval join keeps one map per key and side (its probe reads the whole side: one
#: read; per-row entries measured 2-4x slower, see BENCHMARKS.md "Join state layout")
INTERVAL_STATES = ("interval-join.left", "interval-join.right")
WINDOW_STATES = ("window-join.left.rows", "window-join.right.rows")
#: the window join's states of the layout before per-row entries (restored and converted)
LEGACY_WINDOW_STATES = ("window-join.left", "window-join.right")


class CoProcessOperator(ProcessOperator):
    """``a.connect(b).key_by(ka, kb).process(KeyedCoProcessFunction)``: a keyed process
    operator with two inputs sharing its keyed state and timers."""

    two_input = True

    @property
    def fn(self) -> Any:
        return cast(CoProcessSpec, self.node.payload).fn

    def process(self, records):  # pragma: no cover - the task calls process_input
        raise TypeError(f"operator {self.uid!r} has two inputs: use process_input")

    def process_input(self, input: int, records: list[dict]) -> list:
        spec = cast(CoProcessSpec, self.node.payload)
        method = spec.fn.process_element1 if input == 1 else spec.fn.process_element2
        return self._run(records, spec.key_selectors[input - 1], method,
                         spec.timestamps[input - 1])


def _join_caller(fn, ctx: RuntimeContext) -> Callable[[dict | None, dict | None, int], Any]:
    """``call(left, right, timestamp)``: what the join emits for a pair (or an unmatched
    row of an outer join, the other side ``None``)."""
    if fn is None:
        return lambda left, right, ts: merge_rows(left, right)
    if isinstance(fn, ProcessJoinFunction):
        def call(left, right, ts):
            ctx.timestamp = ts
            return fn.process_element(left, right, ctx)
        return call
    return lambda left, right, ts: fn(left, right)


class _JoinOperator(_CheckpointedWatermark, KeyedOperator):
    """What the joins share: keyed input, the function, the watermark, late rows."""

    two_input = True
    STATES: tuple[str, str]

    def open(self, restored_operator_state):
        fn = self.node.payload.fn
        self.timers = TimerService(self.backend)
        self.timers.rebuild()
        self._restore_watermark(restored_operator_state)
        self.timers.watermark = self.watermark
        self.buffers = self._open_buffers()
        self.dropped_late = 0
        self.call = _join_caller(fn, self.ctx)
        if isinstance(fn, ProcessJoinFunction):
            fn.open(self.ctx)

    def process(self, records):  # pragma: no cover - the task calls process_input
        raise TypeError(f"operator {self.uid!r} has two inputs: use process_input")

    def _open_buffers(self) -> tuple:
        """The join's per-key state: one map state per name of :attr:`STATES`."""
        return tuple(self.ctx.map_state(name) for name in self.STATES)

    def _keyed(self, records: list[dict], input: int) -> Iterator[tuple[dict, int]]:
        """Each record with its event time, the backend's current key set to its key."""
        spec: Any = self.node.payload
        sel, stamp, check = spec.key_selectors[input], spec.timestamps[input], self.keys.check
        uid = self.uid or self.node.name
        keys = [check(sel(r)) for r in records]
        m = self.backend.max_parallelism
        groups = key_groups_for(keys, m)
        set_key = self.backend.set_current_key_in_group
        for r, key, group in zip(records, keys, groups, strict=True):
            if r.get(OP_FIELD, INSERT) != INSERT:
                raise BadRecordError(
                    f"join {uid!r}: input {input + 1} is a changelog (a {r[OP_FIELD]!r} record "
                    "arrived): interval and window joins take insert-only streams (their rows "
                    "leave the state by time, a retraction could not undo what was emitted); "
                    "join a changelog in connect(...).process(), whose function sees '_op'")
            set_key(key, group)
            yield r, stamp.of_record(r, uid)

    def _emit(self, left: dict | None, right: dict | None, ts: int, out: list) -> None:
        result = self.call(left, right, ts)
        if type(result) is dict:
            out.append(result)
        else:
            _emitted(result, out)

    def buffered_rows(self) -> int:
        """Rows held in the join's state (both sides, every key of this subtask)."""
        backend, n = self.backend, 0
        for name, state in zip(self.STATES, self.buffers, strict=True):
            for key in list(backend.keys(name)):
                backend.set_current_key(key)
                n += sum(len(rows) for _, rows in state.items())
        return n

    def close(self):
        try:
            fn = self.node.payload.fn
            if isinstance(fn, ProcessJoinFunction):
                fn.close()
        finally:
            super().close()


class _RowBufferJoin(_JoinOperator):
    """A join whose sides are :class:`~.join_state.RowBuffer` s (one entry per row)."""

    LEGACY_STATES: tuple[str, str]

    def _open_buffers(self) -> tuple:
        uid = self.uid or self.node.name
        buffers = tuple(RowBuffer(self.backend, name, uid) for name in self.STATES)
        for legacy, buffer in zip(self.LEGACY_STATES, buffers, strict=True):
            convert_legacy(self.backend, uid, legacy, buffer)
        return buffers

    def buffered_rows(self) -> int:
        """Rows held in the join's state (both sides, every key of this subtask)."""
        backend, n = self.backend, 0
        for name, buffer in zip(self.STATES, self.buffers, strict=True):
            for key in list(backend.keys(name)):
                backend.set_current_key(key)
                n += buffer.size()
        return n


class IntervalJoinOperator(_JoinOperator):
    """``a.key_by(..).interval_join(b.key_by(..), how=...).between(lower, upper)``.

    A row of ``a`` at ``t`` matches the rows of ``b`` of its key at ``t + lower .. t +
    upper``; seen from ``b``, a row at ``t`` matches ``a`` at ``t - upper .. t - lower``.
    A row joins with the other side's buffered rows when it arrives, then is buffered
    until the watermark reaches the end of its range (``t + upper`` for ``a``, ``t - lower``
    for ``b``): no row to come can match it after that (every row to come is later than
    the watermark). Then it leaves the state, and in an outer join, if it matched nothing,
    it is emitted alone (``fn(row, None)`` / ``fn(None, row)``).
    """

    STATES = INTERVAL_STATES

    def open(self, restored_operator_state):
        super().open(restored_operator_state)
        spec = cast(IntervalJoinSpec, self.node.payload)
        lo, hi = spec.lower_ms, spec.upper_ms
        #: per input: the other side's matching timestamps relative to a row's own
        self.ranges = ((lo, hi), (-hi, -lo))
        self.outer = (spec.outer(1), spec.outer(2))

    def process_input(self, input: int, records: list[dict]) -> list:
        i = input - 1
        mine, other = self.buffers[i], self.buffers[1 - i]
        lo, hi = self.ranges[i]
        outer_mine, outer_other = self.outer[i], self.outer[1 - i]
        register, emit = self.timers.register_event_time_timer, self._emit
        out: list = []
        for r, ts in self._keyed(records, i):
            wm = self.watermark
            if ts <= wm:  # late: every row it could match may be gone already
                self.dropped_late += 1
                continue
            matched = False
            for ots, rows in other.items():
                if not ts + lo <= ots <= ts + hi:
                    continue
                matched = True
                at = max(ts, ots)
                for row, _ in rows:
                    if i == LEFT:
                        emit(r, row, at, out)
                    else:
                        emit(row, r, at, out)
                if outer_other and not all(flag for _, flag in rows):
                    other.put(ots, [[row, True] for row, _ in rows])
            end = ts + hi  # when no row to come can match this one
            if end > wm:
                mine.put(ts, [*mine.get(ts, ()), [r, matched]])
                register(end)
            elif outer_mine and not matched:
                self._unmatched(i, r, ts, out)
        return out

    def _unmatched(self, side: int, row: dict, ts: int, out: list) -> None:
        """An outer join's row of ``side`` that matched nothing, paired with None."""
        if side == LEFT:
            self._emit(row, None, ts, out)
        else:
            self._emit(None, row, ts, out)

    def on_watermark(self, watermark):
        wm = self.timers.watermark = self._advance(watermark)
        out: list = []
        for end in self.timers.due(EVENT_TIME, wm):
            for i in (LEFT, RIGHT):
                ts = end - self.ranges[i][1]  # the rows of side i whose range ends here
                state = self.buffers[i]
                rows = state.get(ts)
                if rows is None:
                    continue
                state.remove(ts)
                if self.outer[i]:
                    for row, matched in rows:
                        if not matched:
                            self._unmatched(i, row, ts, out)
        return [out] if out else []


class WindowJoinOperator(_RowBufferJoin):
    """``a.join(b).where(ka).equal_to(kb).window(assigner).apply(fn)``: each side's rows
    are kept per key and window; when the watermark reaches a window's last millisecond,
    every pair of the key's rows of both sides in it is emitted and the window leaves the
    state. A row whose windows have all fired is late (dropped and counted)."""

    STATES = WINDOW_STATES
    LEGACY_STATES = LEGACY_WINDOW_STATES

    def process_input(self, input: int, records: list[dict]) -> list:
        i = input - 1
        assigner = cast(WindowJoinSpec, self.node.payload).assigner
        size, buffer = assigner.size, self.buffers[i]
        register = self.timers.register_event_time_timer
        for r, ts in self._keyed(records, i):
            starts = [s for s in assigner.starts(ts) if s + size - 1 > self.watermark]
            if not starts:
                self.dropped_late += 1
                continue
            for s in starts:
                buffer.add(s, r)
                register(s + size - 1)
        return []

    def on_watermark(self, watermark):
        wm = self.timers.watermark = self._advance(watermark)
        size = cast(WindowJoinSpec, self.node.payload).assigner.size
        default = self.node.payload.fn is None
        left_rows, right_rows = self.buffers
        out: list = []
        for last in self.timers.due(EVENT_TIME, wm):
            start = last - size + 1
            lefts, rights = left_rows.pop(start), right_rows.pop(start)
            if not lefts or not rights:
                continue
            for left in lefts:
                for right in rights:
                    if default:
                        out.append({**merge_rows(left, right), "window_start": start,
                                    "window_end": start + size})
                    else:
                        self._emit(left, right, last, out)
        return [out] if out else []
