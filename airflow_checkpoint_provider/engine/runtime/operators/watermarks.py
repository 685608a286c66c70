"""Watermark generation at sources and combination at tasks (pure logic, tested alone).

:class:`SourceWatermarks` is a source subtask's watermark from its splits (Flink's
per-split watermark generation with idleness); :class:`WatermarkValve` is a task's
watermark from its input channels (Flink's ``StatusWatermarkValve``). Both only ever move
the watermark forward and answer with what to send downstream: a new watermark, or a
change of the idle status.
"""

from __future__ import annotations

from ...eventtime import MAX_WATERMARK, MIN_WATERMARK, WatermarkStrategy

#: ``(watermark, idle)``: what a watermark frame carries
Status = tuple[int, bool]


class SourceWatermarks:
    """Watermarks of one source subtask. The largest timestamp seen per split is operator
    state (:meth:`state` / the ``restored`` argument), so a restored source starts from the
    watermark it had, not from scratch.

    The subtask's watermark is the minimum over its *live* splits (neither finished nor
    idle). When no split is live -- every split finished (a continuous source between two
    files, a subtask that owns no split), or every unfinished one idle -- nothing holds the
    watermark back any more: it is flushed to the largest any split reached (the restored
    ones included, finished or read by another subtask before a restore), within one emit
    interval, and the subtask then says it is idle so that its consumers stop waiting for
    it (Flink's ``StatusWatermarkValve`` flushes the same way when its last input goes
    idle). Without the flush, the splits that finished within the last emit interval were
    never emitted: a catch-up that read many files quickly left the watermark where it was
    when the first of them finished, until a new file arrived.
    """

    def __init__(self, strategy: WatermarkStrategy, splits: list[str],
                 restored: dict[str, int | None], now: float) -> None:
        self.strategy = strategy
        self.max_ts: dict[str, int | None] = {s: restored.get(s) for s in splits}
        self.active: set[str] = set(splits)      # splits not finished
        self.last_record: dict[str, float] = {s: now for s in splits}
        #: the largest timestamp of any split, finished or restored (``None``: none yet)
        self.seen_max: int | None = max((t for t in restored.values() if t is not None),
                                        default=None)
        self.emitted: int = MIN_WATERMARK
        self.idle = False
        self._last_emit = float("-inf")

    def on_records(self, split: str, max_timestamp: int, now: float) -> None:
        old = self.max_ts.get(split)
        if old is None or max_timestamp > old:
            self.max_ts[split] = max_timestamp
        if self.seen_max is None or max_timestamp > self.seen_max:
            self.seen_max = max_timestamp
        self.last_record[split] = now

    def add_split(self, split: str, now: float) -> None:
        """A split discovered while running (a continuous source)."""
        self.max_ts.setdefault(split, None)
        self.active.add(split)
        self.last_record[split] = now

    def on_split_finished(self, split: str) -> None:
        """The split delivers nothing more: it no longer holds the watermark back (its
        largest timestamp stays, in :attr:`seen_max` and in its state)."""
        self.active.discard(split)

    def state(self, split: str) -> int | None:
        return self.max_ts.get(split)

    def _watermark_of(self, ts: int | None) -> int:
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
            # every split finished or idle: flush to the largest watermark any split
            # reached, then go idle (two polls: the flush goes through the chain first)
            flushed = max(self.emitted, self._watermark_of(self.seen_max))
            if flushed > self.emitted:
                if not self._due(now, force):
                    return None
                self.emitted, self._last_emit = flushed, now
                return (flushed, False)
            if not self.idle:
                self.idle = True
                return (self.emitted, True)
            return None
        wm = max(self.emitted, min(self._watermark_of(self.max_ts.get(s)) for s in live))
        if self.idle:
            self.idle = False
            self.emitted, self._last_emit = wm, now
            return (wm, False)
        if wm > self.emitted and self._due(now, force):
            self.emitted, self._last_emit = wm, now
            return (wm, False)
        return None

    def _due(self, now: float, force: bool) -> bool:
        """A higher watermark may go out now: forced, or an emit interval since the last."""
        return force or (now - self._last_emit) * 1000.0 >= self.strategy.emit_interval_ms


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
