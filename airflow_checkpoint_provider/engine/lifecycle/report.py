"""A checkpoint report of one job: charts over time and the statistics of :mod:`.stats`.

``render_report(store, job_ref, out_path)`` writes a single self-contained HTML file: the
charts are matplotlib figures embedded as base64 PNG ``<img>`` elements, the styles are
inline and there is no script, so the page opens offline, from a mail attachment or an
Airflow log, and renders the same in every browser. ``fmt="png"`` writes one image holding
the three charts instead, for embedding in a README, a ticket or a chat message.

The charts, over wall-clock time (UTC):

1. end-to-end duration of every completed checkpoint and savepoint;
2. full state size against the bytes uploaded for each checkpoint (incremental
   checkpoints upload less than their full size);
3. barrier alignment time, the slowest task's per checkpoint (a rising line means
   backpressure or a skewed channel).

Each chart marks savepoints (green vertical lines), restarts (red dashed vertical lines,
labelled with the checkpoint they restored) and failed checkpoints (red crosses on the
time axis). Matplotlib is used through its object API with the Agg canvas only (no pyplot
state), so reports can be rendered from any thread, and on a machine without a display.
"""

from __future__ import annotations

import base64
import io
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from ..catalog import AttemptRecord, CheckpointRecord, JobRecord, MetadataStore
from ..connectors.kafka.lag import checkpoint_consumer_lag
from ..fs.private import makedirs_private, open_private
from .stats import (
    TASK_METRICS,
    is_completed,
    is_savepoint,
    max_task_metric,
    slowest_task,
    statistics_from_records,
    task_total_ms,
)

log = logging.getLogger(__name__)

#: Output formats of :func:`render_report`.
FORMATS = ("html", "png")
#: Restart and savepoint labels drawn on a chart at most (lines are always drawn).
MAX_LABELS = 12

_COMPLETED_COLOR = "#1f77b4"
_UPLOADED_COLOR = "#ff7f0e"
_SAVEPOINT_COLOR = "#2ca02c"
_FAILED_COLOR = "#d62728"
_RESTART_COLOR = "#d62728"


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows, read from the store once."""

    job: JobRecord
    checkpoints: list[CheckpointRecord]
    attempts: list[AttemptRecord]
    stats: dict[str, Any]

    @classmethod
    def load(cls, store: MetadataStore, job_ref: str) -> ReportData:
        job = store.resolve_job(job_ref)
        checkpoints = store.list_checkpoints(job.job_id)
        attempts = store.list_attempts(job.job_id)
        return cls(job, checkpoints, attempts,
                   statistics_from_records(job, checkpoints, attempts))

    @property
    def completed(self) -> list[CheckpointRecord]:
        return [c for c in self.checkpoints if is_completed(c)]

    @property
    def failed(self) -> list[CheckpointRecord]:
        return [c for c in self.checkpoints if c.status == "FAILED"]

    @property
    def savepoints(self) -> list[CheckpointRecord]:
        return [c for c in self.completed if is_savepoint(c)]

    @property
    def restarts(self) -> list[AttemptRecord]:
        return [a for a in self.attempts if a.attempt > 0]

    def latest_completed_checkpoint(self) -> CheckpointRecord | None:
        """The newest completed periodic checkpoint, else the newest completed savepoint."""
        completed = self.completed
        plain = [c for c in completed if not is_savepoint(c)]
        return max(plain or completed, key=lambda c: c.checkpoint_id, default=None)


def render_report(store: MetadataStore, job_ref: str, out_path: str | Path, *,
                  fmt: str = "html") -> Path:
    """Write the checkpoint report of a job.

    :param store: the metadata DB.
    :param job_ref: a job id, a unique id prefix or a job name (its newest run).
    :param out_path: the file to write (its folder is created).
    :param fmt: ``"html"`` (self-contained page: charts, summary and per-task tables) or
        ``"png"`` (one image with the three charts).
    :returns: the path written.
    :raises LookupError: no job matches ``job_ref``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"report format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
    data = ReportData.load(store, job_ref)
    out = Path(out_path)
    makedirs_private(str(out.parent))  # a report names paths and failures: 0700 / 0600
    body = render_png(data) if fmt == "png" else render_html(data).encode("utf-8")
    with open_private(str(out)) as f:
        f.write(body)
    log.info("Wrote %s checkpoint report of job %s (%s, %d checkpoints) to %s", fmt,
             data.job.job_name, data.job.job_id, len(data.checkpoints), out)
    return out


# -- charts ----------------------------------------------------------------------------------

def _times(records: Sequence[CheckpointRecord]) -> list[datetime]:
    return [c.complete_time or c.trigger_time for c in records]


def _series(data: ReportData, records: Sequence[CheckpointRecord],
            values: Sequence[float]) -> tuple[list[datetime], list[float]]:
    """Times and values of a line, broken (a NaN point) at every restart, so the line does
    not join the last checkpoint of one attempt to the first of the next."""
    restarts = sorted(a.started_at for a in data.restarts)
    times, out = [], []
    previous: datetime | None = None
    for when, value in zip(_times(records), values, strict=True):
        if previous is not None and any(previous < r <= when for r in restarts):
            times.append(previous)
            out.append(math.nan)
        times.append(when)
        out.append(value)
        previous = when
    return times, out


def _mark_events(ax: Axes, data: ReportData, *, labels: bool) -> None:
    """Savepoints and restarts as vertical lines, failed checkpoints as crosses on the
    time axis."""
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for i, sp in enumerate(data.savepoints):
        when = sp.complete_time or sp.trigger_time
        ax.axvline(when, color=_SAVEPOINT_COLOR, linewidth=1.2, alpha=0.8)
        if labels and i < MAX_LABELS:
            ax.text(when, 0.98, f" savepoint {sp.checkpoint_id}", transform=top, rotation=90,
                    va="top", ha="right", fontsize=7, color=_SAVEPOINT_COLOR)
    for i, attempt in enumerate(data.restarts):
        ax.axvline(attempt.started_at, color=_RESTART_COLOR, linestyle="--", linewidth=1.2)
        if labels and i < MAX_LABELS:
            source = (f"chk {attempt.restored_checkpoint_id}"
                      if attempt.restored_checkpoint_id is not None else "scratch")
            ax.text(attempt.started_at, 0.98, f" restart {attempt.attempt} from {source}",
                    transform=top, rotation=90, va="top", ha="left", fontsize=7,
                    color=_RESTART_COLOR)
    failed = data.failed
    if failed:
        ax.scatter(_times(failed), [0.02] * len(failed), transform=top, marker="x", s=40,
                   color=_FAILED_COLOR, zorder=5, clip_on=False)


def _legend_extras() -> list[Line2D]:
    return [
        Line2D([], [], color=_SAVEPOINT_COLOR, linewidth=1.2, label="savepoint taken"),
        Line2D([], [], color=_RESTART_COLOR, linestyle="--", linewidth=1.2, label="restart"),
        Line2D([], [], color=_FAILED_COLOR, marker="x", linestyle="none",
               label="failed checkpoint"),
    ]


def _finish_axes(ax: Axes, data: ReportData, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=11, loc="left")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    _mark_events(ax, data, labels=True)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + _legend_extras(), fontsize=8, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)
    if not data.completed:
        ax.text(0.5, 0.5, "no completed checkpoint", transform=ax.transAxes,
                ha="center", va="center", color="gray")


def draw_duration(ax: Axes, data: ReportData) -> None:
    """End-to-end duration of each completed checkpoint; savepoints as diamonds."""
    completed = data.completed
    plain = [c for c in completed if not is_savepoint(c)]
    ax.plot(*_series(data, plain, [c.duration_ms or 0 for c in plain]), marker="o",
            markersize=3, linewidth=1, color=_COMPLETED_COLOR, label="checkpoint")
    if data.savepoints:
        ax.scatter(_times(data.savepoints), [c.duration_ms or 0 for c in data.savepoints],
                   marker="D", s=36, color=_SAVEPOINT_COLOR, zorder=4,
                   label="savepoint duration")
    _finish_axes(ax, data, "Checkpoint duration (trigger to completion)", "ms")


def draw_sizes(ax: Axes, data: ReportData) -> None:
    """Full state size against the bytes uploaded for each completed checkpoint."""
    completed = data.completed
    unit, factor = _byte_unit(max((c.state_size or 0 for c in completed), default=0))
    ax.plot(*_series(data, completed, [(c.state_size or 0) / factor for c in completed]),
            linewidth=4, alpha=0.45, color=_COMPLETED_COLOR, label="full state size")
    ax.plot(*_series(data, completed, [(c.checkpointed_size or 0) / factor for c in completed]),
            linewidth=1, marker=".", color=_UPLOADED_COLOR, label="uploaded (checkpointed size)")
    _finish_axes(ax, data, "Checkpoint size: uploaded vs full", unit)


def draw_alignment(ax: Axes, data: ReportData) -> None:
    """The slowest task's barrier alignment time per completed checkpoint."""
    completed = data.completed
    values = [max_task_metric(c, "alignment_ms") or 0.0 for c in completed]
    ax.plot(*_series(data, completed, values), marker="o", markersize=3, linewidth=1,
            color="#9467bd", label="max alignment over tasks")
    _finish_axes(ax, data, "Barrier alignment time (slowest task)", "ms")


CHARTS = (
    ("duration", "Checkpoint duration over time", draw_duration),
    ("size", "Uploaded vs full checkpoint size over time", draw_sizes),
    ("alignment", "Maximum barrier alignment time per checkpoint", draw_alignment),
)


def _figure_png(fig: Figure, dpi: int = 100) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def chart_png(data: ReportData, draw: Any, *, width: float = 11.0, height: float = 3.6) -> bytes:
    """One chart (a ``draw_*`` function) as PNG bytes."""
    fig = Figure(figsize=(width, height))
    # fixed margins (not a layout engine) so every chart's plot area has the same width and
    # the time axes line up on the page; the right margin holds the legend
    fig.subplots_adjust(left=0.07, right=0.80, top=0.90, bottom=0.14)
    draw(fig.add_subplot(), data)
    return _figure_png(fig)


def render_png(data: ReportData) -> bytes:
    """The three charts stacked in one PNG image, with the job in the title."""
    fig = Figure(figsize=(12, 11))
    fig.subplots_adjust(left=0.07, right=0.80, top=0.93, bottom=0.06, hspace=0.25)
    axes = fig.subplots(len(CHARTS), 1, sharex=True)
    for ax, (_key, _alt, draw) in zip(axes, CHARTS, strict=True):
        draw(ax, data)
    counts = data.stats["counts"]
    fig.suptitle(f"Checkpoints of job {data.job.job_name} ({data.job.job_id[:8]}): "
                 f"{counts['completed']} completed, {counts['failed']} failed, "
                 f"{counts['savepoints']} savepoints, {counts['restarts']} restarts",
                 fontsize=12)
    return _figure_png(fig)


# -- HTML ------------------------------------------------------------------------------------

_CSS = """
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Arial, sans-serif;
       margin: 24px; color: #222; max-width: 1300px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: right; }
th { background: #f2f2f2; } td.text, th.text { text-align: left; }
tr.slowest td { background: #ffe4c4; font-weight: bold; }
.badge { background: #d9480f; color: white; border-radius: 3px; padding: 0 5px;
         font-size: 11px; margin-left: 6px; }
.failed { color: #b00020; } pre.failure { white-space: pre-wrap; font-size: 12px; } tr.failedrow td { background: #fde8e8; }
img.chart { display: block; max-width: 100%; border: 1px solid #e2e2e2; margin: 8px 0; }
"""


def _e(value: Any) -> Markup:
    """``value`` as escaped text (``Markup``: composing it with ``Markup.format`` or the page
    template never escapes it twice, and never leaves a plain value unescaped)."""
    return escape("" if value is None else str(value))


def _byte_unit(max_bytes: float) -> tuple[str, float]:
    for unit, factor in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if max_bytes >= factor:
            return unit, factor
    return "bytes", 1.0


def format_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    unit, factor = _byte_unit(value)
    return f"{int(value)} B" if factor == 1.0 else f"{value / factor:.1f} {unit}"


def format_ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:.0f} ms" if value >= 100 else f"{value:.2f} ms"


def _fmt_time(value: str | datetime | None) -> str:
    if value is None:
        return "-"
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
           text_cols: Sequence[int] = (0,), row_classes: Sequence[str] | None = None,
           table_id: str = "") -> str:
    """An HTML table of already escaped cells; ``text_cols`` are left-aligned."""

    def cell(tag: str, i: int, value: str) -> Markup:
        cls = Markup(' class="text"') if i in text_cols else Markup("")
        # a plain str cell is escaped here; Markup cells were built escaped
        return Markup("<{0}{1}>{2}</{0}>").format(Markup(tag), cls, value)

    head = Markup("").join(cell("th", i, _e(h)) for i, h in enumerate(headers))
    body = []
    for n, row in enumerate(rows):
        cls = row_classes[n] if row_classes else ""
        attr = Markup(' class="{}"').format(cls) if cls else Markup("")
        body.append(Markup("<tr{}>{}</tr>").format(
            attr, Markup("").join(cell("td", i, v) for i, v in enumerate(row))))
    ident = Markup(' id="{}"').format(table_id) if table_id else Markup("")
    return Markup("<table{}><thead><tr>{}</tr></thead><tbody>{}</tbody></table>").format(
        ident, head, Markup("").join(body))


_SUMMARY_ROWS = (
    ("end_to_end_duration_ms", "End-to-end duration", format_ms),
    ("state_size", "Full state size", format_bytes),
    ("checkpointed_size", "Checkpointed (uploaded) size", format_bytes),
    ("sync_duration_ms", "Sync duration (per task)", format_ms),
    ("async_duration_ms", "Async duration (per task)", format_ms),
    ("alignment_duration_ms", "Alignment duration (per task)", format_ms),
)


def _summary_html(stats: dict[str, Any]) -> str:
    counts = stats["counts"]
    count_table = _table(
        ["Completed", "Failed", "In progress", "Restored", "Restarts", "Savepoints", "Total"],
        [[_e(counts[k]) for k in ("completed", "failed", "in_progress", "restored", "restarts",
                                  "savepoints", "total")]],
        text_cols=(), table_id="counts")
    rows = []
    for key, label, fmt in _SUMMARY_ROWS:
        s = stats["summary"][key]
        rows.append([_e(label), _e(s["count"])]
                    + [_e(fmt(s[k])) for k in ("min", "avg", "max", "p50", "p90", "p99")])
    summary_table = _table(["Metric", "Count", "Min", "Avg", "Max", "p50", "p90", "p99"], rows,
                           table_id="summary")
    return count_table + summary_table


def _latest_html(stats: dict[str, Any]) -> str:
    latest = stats["latest"]
    rows = []
    for key, label in (("completed", "Latest completed checkpoint"),
                       ("savepoint", "Latest savepoint"), ("failed", "Latest failed checkpoint")):
        entry = latest[key]
        if entry is None:
            rows.append([_e(label), "-", "-", "-", "-", "-"])
            continue
        when = entry["complete_time"] or entry["trigger_time"]
        detail = (Markup('<span class="failed">{}</span>').format(entry["failure_reason"])
                  if entry["failure_reason"] else _e(entry["location"]))
        rows.append([_e(label), _e(entry["checkpoint_id"]), _e(_fmt_time(when)),
                     _e(format_ms(entry["end_to_end_duration_ms"])),
                     _e(format_bytes(entry["state_size"])), detail])
    restored = latest["restored"]
    if restored is None:
        rows.append(["Latest restore", "-", "-", "-", "-", "-"])
    else:
        kind = "savepoint" if restored["is_savepoint"] else "checkpoint"
        why = restored["previous_failure_reason"]
        detail = _e(f"attempt {restored['attempt']} from {kind} {restored['restored_from']}")
        if why:  # its first line (the Failures section has the traceback)
            detail += Markup('<br><span class="failed">after: {}</span>').format(
                why.splitlines()[0])
        rows.append(["Latest restore", _e(restored["restored_checkpoint_id"]),
                     _e(_fmt_time(restored["restore_time"])), "-", "-", detail])
    return _table(["", "Id", "Time", "Duration", "State size", "Location / reason"], rows,
                  text_cols=(0, 5), table_id="latest")


def _task_table_html(checkpoint: CheckpointRecord | None) -> str:
    if checkpoint is None:
        return Markup("<p>No completed checkpoint yet.</p>")
    tasks = sorted(checkpoint.task_stats or (), key=lambda t: (t.get("vertex"), t.get("subtask")))
    if not tasks:
        return Markup("<p>The latest completed checkpoint recorded no per-task statistics.</p>")
    slowest = slowest_task(checkpoint)
    rows, classes = [], []
    for task in tasks:
        is_slowest = task is slowest
        name = Markup("vertex {} / subtask {}").format(task.get("vertex"), task.get("subtask"))
        if is_slowest:
            name += Markup('<span class="badge">slowest</span>')
        rows.append([name] + [_e(format_ms(task.get(m))) for m in TASK_METRICS]
                    + [_e(format_ms(task_total_ms(task))), _e(format_bytes(task.get("state_size"))),
                       _e(format_bytes(task.get("checkpointed_size"))),
                       _e(format_bytes(task.get("inflight_bytes")) if task.get("unaligned")
                          else "aligned")])
        classes.append("slowest" if is_slowest else "")
    kind = "savepoint" if is_savepoint(checkpoint) else "checkpoint"
    caption = Markup("<p>Per-task statistics of {} {} (completed {}, {} end to end). The "
                     "slowest task (alignment + sync + async) is highlighted.</p>").format(
        kind, checkpoint.checkpoint_id, _fmt_time(checkpoint.complete_time),
        format_ms(checkpoint.duration_ms))
    return caption + _table(["Task", "Sync", "Async", "Alignment", "Total", "State size",
                             "Uploaded", "In flight (unaligned)"], rows, row_classes=classes,
                            table_id="tasks")


def _kafka_lag_html(data: ReportData) -> Markup:
    """The Kafka consumer lag per source and topic-partition at the latest completed
    checkpoint (end offset from the consumer's fetch responses - checkpointed offset), and
    the total at the recent ones; nothing for a job without a Kafka source."""
    done = [c for c in data.checkpoints if is_completed(c)]
    lags = [lag for lag in map(checkpoint_consumer_lag, done[-10:]) if lag is not None]
    if not lags:
        return Markup("")
    latest = lags[-1]
    rows = [[_e(uid), _e(split), _e("-" if off[0] is None else off[0]),
             _e("unknown" if off[1] is None else off[1]),
             _e("unknown" if lag is None else lag)]
            for (uid, split), lag in sorted(latest.partitions.items())
            for off in [latest.offsets.get((uid, split), (None, None))]]
    total = "unknown (a partition had no fetch response yet)" if latest.total is None else (
        f"{latest.total} records")
    recent = ", ".join(f"{lag.checkpoint_id}: {'?' if lag.total is None else lag.total}"
                       for lag in lags)
    return Markup('<h2>Kafka consumer lag</h2>\n<p id="kafka-lag-total">At checkpoint {}: '
                  '<b>{}</b> behind the partitions\' end offsets. Recent checkpoints (id: '
                  'total lag): {}.</p>\n{}\n').format(
        latest.checkpoint_id, total, recent,
        _table(["Source", "Topic:partition", "Checkpointed offset", "End offset", "Lag"],
               rows, text_cols=(0, 1), table_id="kafka-lag"))


def _history_html(stats: dict[str, Any]) -> str:
    rows, classes = [], []
    for entry in stats["history"]:
        reason = entry["failure_reason"]
        rows.append([_e(entry["checkpoint_id"]), _e(entry["kind"]), _e(entry["status"]),
                     _e(_fmt_time(entry["trigger_time"])),
                     _e(format_ms(entry["end_to_end_duration_ms"])),
                     _e(format_bytes(entry["checkpointed_size"])),
                     Markup('<span class="failed">{}</span>').format(reason) if reason else ""])
        classes.append("failedrow" if entry["status"] == "FAILED" else "")
    if not rows:
        return Markup("<p>No checkpoint was triggered.</p>")
    return _table(["Id", "Kind", "Status", "Triggered", "Duration", "Uploaded", "Failure"],
                  rows, text_cols=(1, 2, 3, 6), row_classes=classes, table_id="history")


def _failures_html(data: ReportData) -> Markup:
    """The job's failure reason and each failed attempt's (where the failure happened: the
    operator, uid, subtask and phase, then the remote traceback)."""
    entries = [(f"Job {data.job.status}", data.job.failure_reason)] if (
        data.job.failure_reason) else []
    entries += [(f"Attempt {a.attempt}", a.failure_reason) for a in data.attempts
                if a.failure_reason and a.failure_reason != data.job.failure_reason]
    if not entries:
        return Markup("")
    body = Markup("").join(Markup('<h3>{}</h3><pre class="failed failure">{}</pre>').format(
        what, reason) for what, reason in entries)
    return Markup("<h2>Failures</h2>\n{}\n").format(body)


def _stall_html(data: ReportData) -> Markup:
    """Where the job stopped progressing (the progress watchdog's verdict in the job row:
    the operator, records or watermark, since when), if it did."""
    stall = data.job.progress_stall
    if not stall:
        return Markup("")
    ended = "" if data.job.status in ("RUNNING", "RESTARTING") else (
        f" (recorded before the job ended {data.job.status})")
    return Markup('<h2>Progress stalled</h2>\n<p class="failed stall" id="stall">Operator '
                  '<b>{}</b> ({} stall) since {}{}: {}</p>\n').format(
        stall.get("operator"), stall.get("kind"), _fmt_time(stall.get("since")), ended,
        stall.get("detail"))


#: the page; autoescaped: every value is text unless it is ``Markup`` built by the functions
#: above (which escape what they format)
_PAGE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Checkpoints of {{ job.job_name }} ({{ job.job_id[:8] }})</title>
<style>{{ css }}</style>
</head>
<body>
<h1>Checkpoints of job {{ job.job_name }}</h1>
<p class="meta">job id {{ job.job_id }} &middot; version {{ job.version or "-" }} &middot;
status {{ job.status }} &middot; parallelism {{ job.parallelism }} &middot;
created {{ created }} &middot; report generated {{ generated }}</p>
{{ stall }}{{ failures }}<h2>Summary</h2>
{{ summary }}
{{ latest }}
<h2>Over time</h2>
<p class="meta">Green lines: savepoints. Red dashed lines: restarts (with the checkpoint they
restored). Red crosses on the time axis: failed checkpoints.</p>
{% for chart in charts %}{{ chart }}{% endfor %}
<h2>Tasks of the latest completed checkpoint</h2>
{{ tasks }}
{{ kafka_lag }}<h2>Recent checkpoints</h2>
{{ history }}
</body>
</html>
""")


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML page (charts embedded as base64 PNG)."""
    charts = []
    for key, alt, draw in CHARTS:
        encoded = base64.b64encode(chart_png(data, draw)).decode("ascii")
        charts.append(Markup('<img class="chart" id="chart-{}" alt="{}" '
                             'src="data:image/png;base64,{}">').format(key, alt, encoded))
    return _PAGE.render(
        job=data.job, css=Markup(_CSS), created=_fmt_time(data.job.created_at),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        failures=_failures_html(data), stall=_stall_html(data),
        summary=_summary_html(data.stats), latest=_latest_html(data.stats), charts=charts,
        tasks=_task_table_html(data.latest_completed_checkpoint()),
        kafka_lag=_kafka_lag_html(data),
        history=_history_html(data.stats))


__all__ = [
    "CHARTS",
    "FORMATS",
    "ReportData",
    "chart_png",
    "draw_alignment",
    "draw_duration",
    "draw_sizes",
    "format_bytes",
    "format_ms",
    "render_html",
    "render_png",
    "render_report",
]
