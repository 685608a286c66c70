"""Choosing the snapshot a job restores, and the all-or-nothing check of a fallback.

A restore that falls back to an older checkpoint (the latest is damaged; ``restore="latest"``
falls back past a job; a failover inside a running job skips a damaged checkpoint) makes
sinks remove what was committed after the restored checkpoint, so that the replayed records
are written once. Before any of that happens, every source and sink of the job is asked
whether it can go back (:meth:`~...connectors.base.Source.check_restore`,
:meth:`~...connectors.base.Sink.check_restore`: side-effect free). One refusal and the
restore is refused with :class:`~...errors.UnsafeRestoreFallbackError` naming each part that
cannot go back (operator uid and connector); nothing was removed or rewritten, and the
skipped checkpoints stay COMPLETED (the next ``restore="latest"`` sees them and decides
again).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import cast

from ...catalog import CheckpointRecord, MetadataStore
from ...catalog.models import CheckpointStatus
from ...checkpoint.partial import discard_partial_checkpoints
from ...checkpoint.restore import discard_output_of_skipped_jobs
from ...checkpoint.trust import SnapshotTrust
from ...connectors.base import Sink, Source
from ...connectors.capabilities import SupportsDiscardCommitted, SupportsRelocation
from ...errors import CorruptCheckpointError, RestoreError, UnsafeRestoreFallbackError
from ...fs.storage import default_savepoint_root
from ...plan.graph import ExecutionGraph
from ...plan.job import JobConfig, Restore, RestoreKind
from ...snapshot.codec import LoadedSnapshot
from ...snapshot.verify import verify_snapshot
from ...state.operator_state import OperatorStateStore
from .fencing import fenced_restore_error, snapshot_is_fenced

log = logging.getLogger(__name__)

#: the union list state a source keeps its split positions in (runtime/operators/edges.py)
SPLITS_STATE = "splits"


def restored_split_positions(snapshot: LoadedSnapshot | None, uid: str) -> dict[str, object]:
    """Split -> position of source ``uid`` in ``snapshot`` (``{}`` for empty state or a
    source the snapshot does not hold); finished splits are left out (nothing is read from
    them again)."""
    if snapshot is None:
        return {}
    op = snapshot.metadata.operators.get(uid)
    if op is None:
        return {}
    entries: list = []
    for sub in op.subtasks:
        entries.extend(sub.operator_state or [])
    store = OperatorStateStore(uid, 0, 1, entries)
    restored = [
        *store.get_union_list_state(SPLITS_STATE).get(),
        *(e for e in entries if isinstance(e, dict) and "split" in e),
    ]
    out: dict[str, object] = {}
    for e in restored:
        if not isinstance(e, dict) or not isinstance(e.get("split"), str):
            raise CorruptCheckpointError(
                f"source {uid!r}: split entry {e!r:.200} in {snapshot.directory} is malformed"
            )
        if not e.get("finished"):
            out[e["split"]] = e.get("position")
    return out


def check_restore_plan(
    graph: ExecutionGraph,
    snapshot: LoadedSnapshot | None,
    *,
    job_name: str,
    discard: Mapping[str, int],
    what: str,
    remedy: str = "",
) -> None:
    """Ask every source and sink of ``graph`` whether it can restore ``snapshot`` (``None``:
    empty state), the sinks also whether they can remove what the jobs in ``discard`` (job id
    -> the checkpoint after which their committed output is removed; -1: all of it)
    committed. ``what`` says what the restore is doing (for the message). Raises
    :class:`UnsafeRestoreFallbackError` naming every part that cannot, before anything
    changed."""
    location = snapshot.directory if snapshot is not None else "empty state"
    chk = snapshot.checkpoint_id if snapshot is not None else -1
    refusals: list[str] = []
    for v in graph.vertices:
        for n in v.nodes:
            if n.kind not in ("source", "sink") or not n.uid:
                continue
            try:
                if n.kind == "source":
                    cast(Source, n.payload).check_restore(
                        n.uid,
                        restored_split_positions(snapshot, n.uid),
                        checkpoint_id=chk,
                        location=location,
                        job_name=job_name,
                    )
                else:
                    cast(Sink, n.payload).check_restore(
                        n.uid, checkpoint_id=chk, discard=dict(discard), location=location
                    )
            except RestoreError as exc:
                refusals.append(
                    f"{n.kind} {n.uid!r} ({n.payload.describe()}) cannot go back: "  # type: ignore[attr-defined]
                    f"{exc}"
                )
    if refusals:
        raise UnsafeRestoreFallbackError(
            f"{what}: refused before anything was removed or rewritten, because "
            + "; ".join(refusals)
            + (f". {remedy}" if remedy else "")
        )


class RestorePlanner:
    """The job master's choice of the snapshot to start from (``restore=``) and its checks
    (a collaborator of :class:`.master.JobMaster`; failover and promotion use its checks
    too)."""

    def __init__(self, graph: ExecutionGraph, trust: SnapshotTrust) -> None:
        self.graph = graph
        self.trust = trust

    def resolve(self, store: MetadataStore, restore: Restore, config: JobConfig, *,
                owner: str | None = None) -> LoadedSnapshot | None:
        """The snapshot to start from. An explicit path must verify and be trusted (signed
        with the key in use, see checkpoint/trust.py; else CorruptCheckpointError or a
        RestoreError such as UntrustedSnapshotError). ``latest`` falls back: the newest COMPLETED
        checkpoint of any job of this name that verifies. Falling back past checkpoints
        (even past every one: empty state) makes the sinks remove what the skipped jobs
        committed after the restored checkpoint, as on failover, once every source and sink
        confirmed it can go back (:func:`check_restore_plan`; else
        :class:`UnsafeRestoreFallbackError`); only then are the skipped checkpoints marked
        CORRUPT (a refusal, or a crash before the clean-up, leaves them COMPLETED: the next
        ``latest`` sees them and decides again). ``owner``: the job whose snapshot an
        explicit path must be (a standby's hand-over); None: any job's. A standby restore
        is resolved to a path by the job master first (it waits for the hand-over)."""
        match restore.kind:
            case RestoreKind.NONE:
                return None
            case RestoreKind.STANDBY:
                raise RestoreError(f"restore {restore.text!r}: a standby restore is resolved "
                                   "to the snapshot its predecessor left before the restore "
                                   "plan is made (JobMaster.run)")
            case RestoreKind.PATH:
                assert restore.target is not None  # Restore checks that a path has one
                return self._resolve_path(restore.target, config, owner)
            case RestoreKind.LATEST:
                return self._resolve_latest(store, config)

    def _resolve_path(self, path: str, config: JobConfig,
                      owner: str | None) -> LoadedSnapshot:
        """An explicit path restores any job's snapshot; a standby's hand-over only the
        snapshot of the job it waited for (``owner``, issue 50)."""
        snapshot = self.trust.load(path, owner=owner)
        if not config.fence_sinks and snapshot_is_fenced(snapshot.metadata.operators):
            raise RestoreError(fenced_restore_error(snapshot.directory))
        self.check_snapshot(snapshot)
        check_restore_plan(
            self.graph,
            snapshot,
            job_name=config.name,
            discard={},
            what=f"restoring {snapshot.directory}",
        )
        return snapshot

    def _resolve_latest(self, store: MetadataStore,
                        config: JobConfig) -> LoadedSnapshot | None:
        """The newest completed checkpoint of any job of this name that verifies (see
        :meth:`resolve`)."""
        trust = self.trust
        name = config.name
        bad: list[tuple[CheckpointRecord, str]] = []
        chosen: tuple[CheckpointRecord, LoadedSnapshot] | None = None
        for rec in store.completed_checkpoints(job_name=name):
            what = f"checkpoint {rec.checkpoint_id} of job {name} ({rec.job_id})"
            try:
                # the snapshot must be rec's job's (issue 50): another job's checkpoint copied
                # over it raises ForeignSnapshotError, a RestoreError, and is skipped and
                # marked CORRUPT like a damaged one. Skipping rather than refusing the restore:
                # the foreign state is never loaded, the fallback is the one a damaged
                # checkpoint takes (every source and sink must consent, check_restore_plan,
                # else nothing is changed), and it gives a store writer nothing new -- a
                # corrupted byte already makes this checkpoint skipped
                snapshot = trust.load(rec.location, record=rec)
                if not config.fence_sinks and snapshot_is_fenced(snapshot.metadata.operators):
                    log.info("Skipping %s: a fenced (validation) run's", what)
                    continue
                self.check_snapshot(snapshot)
            except (CorruptCheckpointError, RestoreError) as exc:
                log.warning("Cannot restore %s; trying the next older checkpoint: %s", what, exc)
                bad.append((rec, str(exc)))
                continue
            chosen = rec, snapshot
            break
        if chosen is None:
            log.info("No restorable checkpoint of job %s: starting with empty state", name)
        skipped: dict[str, list[str]] = {}
        for rec, reason in bad:
            skipped.setdefault(rec.job_id, []).append(f"checkpoint {rec.checkpoint_id}: {reason}")
        restored_job = chosen[0].job_id if chosen else None
        restored_id = chosen[1].checkpoint_id if chosen else -1
        restored_from = chosen[1].directory if chosen else "empty state"
        # every source and sink first: nothing is removed unless all of them can go back
        check_restore_plan(
            self.graph,
            chosen[1] if chosen else None,
            job_name=name,
            discard={job: restored_id if job == restored_job else -1 for job in skipped},
            what=(
                f"restore latest falling back to {restored_from} past "
                + "; ".join(
                    f"job {job}: {reasons[0]}"
                    + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")
                    for job, reasons in sorted(skipped.items())
                )
                if skipped
                else f"restore latest ({restored_from})"
            ),
            remedy=(
                "Restore an explicit checkpoint or savepoint (restore=PATH, `ckpt run "
                "--restore PATH`), or remove that output from the sink yourself and run "
                "with restore=None (`--restore none`)"
            )
            if skipped
            else "",
        )
        discard_output_of_skipped_jobs(
            self.graph,
            skipped,
            restored_job=restored_job,
            restored_id=restored_id,
            restored_from=restored_from,
        )
        for rec, reason in bad:
            try:
                store.fail_checkpoint(
                    rec.job_id, rec.checkpoint_id, reason=reason, status=CheckpointStatus.CORRUPT
                )
                log.warning(
                    "Checkpoint %d of job %s (%s) marked CORRUPT: %s",
                    rec.checkpoint_id,
                    name,
                    rec.job_id,
                    reason,
                )
            except Exception as exc:  # noqa: BLE001 - the restore goes on without the mark
                log.warning(
                    "Could not mark checkpoint %d of job %s CORRUPT: %s",
                    rec.checkpoint_id,
                    rec.job_id,
                    exc,
                )
        for job in sorted(
            {rec.job_id for rec, _ in bad} | ({restored_job} if restored_job else set())
        ):
            try:
                discard_partial_checkpoints(store, job, roots=(  # only under our own roots
                    config.checkpoint.directory,
                    config.checkpoint.savepoint_directory
                    or default_savepoint_root(config.checkpoint.directory),
                ))
            except Exception as exc:  # noqa: BLE001 - housekeeping must not block a restore
                log.warning("Could not clean up partial checkpoints of job %s: %s", job, exc)
        return chosen[1] if chosen else None

    def check_snapshot(self, snapshot: LoadedSnapshot) -> None:
        """Before restoring: every state file matches its size and checksum, and every sink
        accepts its restored transactions (CorruptCheckpointError otherwise)."""
        verify_snapshot(snapshot)
        ops = snapshot.metadata.operators
        for v in self.graph.vertices:
            for n in v.nodes:
                if n.kind == "sink" and n.uid in ops:
                    where = f"{snapshot.directory} (operator {n.uid!r})"
                    txns = []
                    for sub in ops[n.uid].subtasks:
                        for entry in sub.operator_state:
                            if not isinstance(entry, dict) or not isinstance(
                                entry.get("transactions"), list
                            ):
                                raise CorruptCheckpointError(
                                    f"snapshot {where}: field subtasks[{sub.index}].operator_state "
                                    "must hold {checkpoint_id, transactions} entries; the snapshot "
                                    "is corrupt or was tampered with"
                                )
                            txns.extend(entry["transactions"])
                    if isinstance(n.payload, SupportsRelocation):
                        n.payload.check_restored_transactions(txns, location=where)

    def discard_sink_output_after(self, job_id: str, checkpoint_id: int) -> None:
        """Falling back past completed checkpoints: sinks undo what ``job_id`` committed for
        them (those records are replayed from ``checkpoint_id``), so output stays exactly
        once. Only after :func:`check_restore_plan` accepted the fallback."""
        for v in self.graph.vertices:
            for n in v.nodes:
                if (n.kind == "sink" and n.uid
                        and isinstance(n.payload, SupportsDiscardCommitted)):
                    n.payload.discard_committed_after(n.uid, job_id, checkpoint_id)
