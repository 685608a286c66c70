"""The live progress line of a foreground ``ckpt run``.

On a terminal, :class:`ProgressReporter` keeps one line at the bottom of the screen up to
date (a ``rich`` live display, refreshed a few times a second from its own thread)::

    running-sum RUNNING  in 12,345 (3,010/s)  out 12,300  checkpoint 17: 23 ms, 2 s ago  failed 0  restarts 1

Log records that the job writes to the same terminal meanwhile are printed above the line
instead of through it. Elsewhere (a pipe, a file, CI, ``--detach`` logs) the same fields
are logged as one plain line at most every ``log_interval_s`` seconds, and once more on
:meth:`ProgressReporter.close`, so a log file gets a heartbeat, not a flood.

The job master calls :meth:`ProgressReporter.update` with the fields it knows, as often as
it likes (an update only stores values; rendering happens on the refresh thread):

``status``, ``records_in``, ``records_out`` (running totals of the job),
``last_checkpoint_id``, ``last_checkpoint_duration_ms``, ``checkpoints_completed``,
``checkpoints_failed``, ``restarts``. Any other keyword is shown as ``key=value``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from typing import IO, Any

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.live import Live
from rich.text import Text

log = logging.getLogger(__name__)

#: Fields with their own place on the line, in order; others follow as ``key=value``.
KNOWN_FIELDS = ("status", "records_in", "records_out", "last_checkpoint_id",
                "last_checkpoint_duration_ms", "checkpoints_completed", "checkpoints_failed",
                "restarts")
#: Seconds of records_in history the input rate is computed over.
RATE_WINDOW_S = 5.0


class ProgressReporter:
    """A live progress line on a terminal, plain periodic log lines elsewhere.

    :param job_name: shown first on the line and in every log line.
    :param stream: where the live line goes (default ``sys.stderr``, where logs go too).
    :param force_terminal: ``True``/``False`` to override terminal detection (``None``:
        detect, honouring ``NO_COLOR``, ``TERM=dumb`` and the like, as rich does).
    :param log_interval_s: seconds between plain log lines when not on a terminal.
    :param refresh_per_second: refresh rate of the live line.
    """

    def __init__(self, job_name: str, *, stream: IO[str] | None = None,
                 force_terminal: bool | None = None, log_interval_s: float = 10.0,
                 refresh_per_second: float = 4.0) -> None:
        self.job_name = job_name
        self.log_interval_s = log_interval_s
        self._lock = threading.RLock()  # render() runs on rich's refresh thread
        self._fields: dict[str, Any] = {}
        self._rate_samples: deque[tuple[float, int]] = deque()
        self._checkpoint_seen_at: float | None = None
        self._last_log_at: float | None = None
        self._closed = False
        self._console = Console(file=stream if stream is not None else sys.stderr,
                                force_terminal=force_terminal, highlight=False)
        self.interactive = self._console.is_terminal
        self._live: Live | None = None
        self._redirected: list[tuple[logging.StreamHandler[Any], IO[str]]] = []
        if self.interactive:
            self._live = Live(console=self._console, get_renderable=self.render,
                              refresh_per_second=refresh_per_second, transient=False,
                              redirect_stdout=True, redirect_stderr=True)
            self._live.start()
            self._redirect_log_handlers()

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public ----------------------------------------------------------------------------

    def update(self, **fields: Any) -> None:
        """Set some fields (see the module docstring); others keep their values."""
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return
            if ("last_checkpoint_id" in fields
                    and fields["last_checkpoint_id"] != self._fields.get("last_checkpoint_id")):
                self._checkpoint_seen_at = now
            self._fields.update(fields)
            if "records_in" in fields and fields["records_in"] is not None:
                self._rate_samples.append((now, int(fields["records_in"])))
                while len(self._rate_samples) > 2 and now - self._rate_samples[0][0] > RATE_WINDOW_S:
                    self._rate_samples.popleft()
            due = (self._last_log_at is None or now - self._last_log_at >= self.log_interval_s)
            if not self.interactive and due:
                self._last_log_at = now
                line = self.plain_line(now)
            else:
                line = None
        if line is not None:
            log.info("%s", line)

    def close(self) -> None:
        """Stop the live line, leaving its last state on screen (or log the last line).
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            has_fields = bool(self._fields)
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._restore_log_handlers()
        elif has_fields:
            log.info("%s", self.plain_line(time.monotonic()))

    @property
    def fields(self) -> dict[str, Any]:
        """A copy of the current fields."""
        with self._lock:
            return dict(self._fields)

    # -- rendering -------------------------------------------------------------------------

    def records_per_second(self, now: float | None = None) -> float | None:
        """Input rate over the last :data:`RATE_WINDOW_S` seconds of updates."""
        with self._lock:
            samples = list(self._rate_samples)
        if len(samples) < 2:
            return None
        (t0, n0), (t1, n1) = samples[0], samples[-1]
        if t1 - t0 <= 0 or n1 < n0:  # a restart rewinds the counts
            return None
        return (n1 - n0) / (t1 - t0)

    def _parts(self, now: float) -> list[tuple[str, str]]:
        """(text, style) pieces of the line."""
        with self._lock:
            f = dict(self._fields)
            seen_at = self._checkpoint_seen_at
        parts: list[tuple[str, str]] = [(self.job_name, "bold")]
        if f.get("status"):
            status = str(f["status"])
            style = ("green" if status in ("RUNNING", "FINISHED")
                     else "yellow" if status == "RESTARTING" else "red"
                     if status == "FAILED" else "")
            parts.append((status, style))
        if f.get("records_in") is not None:
            rate = self.records_per_second(now)
            text = f"in {int(f['records_in']):,}"
            if rate is not None:
                text += f" ({rate:,.0f}/s)"
            parts.append((text, ""))
        if f.get("records_out") is not None:
            parts.append((f"out {int(f['records_out']):,}", ""))
        if f.get("last_checkpoint_id") is not None:
            text = f"checkpoint {f['last_checkpoint_id']}"
            if f.get("last_checkpoint_duration_ms") is not None:
                text += f": {float(f['last_checkpoint_duration_ms']):,.0f} ms"
            if seen_at is not None:
                text += f", {now - seen_at:.0f} s ago"
            parts.append((text, "cyan"))
        elif f.get("status") is not None:
            parts.append(("no checkpoint yet", "dim"))
        if f.get("checkpoints_completed") is not None:
            parts.append((f"completed {f['checkpoints_completed']}", ""))
        if f.get("checkpoints_failed") is not None:
            failed = int(f["checkpoints_failed"])
            parts.append((f"failed {failed}", "red" if failed else ""))
        if f.get("restarts") is not None:
            restarts = int(f["restarts"])
            parts.append((f"restarts {restarts}", "yellow" if restarts else ""))
        for key, value in f.items():
            if key not in KNOWN_FIELDS and value is not None:
                parts.append((f"{key}={value}", "dim"))
        return parts

    def render(self) -> Text:
        """The live line (called by the refresh thread)."""
        line = Text(no_wrap=True, overflow="ellipsis")
        for i, (text, style) in enumerate(self._parts(time.monotonic())):
            if i:
                line.append("  ")
            line.append(text, style=style or None)
        return line

    def plain_line(self, now: float | None = None) -> str:
        """The line without styles, as logged when not on a terminal."""
        return "  ".join(text for text, _ in self._parts(time.monotonic() if now is None else now))

    # -- logging while live ----------------------------------------------------------------

    def _redirect_log_handlers(self) -> None:
        """Send log handlers writing to this terminal through the live display, so their
        lines appear above the progress line instead of tearing it."""
        target = self._console.file
        terminals = {id(s) for s in (sys.stderr, sys.__stderr__, sys.stdout, sys.__stdout__,
                                     target) if s is not None}
        loggers = [logging.getLogger()] + [
            logger for logger in logging.Logger.manager.loggerDict.values()
            if isinstance(logger, logging.Logger) and logger.handlers]
        for logger in loggers:
            for handler in logger.handlers:
                if (type(handler) is logging.StreamHandler
                        and id(handler.stream) in terminals):
                    original = handler.setStream(FileProxy(self._console, handler.stream))
                    if original is not None:
                        self._redirected.append((handler, original))

    def _restore_log_handlers(self) -> None:
        for handler, original in self._redirected:
            handler.setStream(original)
        self._redirected.clear()


__all__ = ["KNOWN_FIELDS", "RATE_WINDOW_S", "ProgressReporter"]
