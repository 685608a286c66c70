"""Windowed streams and the built-in aggregations' spec: ``key_by(field).window(assigner)``
then ``aggregate(...)``, ``reduce(fn)`` or ``process(ProcessWindowFunction)`` (the rest of the
DSL is in :mod:`.api`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import PipelineDefinitionError
from ..eventtime import SessionWindows, WindowAssigner
from ..plan.functions import ProcessWindowFunction

if TYPE_CHECKING:
    from .handles import DataStream, KeyedStream


class WindowedStream:
    """``key_by(field).window(assigner)``: aggregate per key and window."""

    def __init__(self, keyed: KeyedStream, assigner: WindowAssigner, allowed_lateness_ms: int) -> None:
        self._keyed = keyed
        self.assigner = assigner
        self.allowed_lateness_ms = allowed_lateness_ms

    def aggregate(self, *, uid: str, parallelism: int | None = None, name: str | None = None,
                  **aggregations: str | tuple[str, str]) -> DataStream:
        """The aggregations of :meth:`KeyedStream.aggregate`, per key and window, vectorized.
        Emits one row per key and window when the watermark passes the window's end: the key,
        ``window_start``, ``window_end`` (epoch ms, or timestamps if the time column is
        one) and the aggregations (Structured Streaming's append mode). Session windows
        merge per key as records arrive, vectorized too (without allowed_lateness)."""
        from ..state.columnar.windows import WindowSpec

        keyed = self._keyed
        session = isinstance(self.assigner, SessionWindows)
        if session and self.allowed_lateness_ms:
            raise PipelineDefinitionError(
                f"window aggregate {uid!r}: session windows with allowed_lateness need "
                "window(SessionWindows(...)).reduce(fn) or .process(fn)")
        spec = _aggregate_spec("window aggregate", uid, keyed._key_selector, aggregations)
        for reserved in ("window_start", "window_end"):
            if reserved in aggregations:
                raise PipelineDefinitionError(
                    f"window aggregate {uid!r}: output {reserved!r} is a window column")
        timestamp = keyed._needs_event_time("window aggregate", uid)
        window = WindowSpec(spec, self.assigner, self.allowed_lateness_ms, timestamp)
        node = keyed._then("session_aggregate" if session else "window_aggregate",
                           name or f"Window {self.assigner.describe()['type']}: "
                                   f"{', '.join(aggregations)}",
                           uid, parallelism, window, keyed._key_selector)
        return keyed._downstream(node)

    def reduce(self, fn: Callable[[dict, dict], dict], *, uid: str,
               parallelism: int | None = None, name: str | None = None) -> DataStream:
        """Reduce each key's records per window with ``fn(accumulated, record)``; emits the
        result with ``window_start`` and ``window_end`` added when the window fires (per
        record in Python: for counts and sums prefer :meth:`aggregate`)."""
        if not callable(fn):
            raise PipelineDefinitionError(f"window reduce {uid!r} needs a callable")
        return self._function("reduce", fn, uid, parallelism,
                              name or f"Window reduce: {getattr(fn, '__name__', 'fn')}")

    def process(self, fn: ProcessWindowFunction, *, uid: str, parallelism: int | None = None,
                name: str | None = None) -> DataStream:
        """Call ``fn.process(key, window, records, ctx)`` once per key and window when the
        window fires (the window's records are kept in keyed state until then)."""
        if not isinstance(fn, ProcessWindowFunction):
            raise PipelineDefinitionError(
                f"window process {uid!r}: {fn!r} must be a ProcessWindowFunction instance")
        return self._function("process", fn, uid, parallelism,
                              name or f"Window process: {type(fn).__name__}")

    def _function(self, mode: str, fn, uid: str, parallelism: int | None, name: str) -> DataStream:
        from ..state.columnar.windows import WindowFunctionSpec

        keyed = self._keyed
        timestamp = keyed._needs_event_time(f"window {mode}", uid)
        spec = WindowFunctionSpec(fn, mode, self.assigner, self.allowed_lateness_ms, timestamp)
        node = keyed._then("window", name, uid, parallelism, spec, keyed._key_selector)
        return keyed._downstream(node)


def _aggregate_spec(what: str, uid: str, key_selector, aggregations: dict):
    """The :class:`~.state.columnar.AggregateSpec` of ``aggregate(**aggregations)``, checked."""
    from ..state.columnar import AggregateSpec
    from ..state.columnar.distinct_state import DISTINCT

    field = getattr(key_selector, "field", None)
    if field is None:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: needs key_by(<field name>); a key function cannot be "
            "evaluated on Arrow columns (use process() or reduce() for computed keys)")
    if not aggregations:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: name at least one aggregation, e.g. count=\"count\"")
    spec: list[tuple[str, str, str | None]] = []
    for out, agg in aggregations.items():
        if out == field:
            raise PipelineDefinitionError(
                f"{what} {uid!r}: output {out!r} has the key field's name")
        if agg == "count":
            spec.append((out, "count", None))
            continue
        if (not isinstance(agg, tuple | list) or len(agg) != 2
                or agg[0] not in (*AggregateSpec.FUNCTIONS, DISTINCT)
                or not isinstance(agg[1], str)):
            raise PipelineDefinitionError(
                f"{what} {uid!r}: aggregation {out}={agg!r} is not \"count\" or "
                f"(function, column) with function one of "
                f"{', '.join((*AggregateSpec.FUNCTIONS, DISTINCT))}")
        if agg[0] == DISTINCT and what != "aggregate":
            raise PipelineDefinitionError(
                f"{what} {uid!r}: {DISTINCT} is supported by KeyedStream.aggregate() only "
                "(not per window yet)")
        spec.append((out, agg[0], agg[1]))
    return AggregateSpec(field, spec)
