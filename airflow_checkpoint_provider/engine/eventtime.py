"""Event time: timestamps, watermark strategies and window assigners.

Times are integers in milliseconds since the epoch (``int`` fields, ``datetime`` values or
Arrow ``timestamp`` columns are read as such). A watermark ``w`` says "no record with a
timestamp ``<= w`` is expected any more", as in Flink:

* a source with a :class:`WatermarkStrategy` computes, per split, ``max timestamp seen -
  out_of_orderness - 1``; the source subtask's watermark is the minimum over its splits that
  are neither finished nor idle; when none is left (every split finished or idle, or the
  subtask owns none) it is the largest any split reached, the splits restored from a
  snapshot included, and the subtask is idle until a split delivers again
  (:class:`~.runtime.operators.watermarks.SourceWatermarks`);
* watermarks travel in band with the records (like barriers); a task's watermark is the
  minimum over its input channels that are neither idle nor ended, and never goes back;
* end of input is the watermark :data:`MAX_WATERMARK`: every event-time timer and window
  fires (also on ``stop --drain``).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import BadRecordError, PipelineDefinitionError

#: no watermark yet
MIN_WATERMARK = -(2**63)
#: end of input: every event-time timer and window fires
MAX_WATERMARK = 2**63 - 1

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def duration_ms(value: object, what: str) -> int:
    """A duration given as ``timedelta`` or integer milliseconds, in milliseconds."""
    if isinstance(value, _dt.timedelta):
        ms = value / _dt.timedelta(milliseconds=1)
        if ms != int(ms):
            raise PipelineDefinitionError(f"{what} {value!r} is not a whole number of milliseconds")
        return int(ms)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise PipelineDefinitionError(
        f"{what} must be a datetime.timedelta or integer milliseconds, got {value!r}")


def format_watermark(watermark: int) -> str:
    """A watermark for people: ISO-8601 UTC, or ``end`` / ``none``."""
    if watermark >= MAX_WATERMARK:
        return "end"
    if watermark <= MIN_WATERMARK:
        return "none"
    try:
        return (_EPOCH + _dt.timedelta(milliseconds=watermark)).isoformat(timespec="milliseconds")
    except OverflowError:
        return str(watermark)


def to_millis(value: object) -> int | None:
    """One timestamp in epoch milliseconds; ``None`` if ``value`` is not a time."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return (value - _EPOCH) // _dt.timedelta(milliseconds=1)
    return None


class TimestampSpec:
    """Where a record's event time is: a field (dicts and Arrow columns) or a function of
    the record (dicts only)."""

    __slots__ = ("field", "fn")

    def __init__(self, field: str | None = None, fn: Callable[[dict], object] | None = None) -> None:
        if (field is None) == (fn is None):
            raise PipelineDefinitionError("give a timestamp field or a timestamp function")
        if field is not None and not isinstance(field, str):
            raise PipelineDefinitionError(f"timestamp field must be a name, got {field!r}")
        if fn is not None and not callable(fn):
            raise PipelineDefinitionError(f"timestamp function {fn!r} is not callable")
        self.field = field
        self.fn = fn

    def describe(self) -> str:
        return f"field {self.field!r}" if self.field else f"function {getattr(self.fn, '__name__', self.fn)!r}"

    def of_record(self, record: dict, uid: str) -> int:
        if self.field is not None:
            try:
                value = record[self.field]
            except (KeyError, TypeError):
                raise BadRecordError(
                    f"operator {uid!r}: timestamp field {self.field!r} is missing from a record "
                    f"(its fields: {', '.join(map(str, list(record)[:20])) if isinstance(record, dict) else '-'})"
                ) from None
        else:
            assert self.fn is not None  # one of field and fn is set (__init__)
            value = self.fn(record)
        ms = to_millis(value)
        if ms is None:
            raise BadRecordError(
                f"operator {uid!r}: timestamp {self.describe()} gave {value!r} "
                f"({type(value).__name__}), not a time (integer epoch milliseconds or datetime)")
        return ms

    def of_rows(self, records: list[dict], uid: str) -> np.ndarray:
        return np.fromiter((self.of_record(r, uid) for r in records), dtype=np.int64,
                           count=len(records))

    def of_batch(self, batch: pa.RecordBatch, uid: str) -> np.ndarray:
        """Every row's timestamp as int64 milliseconds."""
        if self.field is None:
            return self.of_rows(batch.to_pylist(), uid)
        try:
            column = batch.column(self.field)
        except KeyError:
            raise BadRecordError(
                f"operator {uid!r}: timestamp field {self.field!r} is not a column "
                f"(columns: {', '.join(batch.schema.names)})") from None
        return column_millis(column, f"operator {uid!r}: timestamp field {self.field!r}")

    def __reduce__(self):
        return (TimestampSpec, (self.field, self.fn))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimestampSpec) and (self.field, self.fn) == (other.field, other.fn)

    def __hash__(self) -> int:
        return hash((self.field, self.fn))


def column_millis(column: pa.Array, what: str) -> np.ndarray:
    """An Arrow column of times as int64 epoch milliseconds (integers are milliseconds)."""
    t = column.type
    if column.null_count:
        raise BadRecordError(f"{what}: {column.null_count} record(s) have no timestamp (null)")
    if pa.types.is_timestamp(t):
        if t.unit != "ms":
            column = pc.cast(column, pa.timestamp("ms", t.tz), safe=False)
        return column.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t):
        return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    raise BadRecordError(f"{what} has type {t}, not a time (integer epoch milliseconds or "
                         "timestamp)")


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source derives watermarks from its records (Flink's ``WatermarkStrategy``)::

        WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5), timestamp_field="ts")
                         .with_idleness(timedelta(minutes=1))

    :param out_of_orderness_ms: how late a record may be relative to the latest one seen.
    :param timestamp: the records' event time (:class:`TimestampSpec`).
    :param idleness_ms: a split that delivered nothing for this long no longer holds the
        watermark back (``None``: never idle); a subtask whose splits are all idle (or
        finished) advances to the largest watermark any of them reached, then tells its
        consumers to ignore it until it delivers again.
    :param emit_interval_ms: at most one watermark per interval per subtask (Flink's
        ``autoWatermarkInterval``, 200 ms).
    """

    out_of_orderness_ms: int
    timestamp: TimestampSpec
    idleness_ms: int | None = None
    emit_interval_ms: int = 200

    @classmethod
    def for_bounded_out_of_orderness(cls, max_out_of_orderness, *, timestamp_field: str | None = None,
                                     timestamp_fn: Callable[[dict], object] | None = None,
                                     ) -> WatermarkStrategy:
        bound = duration_ms(max_out_of_orderness, "max_out_of_orderness")
        if bound < 0:
            raise PipelineDefinitionError(f"max_out_of_orderness must be >= 0, got {bound} ms")
        return cls(bound, TimestampSpec(timestamp_field, timestamp_fn))

    @classmethod
    def for_monotonous_timestamps(cls, *, timestamp_field: str | None = None,
                                  timestamp_fn: Callable[[dict], object] | None = None,
                                  ) -> WatermarkStrategy:
        return cls(0, TimestampSpec(timestamp_field, timestamp_fn))

    def with_idleness(self, idleness) -> WatermarkStrategy:
        ms = duration_ms(idleness, "idleness")
        if ms <= 0:
            raise PipelineDefinitionError(f"idleness must be > 0, got {ms} ms")
        return WatermarkStrategy(self.out_of_orderness_ms, self.timestamp, ms, self.emit_interval_ms)

    def with_emit_interval(self, interval) -> WatermarkStrategy:
        ms = duration_ms(interval, "emit_interval")
        if ms < 0:
            raise PipelineDefinitionError(f"emit_interval must be >= 0, got {ms} ms")
        return WatermarkStrategy(self.out_of_orderness_ms, self.timestamp, self.idleness_ms, ms)


# -- windows ----------------------------------------------------------------------------------

class WindowAssigner:
    """Assigns each timestamp to the windows ``[start, start + size)`` that contain it."""

    size: int

    def assign(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(row, window_start)`` pairs: row ``row[i]`` belongs to window ``start[i]``."""
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def starts(self, ts: int) -> list[int]:
        """The starts of the windows that contain ``ts`` (one record at a time)."""
        raise NotImplementedError


def _floor_to(ts: np.ndarray, step: int, offset: int) -> np.ndarray:
    return ts - np.mod(ts - offset, step)


class TumblingWindows(WindowAssigner):
    """Fixed, non-overlapping windows of ``size`` (``offset`` shifts their starts)."""

    def __init__(self, size, offset=0) -> None:
        self.size = duration_ms(size, "window size")
        self.offset = duration_ms(offset, "window offset")
        if self.size <= 0:
            raise PipelineDefinitionError(f"window size must be > 0, got {self.size} ms")

    def assign(self, ts):
        return np.arange(len(ts)), _floor_to(ts, self.size, self.offset)

    def starts(self, ts: int) -> list[int]:
        return [ts - (ts - self.offset) % self.size]

    def describe(self) -> dict:
        return {"type": "tumbling", "size": self.size, "offset": self.offset}


class SlidingWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide``: a record is in ``ceil(size / slide)`` of them."""

    def __init__(self, size, slide, offset=0) -> None:
        self.size = duration_ms(size, "window size")
        self.slide = duration_ms(slide, "window slide")
        self.offset = duration_ms(offset, "window offset")
        if self.size <= 0 or self.slide <= 0:
            raise PipelineDefinitionError(
                f"window size and slide must be > 0, got {self.size} and {self.slide} ms")

    def assign(self, ts):
        last = _floor_to(ts, self.slide, self.offset)
        rows, starts = [], []
        idx = np.arange(len(ts))
        for k in range(math.ceil(self.size / self.slide)):
            s = last - k * self.slide
            ok = s > ts - self.size
            rows.append(idx[ok])
            starts.append(s[ok])
        return np.concatenate(rows), np.concatenate(starts)

    def starts(self, ts: int) -> list[int]:
        last = ts - (ts - self.offset) % self.slide
        return [s for s in range(last, ts - self.size, -self.slide)]

    def describe(self) -> dict:
        return {"type": "sliding", "size": self.size, "slide": self.slide, "offset": self.offset}


class SessionWindows(WindowAssigner):
    """Per key, a window per burst of activity: records less than ``gap`` apart share a
    session, which ends ``gap`` after its last record. Sessions merge as records arrive:
    ``window(...).aggregate(...)`` merges them a batch at a time (vectorized); with
    ``window(...).reduce(fn)`` the reduce function also combines two partial results
    (``fn(acc_a, acc_b)``), ``.process(fn)`` gets the session's records."""

    def __init__(self, gap) -> None:
        self.gap = duration_ms(gap, "session gap")
        if self.gap <= 0:
            raise PipelineDefinitionError(f"session gap must be > 0, got {self.gap} ms")
        self.size = self.gap

    def describe(self) -> dict:
        return {"type": "session", "gap": self.gap}


__all__ = ["MAX_WATERMARK", "MIN_WATERMARK", "SlidingWindows", "TimestampSpec",
           "SessionWindows", "TumblingWindows", "WatermarkStrategy", "WindowAssigner", "column_millis",
           "duration_ms", "to_millis"]
