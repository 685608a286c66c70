"""Fenced sinks: a job whose sinks hold their commits (``fence_sinks=True``).

A blue-green upgrade validates the new version (green) on live data next to the old one
(blue) without publishing a record: green runs fenced, so every sink pre-commits its
transactions at each barrier (the records are written, durable and invisible) but never
commits them, and its snapshots name no transaction (a ``fenced`` marker instead). At the
cut-over blue stops with a savepoint, the fenced green ends (what it staged is discarded
here), and green starts again unfenced from blue's final savepoint: its first published
epoch begins exactly where blue's last committed one ended.

Only sinks whose pre-committed output stays invisible until the commit, and that can
discard what a job staged, can be fenced (:meth:`~...connectors.base.Sink.can_hold_commits`);
a job with any other sink refuses fenced mode before it starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from ...catalog.models import JobStatus
from ...connectors.base import Sink
from ...connectors.capabilities import (
    SupportsClaimBeforeRestore,
    SupportsDiscardUncommitted,
    SupportsFencing,
    SupportsJobStartCheck,
)
from ...errors import ConfigurationError
from ...plan.graph import ExecutionGraph

if TYPE_CHECKING:
    from ...snapshot.handles import OperatorState

log = logging.getLogger(__name__)


def _sinks(graph: ExecutionGraph) -> list[tuple[str, Sink]]:
    return [(n.uid or n.name, cast(Sink, n.payload)) for v in graph.vertices for n in v.nodes
            if n.kind == "sink"]


def check_fencing(graph: ExecutionGraph, job_name: str) -> None:
    """Refuse fenced mode when a sink cannot hold its commits (``ConfigurationError``)."""
    refused = [f"{uid!r} ({sink.describe()})" for uid, sink in _sinks(graph)
               if not sink.can_hold_commits()]
    if refused:
        raise ConfigurationError(
            f"job {job_name}: fence_sinks (the exactly-once blue-green validation run) needs "
            f"sinks that hold pre-committed output invisible until the commit; "
            f"{', '.join(refused)} cannot (its writes are visible at the barrier). Run the "
            "upgrade with exactly_once=False (output is at-least-once while both jobs run) or "
            "use a two-phase-commit mode of the sink")


def snapshot_is_fenced(operators: Mapping[str, OperatorState]) -> bool:
    """Whether a snapshot's operators (``metadata.operators``) hold a fenced sink's marker."""
    return any(isinstance(entry, dict) and entry.get("fenced") is True
               for op in operators.values() for sub in op.subtasks
               for entry in sub.operator_state)


def fenced_restore_error(location: str) -> str:
    return (f"snapshot {location} was taken by a job with fenced sinks (a blue-green "
            "validation run): its sources are past output that was never published, so an "
            "unfenced job restoring it would lose those records. Restore the blue job's "
            "savepoint (or its latest checkpoint) instead, or run fenced again")


def discard_held(graph: ExecutionGraph, job_id: str) -> int:
    """A fenced job ended: discard everything it staged (its held transactions and any
    open epoch); returns how many transactions were discarded."""
    discarded = 0
    for uid, sink in _sinks(graph):
        if not isinstance(sink, SupportsFencing):
            continue
        try:
            discarded += len(sink.discard_staged_of_job(uid, job_id) or [])
        except Exception as exc:  # noqa: BLE001 - what stays staged is never published
            log.warning("Fenced job %s: could not discard what sink %r staged (it stays "
                        "staged and is never published): %s", job_id, uid, exc)
    log.info("Fenced job %s ended: discarded %d held transactions", job_id, discarded)
    return discarded


def discard_uncommitted(graph: ExecutionGraph, store, job_id: str) -> int:
    """An unfenced job ended (cancelled, failed, finished): sinks roll back what it
    pre-committed for checkpoints after its newest completed one (those never complete;
    a PostgreSQL prepared transaction would hold a ``max_prepared_transactions`` slot
    forever). Transactions of completed checkpoints stay: a restore commits them."""
    done = [c.checkpoint_id for c in store.list_checkpoints(job_id)
            if c.status in ("COMPLETED", "SUBSUMED")]
    newest = max(done, default=-1)
    discarded = 0
    for uid, sink in _sinks(graph):
        if not isinstance(sink, SupportsDiscardUncommitted):
            continue
        try:
            gone = sink.discard_uncommitted_of_job(uid, job_id, newest) or []
        except Exception as exc:  # noqa: BLE001 - `ckpt leftovers` reports what stays
            log.warning("Job %s ended: could not roll back what sink %r pre-committed after "
                        "checkpoint %d (`ckpt leftovers --abort` does): %s", job_id, uid,
                        newest, exc)
            continue
        if gone:
            log.info("Job %s ended: sink %r rolled back %d transactions of checkpoints after "
                     "%d: %s", job_id, uid, len(gone), newest, ", ".join(gone))
        discarded += len(gone)
    return discarded


def discard_uncommitted_of_lost(graph: ExecutionGraph, store, job_name: str,
                                job_id: str) -> int:
    """A job starts: what predecessors of its name whose driver died (``LOST``: no end was
    recorded, so :func:`discard_uncommitted` never ran for them) pre-committed for
    checkpoints after their newest completed one is rolled back. Nothing can commit it any
    more, and a PostgreSQL prepared transaction of a driver SIGKILLed during its first
    checkpoint kept its row locks and its ``max_prepared_transactions`` slot, and held a new
    CDC replication slot's snapshot waiting for it forever, when the new job found no
    checkpoint to restore (with one, ``discard_orphaned_staging`` rolls back what the
    restored job left). The LOST jobs since the newest predecessor that is not LOST (whose
    own start did this for older ones)."""
    lost = []
    for j in store.list_jobs(job_name):  # newest first
        if j.job_id == job_id:
            continue
        if j.status != JobStatus.LOST:
            break
        lost.append(j.job_id)
    return sum(discard_uncommitted(graph, store, jid) for jid in lost)


def check_job_start(graph: ExecutionGraph, store, config, job_id: str, initial) -> None:
    """Before the first attempt, once the snapshot to restore (``initial``) is known:
    fenced mode needs sinks that hold their commits (:func:`check_fencing`), and sources
    whose upstream position is shared state (a CDC source's replication slot) check it
    (:class:`~...connectors.capabilities.SupportsJobStartCheck`): ownership, restored
    positions and plans, configuration errors that no restart would cure. A fenced source never acknowledges upstream."""
    from ...connectors.postgres.cdc.slots import restored_positions

    job_name, fenced = config.name, bool(config.fence_sinks)
    if fenced:
        check_fencing(graph, job_name)
    for v in graph.vertices:
        for n in v.nodes:
            if n.kind == "source" and isinstance(n.payload, SupportsJobStartCheck):
                n.payload.check_job_start(
                    store, job_name=job_name, job_id=job_id, fenced=fenced,
                    restored=restored_positions(initial, n.uid) if n.uid else {})


def claim_before_restore(graph: ExecutionGraph, store, job_name: str, job_id: str) -> None:
    """Before the snapshot to restore is chosen and checked: sources whose upstream position
    is shared state claim it for this job (a CDC source's explicitly named slot), so a job
    using another job's slot is refused for that first."""
    for v in graph.vertices:
        for n in v.nodes:
            if n.kind == "source" and isinstance(n.payload, SupportsClaimBeforeRestore):
                n.payload.claim_before_restore(store, job_name=job_name, job_id=job_id)
