"""Is a job stable? A verdict over a time window, with the figures, from the metadata DB.

Used as the gate of blue-green deployments and upgrades: a new version that runs is not
yet a healthy one. Over the window ``[since, since + window_s]`` the job must

1. stay up: RUNNING at the end, with at most ``max_restarts`` restarts;
2. checkpoint: at least ``min_checkpoints`` completed, none slower than
   ``max_checkpoint_duration_ms``, at most ``max_failed_checkpoints`` failed;
3. keep pace: records read per second by its sources (``throughput_of="sources"``, the
   default), or processed per operator (``"operators"``), between its first and last
   completed checkpoint of the window, at least ``min_throughput_ratio`` of the baseline
   job's over the same window (blue, running beside it on the same input). Input is the
   measure that suits windowed jobs: what a window operator emits comes in bursts when
   windows fire, so the operators after it show 0 records/s between two checkpoints that
   fall between two firings (a gate shorter than a window, or one whose firings fall just
   outside the checkpoints), though the job is healthy;
3b. make progress (``require_progress``): over the whole window (its first to its last
   completed checkpoint), while its sources read records, its lowest input watermark
   advances (event-time jobs: a frozen watermark holds every window's output back), and
   the job master's progress watchdog reports no stall (``jobs.progress_stall``: records
   queued in front of an operator that does not move, or a watermark stopped in a chain).
   This catches a job whose input arrives while its output stands still, which the input
   rate alone cannot see, without judging bursty window output by its instantaneous rate;
4. not fall behind: the lag of its watermark (checkpoint trigger time minus the lowest
   input watermark of its tasks) grows by at most ``max_watermark_lag_growth_ms``, and
   its backlog (the longest wait of a checkpoint barrier behind queued records, Flink's
   "checkpoint start delay") grows by at most ``max_backlog_growth_ms``.

A bound of ``None`` switches its criterion off. The figures come from what every task
acknowledges with each checkpoint (records in/out per operator, watermark, start delay):
no metrics system is needed. Each criterion's :class:`Check` says ``ok`` (``None``: could
not be measured, e.g. no watermarks in a job without event time), the figure and the bound.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..catalog import CheckpointRecord, MetadataStore
from ..catalog.models import CheckpointKind, CheckpointStatus, JobStatus
from ..errors import ConfigurationError

#: the values of :attr:`StabilityCriteria.throughput_of`
THROUGHPUT_OF = ("sources", "operators")


@dataclass(frozen=True)
class StabilityCriteria:
    """What "stable" means; see the module documentation. ``None`` switches a bound off."""

    window_s: float = 60.0
    max_restarts: int | None = 0
    min_checkpoints: int | None = 2
    max_checkpoint_duration_ms: float | None = None
    max_failed_checkpoints: int | None = 0
    min_throughput_ratio: float | None = 0.8
    #: what the throughput ratio compares: ``"sources"`` (records read) or ``"operators"``
    #: (every operator, the slowest one decides)
    throughput_of: str = "sources"
    #: 3b: watermark advances, operators move, no stall reported, while input is read
    require_progress: bool = True
    max_watermark_lag_growth_ms: float | None = None
    max_backlog_growth_ms: float | None = None
    #: a CDC source's replication lag (seconds behind the source database) at every
    #: completed checkpoint of the window
    max_replication_lag_s: float | None = None

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ConfigurationError(f"stability window_s must be > 0 seconds (got {self.window_s})")
        for name in ("max_restarts", "min_checkpoints", "max_checkpoint_duration_ms",
                     "max_failed_checkpoints", "min_throughput_ratio",
                     "max_watermark_lag_growth_ms", "max_backlog_growth_ms",
                     "max_replication_lag_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(f"stability criterion {name} must be >= 0 (got {value})")
        if self.throughput_of not in THROUGHPUT_OF:
            raise ConfigurationError(f"stability criterion throughput_of must be one of "
                                     f"{list(THROUGHPUT_OF)} (got {self.throughput_of!r})")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> StabilityCriteria:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigurationError(f"unknown stability criteria {unknown}; known: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Check:
    """One criterion: ``ok`` is ``None`` when it could not be measured."""

    name: str
    ok: bool | None
    figure: Any
    bound: Any
    detail: str


@dataclass
class StabilityVerdict:
    job_id: str
    job_name: str
    since: str
    until: str
    baseline_job_id: str | None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def describe(self) -> str:
        head = (f"job {self.job_name} ({self.job_id}) is {'stable' if self.ok else 'NOT stable'} "
                f"over {self.since} .. {self.until}")
        marks = {True: "ok  ", False: "FAIL", None: "n/a "}
        return "\n".join([head] + [f"  {marks[c.ok]} {c.name}: {c.detail}" for c in self.checks])


def _completed(rows: list[CheckpointRecord]) -> list[CheckpointRecord]:
    return [c for c in rows if c.status in (CheckpointStatus.COMPLETED, CheckpointStatus.SUBSUMED)]


def _in_window(rows: list[CheckpointRecord], since: datetime, until: datetime) -> list[CheckpointRecord]:
    return [c for c in rows if since <= c.trigger_time <= until]


def _current_attempt_start(store: MetadataStore, job_id: str) -> datetime | None:
    attempts = store.list_attempts(job_id)
    return attempts[-1].started_at if attempts else None


def _processed(checkpoint: CheckpointRecord) -> dict[str, int]:
    """Records each operator processed up to the checkpoint's barrier, over its subtasks
    (in for operators with input, out for sources)."""
    out: dict[str, int] = {}
    for task in checkpoint.task_stats or ():
        for op, counts in (task.get("records") or {}).items():
            out[op] = out.get(op, 0) + max(int(counts[0]), int(counts[1]))
    return out


def _sources(checkpoint: CheckpointRecord) -> set[str]:
    """The operators that took no input but emitted records: the sources."""
    taken: dict[str, int] = {}
    emitted: dict[str, int] = {}
    for task in checkpoint.task_stats or ():
        for op, counts in (task.get("records") or {}).items():
            taken[op] = taken.get(op, 0) + int(counts[0])
            emitted[op] = emitted.get(op, 0) + int(counts[1])
    return {op for op in taken if taken[op] == 0 and emitted[op] > 0}


def _watermark(checkpoint: CheckpointRecord) -> float | None:
    marks = [t["watermark"] for t in checkpoint.task_stats or () if t.get("watermark") is not None]
    return min(marks) if marks else None


def _window_rows(store: MetadataStore, job_id: str, since: datetime,
                 until: datetime) -> list[CheckpointRecord]:
    """The completed checkpoints of the window with record counts, of the job's current
    attempt (counts restart with it)."""
    start = _current_attempt_start(store, job_id)
    rows = _in_window(_completed(store.list_checkpoints(job_id, kind=CheckpointKind.CHECKPOINT)),
                      max(since, start) if start else since, until)
    return [c for c in rows if any(t.get("records") for t in c.task_stats or ())]


def operator_rates(store: MetadataStore, job_id: str, since: datetime,
                   until: datetime) -> tuple[dict[str, float], float] | None:
    """Records per second each operator processed between the first and last completed
    checkpoints of the window (of the job's current attempt: counts restart with it), and
    the seconds between them; ``None`` with fewer than two such checkpoints."""
    rows = _window_rows(store, job_id, since, until)
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    seconds = (last.trigger_time - first.trigger_time).total_seconds()
    if seconds <= 0:
        return None
    a, b = _processed(first), _processed(last)
    return {op: max(0, b[op] - a.get(op, 0)) / seconds for op in b}, seconds


def _lag_ms(checkpoint: CheckpointRecord) -> float | None:
    marks = [t["watermark"] for t in checkpoint.task_stats or () if t.get("watermark") is not None]
    if not marks:
        return None
    return checkpoint.trigger_time.timestamp() * 1000.0 - min(marks)


def _backlog_ms(checkpoint: CheckpointRecord) -> float | None:
    delays = [t["start_delay_ms"] for t in checkpoint.task_stats or ()
              if t.get("start_delay_ms") is not None]
    return max(delays) if delays else None


def _growth(rows: list[CheckpointRecord], measure) -> tuple[float, float, float] | None:
    values = [(c, measure(c)) for c in rows]
    values = [(c, v) for c, v in values if v is not None]
    if len(values) < 2:
        return None
    first, last = values[0][1], values[-1][1]
    return first, last, last - first


def assess_stability(store: MetadataStore, job_id: str, *, since: datetime,
                     criteria: StabilityCriteria, until: datetime | None = None,
                     baseline_job_id: str | None = None) -> StabilityVerdict:
    """The verdict on ``job_id`` over ``[since, until]`` (default: now), against
    ``baseline_job_id``'s throughput if given."""
    job = store.get_job(job_id)
    if job is None:
        raise LookupError(f"no job {job_id!r} in the metadata DB")
    until = until or datetime.now(UTC)
    verdict = StabilityVerdict(job_id, job.job_name, since.isoformat(timespec="seconds"),
                               until.isoformat(timespec="seconds"), baseline_job_id)
    add = verdict.checks.append
    c = criteria

    # 1. up: RUNNING, restarts
    running = job.status == JobStatus.RUNNING
    add(Check("running", running, job.status, "RUNNING",
              f"{job.status}" + (f": {job.failure_reason}" if job.failure_reason and not running
                                 else "")))
    attempts = store.list_attempts(job_id)
    restarts = [a for a in attempts if a.attempt > 0 and since <= a.started_at <= until]
    if c.max_restarts is not None:
        # a restart's cause is the failure that ended the attempt before it
        causes = {a.attempt + 1: a.failure_reason for a in attempts}
        why = (f" (last failure: {causes.get(restarts[-1].attempt) or job.failure_reason})"
               if restarts else "")
        add(Check("restarts", len(restarts) <= c.max_restarts, len(restarts), c.max_restarts,
                  f"{len(restarts)} restart(s) in the window, at most {c.max_restarts}{why}"))

    # 2. checkpoints
    rows = _in_window(store.list_checkpoints(job_id, kind=CheckpointKind.CHECKPOINT), since, until)
    done = _completed(rows)
    if c.min_checkpoints is not None:
        add(Check("checkpoints", len(done) >= c.min_checkpoints, len(done), c.min_checkpoints,
                  f"{len(done)} completed, at least {c.min_checkpoints}"))
    if c.max_checkpoint_duration_ms is not None:
        slowest = max((r.duration_ms or 0 for r in done), default=None)
        add(Check("checkpoint_duration", None if slowest is None else
                  slowest <= c.max_checkpoint_duration_ms, slowest, c.max_checkpoint_duration_ms,
                  "no completed checkpoint" if slowest is None else
                  f"slowest {slowest} ms, at most {c.max_checkpoint_duration_ms:.0f} ms"))
    if c.max_failed_checkpoints is not None:
        failed = [r for r in rows if r.status == CheckpointStatus.FAILED]
        why = f" (last: {failed[-1].failure_reason})" if failed else ""
        add(Check("failed_checkpoints", len(failed) <= c.max_failed_checkpoints, len(failed),
                  c.max_failed_checkpoints,
                  f"{len(failed)} failed, at most {c.max_failed_checkpoints}{why}"))

    # 3. throughput against the baseline, per operator both jobs have
    if c.min_throughput_ratio is not None and baseline_job_id:
        add(_throughput_check(store, job_id, baseline_job_id, since, until, c.min_throughput_ratio,
                              sources_only=c.throughput_of == "sources"))
    if c.require_progress:
        add(_progress_check(store, job, since, until))

    # 4. watermark lag and backlog
    current = _current_attempt_start(store, job_id)
    since_attempt = [r for r in done if current is None or r.trigger_time >= current]
    for name, bound, measure, what in (
            ("watermark_lag_growth", c.max_watermark_lag_growth_ms, _lag_ms, "watermark lag"),
            ("backlog_growth", c.max_backlog_growth_ms, _backlog_ms,
             "backlog (checkpoint start delay)")):
        if bound is None:
            continue
        g = _growth(since_attempt, measure)
        if g is None:
            add(Check(name, None, None, bound, f"not measured: fewer than two checkpoints "
                      f"with a {what} in the window"))
        else:
            add(Check(name, g[2] <= bound, round(g[2], 1), bound,
                      f"{what} {g[0]:.0f} ms -> {g[1]:.0f} ms (+{g[2]:.0f} ms), at most "
                      f"+{bound:.0f} ms"))
    if c.max_replication_lag_s is not None:
        lags = [v for v in map(replication_lag_s, since_attempt) if v is not None]
        worst = max(lags, default=None)
        add(Check("replication_lag", None if worst is None else worst <= c.max_replication_lag_s,
                  worst, c.max_replication_lag_s,
                  "not measured: no checkpoint with a CDC source's lag in the window"
                  if worst is None else f"at most {worst:.1f} s behind the source database, "
                  f"bound {c.max_replication_lag_s:.1f} s"))
    return verdict


def replication_lag_s(checkpoint: CheckpointRecord) -> float | None:
    """The largest replication lag (seconds) a CDC source reported with ``checkpoint``
    (infinite when a source was not connected: its lag is unknown)."""
    lags = [float("inf") if lag["lag_seconds"] is None else lag["lag_seconds"]
            for t in checkpoint.task_stats or () for lag in (t.get("source_lag") or {}).values()
            if "lag_seconds" in lag]  # not a Kafka source's lag (in records, per partition)
    return max(lags) if lags else None


def _throughput_check(store: MetadataStore, job_id: str, baseline_job_id: str, since: datetime,
                      until: datetime, bound: float, *, sources_only: bool = True) -> Check:
    mine = operator_rates(store, job_id, since, until)
    theirs = operator_rates(store, baseline_job_id, since, until)
    if mine is None:
        return Check("throughput", False, None, bound, "fewer than two completed checkpoints "
                     "in the window to measure its throughput")
    if theirs is None:
        return Check("throughput", None, None, bound, f"not measured: the baseline job "
                     f"{baseline_job_id} has fewer than two completed checkpoints in the window")
    ops = set(theirs[0])
    what = "operator"
    if sources_only:
        rows = _window_rows(store, baseline_job_id, since, until)
        ops &= _sources(rows[-1]) if rows else set()
        what = "source"
    ratios = {op: mine[0].get(op, 0.0) / theirs[0][op] for op in ops
              if theirs[0][op] > 0 and op in mine[0]}
    if not ratios:
        return Check("throughput", None, None, bound, f"not measured: no {what} uid of the "
                     "baseline processed records in the window")
    op = min(ratios, key=lambda k: ratios[k])
    return Check("throughput", ratios[op] >= bound, round(ratios[op], 3), bound,
                 f"slowest {what} {op!r}: {mine[0].get(op, 0.0):.1f} records/s against the "
                 f"baseline's {theirs[0][op]:.1f} ({ratios[op]:.2f}x), at least {bound:.2f}x"
                 f" over {mine[1]:.0f} s")


def _progress_check(store: MetadataStore, job, since: datetime, until: datetime) -> Check:
    """3b of the module doc: over the whole window, while the sources read records, the
    watermark advances, and no stall is reported."""
    if job.progress_stall and job.status == JobStatus.RUNNING:
        stall = job.progress_stall
        return Check("progress", False, stall.get("operator"), "no stall",
                     f"the progress watchdog reports a {stall.get('kind', '')} stall at "
                     f"operator {stall.get('operator')!r}: {stall.get('detail', '')}".strip())
    rows = _window_rows(store, job.job_id, since, until)
    if len(rows) < 2:
        return Check("progress", None, None, "moving", "not measured: fewer than two completed "
                     "checkpoints with record counts in the window")
    first, last = rows[0], rows[-1]
    a, b = _processed(first), _processed(last)
    sources = _sources(last)
    read = sum(b.get(op, 0) - a.get(op, 0) for op in sources)
    seconds = (last.trigger_time - first.trigger_time).total_seconds()
    if read <= 0:
        return Check("progress", None, 0, "moving", f"not measured: its sources read no "
                     f"records over {seconds:.0f} s (no input: idle, not stalled)")
    w0, w1 = _watermark(first), _watermark(last)
    if w0 is not None and w1 is not None and w1 <= w0:
        return Check("progress", False, 0, "moving",
                     f"its watermark stood still at {w1:.0f} over {seconds:.0f} s while its "
                     f"sources read {read} records: windows cannot fire, output is held back")
    return Check("progress", True, read, "moving",
                 f"its sources read {read} records over {seconds:.0f} s"
                 + (f", its watermark advanced {w1 - w0:.0f} ms" if w0 is not None
                    and w1 is not None else ""))


def early_verdict(store: MetadataStore, job_id: str, *, since: datetime,
                  criteria: StabilityCriteria) -> StabilityVerdict | None:
    """A failing verdict before the window ends, when waiting cannot change it: the job
    ended, or restarted more often than allowed. ``None`` otherwise."""
    job = store.get_job(job_id)
    if job is None:
        raise LookupError(f"no job {job_id!r} in the metadata DB")
    restarts = sum(1 for a in store.list_attempts(job_id) if a.attempt > 0 and a.started_at >= since)
    if job.is_terminal or (criteria.max_restarts is not None and restarts > criteria.max_restarts):
        return assess_stability(store, job_id, since=since, criteria=criteria)
    return None
