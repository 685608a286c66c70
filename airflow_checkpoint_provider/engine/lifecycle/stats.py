"""Checkpoint statistics of a job, read from the metadata DB.

The shape follows Flink's checkpoint REST API (``/jobs/:jobid/checkpoints``) so a Flink user
finds the same things under the same names:

``counts``
    ``total`` (every triggered checkpoint and savepoint), ``completed`` (COMPLETED, or
    completed and later SUBSUMED or DISCARDED), ``failed``, ``in_progress`` (PENDING),
    ``restored`` (how many attempts started from a checkpoint or savepoint: every restart
    that restored one, plus the first start when the job was launched with
    ``restore=...``), ``restarts`` (attempts after the first) and ``savepoints``
    (completed ones).
``summary``
    ``{"count", "min", "avg", "max", "p50", "p90", "p99"}`` of the completed checkpoints'
    ``end_to_end_duration_ms``, ``state_size`` and ``checkpointed_size`` (bytes), and of
    the per-task ``sync_duration_ms``, ``async_duration_ms`` and ``alignment_duration_ms``
    over every task acknowledgement of those checkpoints. Values are ``None`` when there is
    nothing to summarize.
``latest``
    ``completed`` (newest completed periodic checkpoint), ``savepoint`` (newest completed
    savepoint), ``failed`` (newest failed one, with its ``failure_reason``) and
    ``restored`` (the newest attempt that restored state: which checkpoint, from where,
    when, and whether it was a savepoint). Each is ``None`` when there is none.
``history``
    The newest :data:`HISTORY_SIZE` checkpoints of any state, newest first.

Everything is JSON-ready: datetimes are ISO-8601 strings with offset, sizes are bytes and
durations milliseconds. Use :func:`checkpoint_statistics`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..catalog import AttemptRecord, CheckpointRecord, JobRecord, MetadataStore
from ..catalog.models import CheckpointKind, CheckpointStatus

#: How many checkpoints ``history`` lists (Flink's ``web.checkpoints.history`` default).
HISTORY_SIZE = 10
#: Percentiles in every summary, as ``p<N>`` keys.
PERCENTILES = (50, 90, 99)
#: Per-task metrics of ``task_stats`` and the summary key each is reported under.
TASK_METRICS = {
    "sync_ms": "sync_duration_ms",
    "async_ms": "async_duration_ms",
    "alignment_ms": "alignment_duration_ms",
}


def is_completed(record: CheckpointRecord) -> bool:
    """Whether the checkpoint completed (it may have been subsumed or discarded since)."""
    if record.status in (CheckpointStatus.COMPLETED, CheckpointStatus.SUBSUMED,
                         CheckpointStatus.CORRUPT):
        return True
    return record.status == CheckpointStatus.DISCARDED and record.complete_time is not None


def is_savepoint(record: CheckpointRecord) -> bool:
    return record.kind == CheckpointKind.SAVEPOINT


def max_task_metric(record: CheckpointRecord, metric: str) -> float | None:
    """The largest value of a per-task metric (``"alignment_ms"``, ...) over the tasks that
    acknowledged ``record``; ``None`` when no task reported it."""
    values = [float(t[metric]) for t in record.task_stats or () if t.get(metric) is not None]
    return max(values) if values else None


def is_unaligned(record: CheckpointRecord) -> bool:
    """Whether the checkpoint was unaligned (at some task; see ``CheckpointConfig.unaligned``)."""
    return any(t.get("unaligned") for t in record.task_stats or ())


def in_flight_bytes(record: CheckpointRecord) -> int:
    """Bytes of in-flight records an unaligned checkpoint persisted, over its tasks."""
    return sum(int(t.get("inflight_bytes") or 0) for t in record.task_stats or ())


def slowest_task(record: CheckpointRecord) -> dict[str, Any] | None:
    """The task of ``record`` with the longest sync + async + alignment time."""
    tasks = list(record.task_stats or ())
    if not tasks:
        return None
    return max(tasks, key=task_total_ms)


def task_total_ms(task: dict[str, Any]) -> float:
    """Time a task spent on one checkpoint: alignment, then sync and async snapshot parts."""
    return sum(float(task.get(metric) or 0.0) for metric in TASK_METRICS)


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) of ascending ``sorted_values``, by linear
    interpolation between the closest ranks (numpy's default method)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = (len(sorted_values) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = rank - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def summarize(values: Iterable[float | int | None]) -> dict[str, Any]:
    """``{"count", "min", "avg", "max", "p50", "p90", "p99"}`` of the values that are not
    ``None`` (all ``None`` but ``count`` when there are none)."""
    data = sorted(float(v) for v in values if v is not None)
    out: dict[str, Any] = {"count": len(data)}
    if not data:
        out.update({"min": None, "avg": None, "max": None})
        out.update({f"p{p}": None for p in PERCENTILES})
        return out
    out.update({"min": _tidy(data[0]), "avg": _tidy(sum(data) / len(data)),
                "max": _tidy(data[-1])})
    out.update({f"p{p}": _tidy(percentile(data, p)) for p in PERCENTILES})
    return out


def _tidy(value: float) -> float | int:
    """Integral floats as ints (byte counts stay ints in JSON), others to 3 decimals."""
    return int(value) if value == int(value) else round(value, 3)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def checkpoint_entry(record: CheckpointRecord) -> dict[str, Any]:
    """One checkpoint as listed under ``latest`` and ``history``."""
    slowest = slowest_task(record)
    return {
        "checkpoint_id": record.checkpoint_id,
        "kind": record.kind,
        "is_savepoint": is_savepoint(record),
        "status": record.status,
        "is_final": record.is_final,
        "trigger_time": _iso(record.trigger_time),
        "complete_time": _iso(record.complete_time),
        "end_to_end_duration_ms": record.duration_ms,
        "state_size": record.state_size,
        "checkpointed_size": record.checkpointed_size,
        "location": record.location,
        "failure_reason": record.failure_reason,
        "num_acknowledged_tasks": len(record.task_stats or ()),
        "max_alignment_duration_ms": max_task_metric(record, "alignment_ms"),
        "unaligned": is_unaligned(record),
        "persisted_in_flight_bytes": in_flight_bytes(record),
        "slowest_task": None if slowest is None else {
            "vertex": slowest.get("vertex"), "subtask": slowest.get("subtask"),
            "total_ms": _tidy(task_total_ms(slowest))},
    }


def restored_attempts(attempts: Sequence[AttemptRecord]) -> list[AttemptRecord]:
    """The attempts that started from a checkpoint or savepoint, oldest first.

    A restart before the first completed checkpoint starts from scratch and restores
    nothing, so it counts as a restart but not as a restore (as in Flink)."""
    return [a for a in attempts
            if a.restored_from is not None or a.restored_checkpoint_id is not None]


def _restore_entry(attempt: AttemptRecord, by_id: dict[int, CheckpointRecord]) -> dict[str, Any]:
    source = by_id.get(attempt.restored_checkpoint_id) if attempt.restored_checkpoint_id else None
    if source is not None and source.location == attempt.restored_from:
        from_savepoint = is_savepoint(source)
    else:  # restored from another job's checkpoint or a savepoint path
        from_savepoint = "savepoint-" in (attempt.restored_from or "")
    return {
        "attempt": attempt.attempt,
        "restore_time": _iso(attempt.started_at),
        "restored_checkpoint_id": attempt.restored_checkpoint_id,
        "restored_from": attempt.restored_from,
        "is_savepoint": from_savepoint,
        "previous_failure_reason": None,
    }


def checkpoint_statistics(store: MetadataStore, job_id: str) -> dict[str, Any]:
    """Checkpoint statistics of one job, JSON-ready (see the module docstring).

    :param store: the metadata DB.
    :param job_id: a job id, a unique id prefix or a job name (its newest run), as accepted
        by :meth:`MetadataStore.resolve_job`.
    :raises LookupError: no job matches ``job_id``.
    """
    job = store.resolve_job(job_id)
    checkpoints = store.list_checkpoints(job.job_id)
    attempts = store.list_attempts(job.job_id)
    return statistics_from_records(job, checkpoints, attempts)


def statistics_from_records(job: JobRecord, checkpoints: Sequence[CheckpointRecord],
                            attempts: Sequence[AttemptRecord]) -> dict[str, Any]:
    """:func:`checkpoint_statistics` over records already read from the store."""
    completed = [c for c in checkpoints if is_completed(c)]
    failed = [c for c in checkpoints if c.status == CheckpointStatus.FAILED]
    pending = [c for c in checkpoints if c.status == CheckpointStatus.PENDING]
    restarts = max(len(attempts) - 1, 0) if attempts else job.attempt
    restores = restored_attempts(attempts)
    # a store without attempt rows: fall back to the job row (restarts + initial restore)
    restored_count = len(restores) if attempts else job.attempt + (1 if job.restored_from else 0)

    summary: dict[str, Any] = {
        "end_to_end_duration_ms": summarize(c.duration_ms for c in completed),
        "state_size": summarize(c.state_size for c in completed),
        "checkpointed_size": summarize(c.checkpointed_size for c in completed),
    }
    for metric, key in TASK_METRICS.items():
        summary[key] = summarize(t.get(metric) for c in completed for t in c.task_stats or ())

    def newest(records: Iterable[CheckpointRecord]) -> dict[str, Any] | None:
        chosen = max(records, key=lambda c: c.checkpoint_id, default=None)
        return None if chosen is None else checkpoint_entry(chosen)

    by_id = {c.checkpoint_id: c for c in checkpoints}
    latest_restore = None
    if restores:
        latest_restore = _restore_entry(restores[-1], by_id)
        previous = [a for a in attempts if a.attempt == restores[-1].attempt - 1]
        if previous:
            latest_restore["previous_failure_reason"] = previous[0].failure_reason
    elif not attempts and job.restored_from:
        latest_restore = {"attempt": 0, "restore_time": _iso(job.created_at),
                          "restored_checkpoint_id": None, "restored_from": job.restored_from,
                          "is_savepoint": "savepoint-" in job.restored_from,
                          "previous_failure_reason": None}

    return {
        "job": {"job_id": job.job_id, "job_name": job.job_name, "version": job.version,
                "status": job.status, "attempt": job.attempt,
                "restored_from": job.restored_from, "created_at": _iso(job.created_at),
                "updated_at": _iso(job.updated_at)},
        "counts": {
            "total": len(checkpoints),
            "completed": len(completed),
            "failed": len(failed),
            "in_progress": len(pending),
            "restored": restored_count,
            "restarts": restarts,
            "savepoints": sum(1 for c in completed if is_savepoint(c)),
        },
        "summary": summary,
        "latest": {
            "completed": newest(c for c in completed if not is_savepoint(c)),
            "savepoint": newest(c for c in completed if is_savepoint(c)),
            "failed": newest(failed),
            "restored": latest_restore,
        },
        "history": [checkpoint_entry(c) for c in
                    sorted(checkpoints, key=lambda c: c.checkpoint_id, reverse=True)[:HISTORY_SIZE]],
    }


__all__ = [
    "HISTORY_SIZE",
    "PERCENTILES",
    "TASK_METRICS",
    "checkpoint_entry",
    "checkpoint_statistics",
    "is_completed",
    "is_savepoint",
    "max_task_metric",
    "percentile",
    "restored_attempts",
    "slowest_task",
    "statistics_from_records",
    "summarize",
    "task_total_ms",
]
