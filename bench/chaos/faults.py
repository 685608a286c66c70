"""The faults of a chaos run, all drawn from its seed, and where each landed.

Kinds:

* ``slot`` (local runner) / ``python-worker`` (Spark runner: a slot runs inside a Spark
  Python worker): SIGKILL of one slot process, chosen at random among the running
  attempt's slots (their PIDs from ``job_attempts.placement`` of the metadata DB);
* ``driver``: SIGKILL of the job's driver process (the job master, with the Spark driver in
  it); the harness starts a new driver with ``restore="latest"`` at once (the dead driver
  is provably gone: no wait for its heartbeat to time out);
* ``jvm`` (Spark runner): SIGKILL of the Spark JVM (local mode: the driver's and the
  executor's JVM in one); the driver process then ends (or is killed after 60 s) and a new
  driver restores ``latest`` as after a driver kill;
* ``raise``: an exception raised by the pipeline at a seeded input position (each point
  fires once across attempts: tests/pipelines.FaultPlan's markers).

A kill is due ``at`` seconds after the job first ran (the first attempt's slots all
registered); the offsets are spread over the failure-free run's duration.

Where a fault landed (:func:`landing`), from the run's metadata DB and committed files:
``before-first-checkpoint`` (no checkpoint of the run had completed), ``after-sources-ended``
(the live attempt had triggered its final checkpoint: every task reached the end of its
input), ``during-commit`` (checkpoint N had completed and the sinks had not yet published
all of N's files: a part file of N appeared at or after the fault; without part files, within
100 ms of N's completion), ``during-checkpoint`` (a checkpoint was triggered and not yet
complete: barrier alignment and snapshot) or ``processing`` (between checkpoints).
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass

KILL_KINDS = {"local": ("slot", "driver"), "spark": ("python-worker", "driver", "jvm")}
LANDINGS = (
    "before-first-checkpoint",
    "during-checkpoint",
    "during-commit",
    "after-sources-ended",
    "processing",
)
COMMIT_WINDOW_S = 0.1


@dataclass
class Fault:
    kind: str
    at: float = 0.0  # kills: seconds after the job first ran
    point: int = 0  # raise: input position
    fired_at: float | None = None  # wall clock
    target: str | None = None
    landed: str | None = None
    #: a driver or JVM kill: when the harness started the new driver (wall clock; after a
    #: JVM kill the old driver first ends by itself) and the seconds from the kill to the
    #: start of the new driver's first attempt (it took the job name and began restoring;
    #: ``None``: no attempt started)
    restarted_at: float | None = None
    restarted_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def plan(
    seed: int,
    cell: str,
    runner: str,
    seconds: float,
    records: int,
    max_faults: int = 3,
    *,
    driver_only: bool = False,
) -> list[Fault]:
    """1..``max_faults`` faults of the run (kind, time or input position), from the seed
    and the cell's name only; ``driver_only`` (a driver-kill cell): every fault a driver
    SIGKILL."""
    rng = random.Random(f"{cell}|{seed}")
    faults = []
    for _ in range(rng.randint(1, max_faults)):
        # records 0: the pipeline has no place to raise (CDC cells): kills only
        kind = (
            "driver"
            if driver_only
            else rng.choice(
                [*KILL_KINDS[runner], KILL_KINDS[runner][0], *(("raise",) if records > 0 else ())]
            )
        )
        if kind == "raise":
            faults.append(Fault("raise", point=rng.randrange(1, max(records, 2))))
        else:
            faults.append(Fault(kind, at=round(rng.uniform(0.0, 0.9 * seconds), 3)))
    faults.sort(key=lambda f: (f.kind == "raise", f.at, f.point))
    return faults


def fired_raises(faults_dir: str) -> dict[int, float]:
    """Raise points that fired: point -> wall time of its marker file."""
    out = {}
    if os.path.isdir(faults_dir):
        for name in os.listdir(faults_dir):
            if name.startswith("record-"):
                out[int(name.split("-", 1)[1])] = os.stat(os.path.join(faults_dir, name)).st_mtime
    return out


def _ts(dt) -> float | None:
    return None if dt is None else dt.timestamp()


def restart_delay(t: float, store, after: float | None = None) -> float | None:
    """Seconds from a driver kill at wall time ``t`` to the start of the first attempt of
    any of the run's jobs started after ``after`` (the new driver's start; default ``t``:
    a killed JVM's driver may start a doomed attempt of its own before it ends) (``None``:
    none started)."""
    after = t if after is None else after
    starts = [
        _ts(a.started_at)
        for j in store.list_jobs()
        for a in store.list_attempts(j.job_id)
        if _ts(a.started_at) > after
    ]
    return round(min(starts) - t, 2) if starts else None


def landing(t: float, store, output_dirs: list[str]) -> str:
    """Where a fault at wall time ``t`` landed (see the module docstring)."""
    jobs = store.list_jobs()
    checkpoints = [
        (j.job_id, c)
        for j in jobs
        for c in store.list_checkpoints(j.job_id)
        if c.kind == "CHECKPOINT"
    ]
    done = [
        (jid, c)
        for jid, c in checkpoints
        if c.complete_time is not None and _ts(c.complete_time) <= t
    ]
    if not done:
        return "before-first-checkpoint"
    attempts = [
        a
        for j in jobs
        for a in store.list_attempts(j.job_id)
        if _ts(a.started_at) <= t and (a.ended_at is None or _ts(a.ended_at) >= t)
    ]
    for a in attempts:
        if any(
            jid == a.job_id and c.is_final and _ts(a.started_at) <= _ts(c.trigger_time) <= t
            for jid, c in checkpoints
        ):
            return "after-sources-ended"
    jid, last = max(done, key=lambda x: _ts(x[1].complete_time))
    published = _published(output_dirs, jid, last.checkpoint_id)
    completed = _ts(last.complete_time)
    if published and max(published) >= t:
        return "during-commit"
    if not published and t - completed <= COMMIT_WINDOW_S:
        return "during-commit"
    for _, c in checkpoints:
        start = _ts(c.trigger_time)
        end = _ts(c.complete_time)
        if start <= t and (end is not None and end > t):
            return "during-checkpoint"
        if (
            start <= t
            and end is None
            and c.status in ("PENDING", "FAILED", "DISCARDED")
            and t - start < 10
            and not any(start < _ts(o.trigger_time) <= t for _, o in checkpoints)
        ):
            return "during-checkpoint"
    return "processing"


def _published(output_dirs: list[str], job_id: str, checkpoint_id: int) -> list[float]:
    """ctime (rename time) of the part files of ``checkpoint_id`` of ``job_id``."""
    from airflow_checkpoint_provider.engine import committed_files

    return [os.stat(f.path).st_ctime for d in output_dirs for f in committed_files(d)
            if f.job_id == job_id and f.checkpoint_id == checkpoint_id]
