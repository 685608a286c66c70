"""Two-input operators and joins: the DSL and the specs their operators run from.

* ``a.connect(b).key_by(key_a, key_b).process(KeyedCoProcessFunction, uid=...)``: one
  function sees both streams (``process_element1`` / ``process_element2``) with keyed state
  and timers shared by the two inputs (:class:`CoProcessSpec`).
* ``a.key_by(ka).interval_join(b.key_by(kb), how=...).between(lower, upper).process(...)``:
  pairs with the same key and ``b.ts`` in ``[a.ts + lower, a.ts + upper]`` (event time,
  bounds inclusive); ``how`` is ``inner``, ``left``, ``right`` or ``full`` outer
  (:class:`IntervalJoinSpec`).
* ``a.join(b).where(ka).equal_to(kb).window(TumblingWindows(...)).apply(fn, uid=...)``: pairs
  with the same key in the same event-time window (:class:`WindowJoinSpec`).

Each is one node of the job graph with two inputs: its input edges are hash-partitioned by
each side's key and say which input they feed (``Edge.input``); the task maps its input
channels to inputs (:meth:`~.graph.Vertex.input_of_channels`). The operators are in
:mod:`.runtime.operators.joins.per_record`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import PipelineDefinitionError
from ..eventtime import SessionWindows, TimestampSpec, WindowAssigner, duration_ms
from ..plan.functions import KeyedCoProcessFunction, ProcessJoinFunction
from ..plan.specs import JOIN_TYPES, CoProcessSpec, IntervalJoinSpec, WindowJoinSpec

if TYPE_CHECKING:
    from .handles import DataStream

def _vectorized(what: str, uid: str, spec: IntervalJoinSpec | WindowJoinSpec) -> None:
    """``vectorized=True``: checked here, run by :mod:`.runtime.operators.joins.vectorized`."""
    check_vectorized_join(what, uid, spec.fn, spec.key_selectors, spec.timestamps)
    spec.vectorized = True


def check_vectorized_join(what: str, uid: str, fn: object, selectors: tuple,
                          timestamps: tuple[TimestampSpec | None, TimestampSpec | None]) -> None:
    """``vectorized=True`` needs the default output and columns for the keys and times."""
    if fn is not None:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: vectorized=True emits the merged rows itself and takes no join "
            "function; drop fn (and reshape the output with map_batches), or drop vectorized=True")
    for label, sel, stamp in zip(("first", "second"), selectors, timestamps, strict=True):
        if not isinstance(getattr(sel, "field", None), str):
            raise PipelineDefinitionError(
                f"{what} {uid!r}: vectorized=True needs field-name keys; the {label} input is "
                "keyed by a function: key it by a field (add the key with map_batches first)")
        if stamp is None or stamp.field is None:
            raise PipelineDefinitionError(
                f"{what} {uid!r}: vectorized=True needs event time in a field; the {label} "
                "input's watermark strategy reads it with a function: use timestamp_field=")


def _check_pair(what: str, first: DataStream, second: DataStream) -> None:
    if first._p is not second._p:
        raise PipelineDefinitionError(f"{what}: the streams belong to different pipelines")
    if {id(h) for h in first._heads} & {id(h) for h in second._heads}:
        raise PipelineDefinitionError(
            f"{what}: a stream cannot be joined or connected with itself directly; map() "
            "one of the two first")


def _two_input(kind: str, name: str, uid: str, parallelism: int | None, payload: object,
               first: DataStream, second: DataStream,
               selectors: tuple[Callable, Callable]) -> DataStream:
    """A two-input node fed by ``first`` (input 1) and ``second`` (input 2), each
    hash-partitioned by its key (built by the pipeline: :meth:`~.api.Pipeline._two_input`)."""
    return first._p._two_input(kind, name, uid, parallelism, payload,
                               ((first, selectors[0]), (second, selectors[1])))


def _key(stream: DataStream, key: str | Callable[[dict], object]) -> Callable:
    """The key selector of ``key`` (a field name or a function), checked as key_by does."""
    return stream.key_by(key)._key_selector


def _join_function(what: str, uid: str, fn) -> None:
    if fn is not None and not isinstance(fn, ProcessJoinFunction) and not callable(fn):
        raise PipelineDefinitionError(
            f"{what} {uid!r}: {fn!r} is not a ProcessJoinFunction or a function(left, right)")


def _event_time(what: str, uid: str, first: DataStream, second: DataStream):
    for label, s in (("first", first), ("second", second)):
        if s._timestamp is None:
            raise PipelineDefinitionError(
                f"{what} {uid!r}: joins on time need event time on both inputs, and the "
                f"{label} input has no watermark strategy: pass watermarks=WatermarkStrategy"
                ".for_bounded_out_of_orderness(...) to the source(s) it reads from")
    return first._timestamp, second._timestamp


class ConnectedStreams:
    """``a.connect(b)``: two streams into one two-input operator. Key both sides
    (:meth:`key_by`) and :meth:`process` them with a :class:`KeyedCoProcessFunction`."""

    def __init__(self, first: DataStream, second: DataStream) -> None:
        _check_pair("connect", first, second)
        self.first, self.second = first, second
        self._selectors = (first._key_selector, second._key_selector)

    def key_by(self, key1: str | Callable[[dict], object],
               key2: str | Callable[[dict], object] | None = None) -> ConnectedStreams:
        """Key the first stream by ``key1`` and the second by ``key2`` (default: ``key1``);
        records of both with equal keys go to the same subtask and share its keyed state."""
        out = ConnectedStreams(self.first, self.second)
        out._selectors = (_key(self.first, key1),
                          _key(self.second, key1 if key2 is None else key2))
        return out

    def process(self, fn: KeyedCoProcessFunction, *, uid: str, parallelism: int | None = None,
                name: str | None = None) -> DataStream:
        """Run ``fn.process_element1`` on the first stream's records and
        ``fn.process_element2`` on the second's, with keyed state and timers per key."""
        if not isinstance(fn, KeyedCoProcessFunction):
            raise PipelineDefinitionError(
                f"co-process {uid!r}: {fn!r} must be a KeyedCoProcessFunction instance")
        s1, s2 = self._selectors
        if s1 is None or s2 is None:
            raise PipelineDefinitionError(
                f"co-process {uid!r}: key both inputs first: a.connect(b).key_by(key_a, key_b)")
        spec = CoProcessSpec(fn, (s1, s2), (self.first._timestamp, self.second._timestamp))
        return _two_input("co_process", name or f"CoProcess: {type(fn).__name__}", uid,
                          parallelism, spec, self.first, self.second, (s1, s2))


class IntervalJoin:
    """``a.key_by(..).interval_join(b.key_by(..), how=...)``; :meth:`between` sets the bounds."""

    def __init__(self, left: DataStream, right: DataStream, how: str) -> None:
        _check_pair("interval_join", left, right)
        if how not in JOIN_TYPES:
            raise PipelineDefinitionError(
                f"interval_join: how={how!r} is not one of {', '.join(JOIN_TYPES)}")
        if left._key_selector is None or right._key_selector is None:
            raise PipelineDefinitionError(
                "interval_join: both sides must be keyed: a.key_by(...).interval_join("
                "b.key_by(...))")
        self.left, self.right, self.how = left, right, how

    def between(self, lower, upper) -> IntervalJoined:
        """Pair ``a`` with every ``b`` of its key where ``a.ts + lower <= b.ts <= a.ts +
        upper`` (timedelta or ms; negative is before ``a``)."""
        lo, hi = duration_ms(lower, "lower bound"), duration_ms(upper, "upper bound")
        if lo > hi:
            raise PipelineDefinitionError(
                f"interval_join: lower bound {lo} ms is above the upper bound {hi} ms")
        return IntervalJoined(self, lo, hi)


class IntervalJoined:
    def __init__(self, join: IntervalJoin, lower_ms: int, upper_ms: int) -> None:
        self.join, self.lower_ms, self.upper_ms = join, lower_ms, upper_ms

    def process(self, fn: ProcessJoinFunction | Callable | None = None, *, uid: str,
                parallelism: int | None = None, name: str | None = None,
                vectorized: bool = False) -> DataStream:
        """Emit ``fn(left, right)`` per matching pair (default :func:`merge_rows`); outer
        joins emit ``fn(row, None)`` / ``fn(None, row)`` for a row that matched nothing once
        the watermark passes its last possible match. ``vectorized=True``: on Arrow batches
        (no fn, field keys and timestamps; :mod:`.runtime.operators.joins.vectorized`)."""
        j = self.join
        _join_function("interval join", uid, fn)
        timestamps = _event_time("interval join", uid, j.left, j.right)
        selectors = (j.left._key_selector, j.right._key_selector)
        spec = IntervalJoinSpec(fn, selectors, timestamps, self.lower_ms, self.upper_ms, j.how)
        if vectorized:  # the vectorized path (runtime/operators/joins/vectorized.py)
            _vectorized("interval join", uid, spec)
        label = name or (f"IntervalJoin ({j.how}) [{self.lower_ms}, {self.upper_ms}] ms")
        return _two_input("interval_join", label, uid, parallelism, spec, j.left, j.right,
                          selectors)


class JoinedStreams:
    """``a.join(b).where(key_a).equal_to(key_b).window(assigner).apply(fn, uid=...)``: an
    inner join of the records with equal keys in the same event-time window."""

    def __init__(self, first: DataStream, second: DataStream) -> None:
        _check_pair("join", first, second)
        self.first, self.second = first, second
        self._keys: list[Callable] = []
        self._assigner: WindowAssigner | None = None

    def _with(self, **changes) -> JoinedStreams:
        out = JoinedStreams(self.first, self.second)
        out._keys, out._assigner = list(self._keys), self._assigner
        for k, v in changes.items():
            setattr(out, k, v)
        return out

    def where(self, key: str | Callable[[dict], object]) -> JoinedStreams:
        return self._with(_keys=[_key(self.first, key)])

    def equal_to(self, key: str | Callable[[dict], object]) -> JoinedStreams:
        if len(self._keys) != 1:
            raise PipelineDefinitionError("join: call where(key_a) before equal_to(key_b)")
        return self._with(_keys=[self._keys[0], _key(self.second, key)])

    def window(self, assigner: WindowAssigner) -> JoinedStreams:
        if not isinstance(assigner, WindowAssigner) or isinstance(assigner, SessionWindows):
            raise PipelineDefinitionError(
                f"join: {assigner!r} is not TumblingWindows(...) or SlidingWindows(...)")
        return self._with(_assigner=assigner)

    def apply(self, fn: ProcessJoinFunction | Callable | None = None, *, uid: str,
              parallelism: int | None = None, name: str | None = None,
              vectorized: bool = False) -> DataStream:
        """Emit ``fn(left, right)`` for every pair of a key's records in the same window
        when the watermark passes the window's end (default: :func:`merge_rows` plus
        ``window_start`` and ``window_end``). ``vectorized=True``: on Arrow batches (no fn,
        field keys and timestamps; :mod:`.runtime.operators.joins.vectorized`)."""
        if len(self._keys) != 2 or self._assigner is None:
            raise PipelineDefinitionError(
                f"join {uid!r}: needs where(key_a).equal_to(key_b).window(assigner) first")
        _join_function("window join", uid, fn)
        timestamps = _event_time("window join", uid, self.first, self.second)
        selectors = (self._keys[0], self._keys[1])
        spec = WindowJoinSpec(fn, selectors, timestamps, self._assigner)
        if vectorized:  # the vectorized path (runtime/operators/joins/vectorized.py)
            _vectorized("window join", uid, spec)
        label = name or f"WindowJoin {self._assigner.describe()['type']}"
        return _two_input("window_join", label, uid, parallelism, spec, self.first,
                          self.second, selectors)
