"""Watermark generation at sources and combination at tasks (pure logic, tested alone).

:class:`SourceWatermarks` is a source subtask's watermark from its splits (Flink's
per-split watermark generation with idleness); :class:`WatermarkValve` is a task's
watermark from its input channels (Flink's ``StatusWatermarkValve``). Both only ever move
the watermark forward and answer with what to send downstream: a new watermark, or a
change of the idle status.
"""

from __future__ import annotations

from ..eventtime import MAX_WATERMARK, MIN_WATERMARK, WatermarkStrategy

#: ``(watermark, idle)``: what a watermark frame carries
Status = tuple[int, bool]


class SourceWatermarks:
    """Watermarks of one source subtask. The largest timestamp seen per split is operator
    state (:meth:`state` / the ``restored`` argument), so a restored source starts from the
    watermark it had, not from scratch."""

    def __init__(self, strategy: WatermarkStrategy, splits: list[str],
                 restored: dict[str, int | None], now: float) -> None:
        self.strategy = strategy
        self.max_ts: dict[str, int | None] = {s: restored.get(s) for s in splits}
        self.active: set[str] = set(splits)      # splits not finished
        self.last_record: dict[str, float] = {s: now for s in splits}
        self.emitted: int = MIN_WATERMARK
        self.idle = False
        self._last_emit = float("-inf")

    def on_records(self, split: str, max_timestamp: int, now: float) -> None:
        old = self.max_ts.get(split)
        if old is None or max_timestamp > old:
            self.max_ts[split] = max_timestamp
        self.last_record[split] = now

    def add_split(self, split: str, now: float) -> None:
        """A split discovered while running (a continuous source)."""
        self.max_ts.setdefault(split, None)
        self.active.add(split)
        self.last_record[split] = now

    def on_split_finished(self, split: str) -> None:
        self.active.discard(split)

    def state(self, split: str) -> int | None:
        return self.max_ts.get(split)

    def _split_watermark(self, split: str) -> int:
        ts = self.max_ts.get(split)
        if ts is None:
            return MIN_WATERMARK
        return max(MIN_WATERMARK, ts - self.strategy.out_of_orderness_ms - 1)

    def poll(self, now: float, *, force: bool = False) -> Status | None:
        """What to send now, if anything: a higher watermark (at most one per emit
        interval unless ``force``), or the switch to or from idle."""
        idleness = self.strategy.idleness_ms
        live = [s for s in self.active
                if idleness is None or (now - self.last_record[s]) * 1000.0 < idleness]
        if not live:
            if self.active and not self.idle:  # every unfinished split is idle
                self.idle = True
                return (self.emitted, True)
            return None
        wm = max(self.emitted, min(self._split_watermark(s) for s in live))
        if self.idle:
            self.idle = False
            self.emitted, self._last_emit = wm, now
            return (wm, False)
        if wm > self.emitted and (force or (now - self._last_emit) * 1000.0
                                  >= self.strategy.emit_interval_ms):
            self.emitted, self._last_emit = wm, now
            return (wm, False)
        return None


class WatermarkValve:
    """A task's input watermark: the minimum over channels that are neither idle nor ended."""

    def __init__(self, channels: int) -> None:
        self.watermarks = [MIN_WATERMARK] * channels
        self.idle = [False] * channels
        self.ended = [False] * channels
        self.output = MIN_WATERMARK
        self.output_idle = False

    def on_watermark(self, channel: int, watermark: int, idle: bool) -> Status | None:
        if idle:
            self.idle[channel] = True
        else:
            self.idle[channel] = False
            if watermark > self.watermarks[channel]:
                self.watermarks[channel] = watermark
        return self._combine()

    def on_end(self, channel: int) -> Status | None:
        """The channel ended (end of input, or closed): it no longer holds anything back."""
        self.ended[channel] = True
        self.watermarks[channel] = MAX_WATERMARK
        return self._combine()

    def _combine(self) -> Status | None:
        live = [w for w, i, e in zip(self.watermarks, self.idle, self.ended, strict=True)
                if not i and not e]
        if not live:
            if not all(self.ended) and not self.output_idle:
                self.output_idle = True
                return (self.output, True)
            return None
        wm = min(live)
        if self.output_idle:
            self.output_idle = False
            self.output = max(self.output, wm)
            return (self.output, False)
        if wm > self.output:
            self.output = wm
            return (wm, False)
        return None
