"""Map a checkpoint or savepoint onto an ExecutionGraph: which subtask restores what.

* State is matched by operator uid. A snapshot operator with no uid in the pipeline fails
  the restore, listing the unmatched uids, unless ``allow_non_restored_state``.
* Keyed state is redistributed by key group: a subtask reads every state file whose key
  group range intersects its own and keeps only its key groups.
* Operator state (source split positions, sink transactions) is handed to every subtask
  as a union; each operator keeps what belongs to it (e.g. split ``j`` -> subtask
  ``j % parallelism``; sink transactions are recovered by subtask 0).
"""

from __future__ import annotations

from ..errors import CorruptCheckpointError, RestoreError, UnsafeRestoreFallbackError
from ..plan.graph import KEYED_KINDS, ExecutionGraph
from ..snapshot.codec import LoadedSnapshot
from ..state.keygroups import KeyGroupRange, key_group_range_for


def operator_kind(node_kind: str) -> str:
    return "keyed" if node_kind in KEYED_KINDS else "operator"


def assign_restore(snapshot: LoadedSnapshot, graph: ExecutionGraph, *,
                   allow_non_restored_state: bool = False) -> dict[tuple[int, int], dict]:
    """Return ``{(vertex, subtask): {uid: spec}}`` for every task that restores state.

    Reads the snapshot's typed, validated handles (:mod:`..snapshot.handles`); a spec's
    ``keyed`` list holds those handle objects."""
    ops = snapshot.metadata.operators
    unmatched = sorted(uid for uid in ops if graph.node_by_uid(uid) is None)
    if unmatched and not allow_non_restored_state:
        raise RestoreError(
            f"cannot map state of operator(s) {', '.join(repr(u) for u in unmatched)} from "
            f"{snapshot.directory} to the pipeline (no operator has that uid); pass "
            "allow_non_restored_state=True to drop it"
        )
    result: dict[tuple[int, int], dict] = {}
    for uid, op in ops.items():
        found = graph.node_by_uid(uid)
        if found is None:
            continue
        vertex, node = found
        kind = operator_kind(node.kind)
        if op.kind != kind:
            raise RestoreError(
                f"operator {uid!r} was a {op.kind} operator in the snapshot but is "
                f"{kind} ({node.kind}) in the pipeline"
            )
        if kind == "keyed" and op.max_parallelism != graph.max_parallelism:
            raise RestoreError(
                f"operator {uid!r}: the snapshot has max_parallelism {op.max_parallelism} "
                f"but the pipeline has {graph.max_parallelism}; max parallelism cannot change "
                "for keyed state"
            )
        union = [e for s in op.subtasks for e in s.operator_state]
        in_flight = {s.index: s.channel_state for s in op.subtasks if s.channel_state is not None}
        if in_flight and op.parallelism != vertex.parallelism:
            raise RestoreError(
                f"operator {uid!r}: {snapshot.directory} is an unaligned checkpoint with "
                f"in-flight records of {op.parallelism} subtasks, which cannot be restored at "
                f"parallelism {vertex.parallelism}; restore it at parallelism "
                f"{op.parallelism}, take a savepoint (savepoints are aligned) and rescale from "
                "that")
        for sub in range(vertex.parallelism):
            spec: dict = {"directory": snapshot.directory, "states": op.states,
                          "operator_state": union, "keyed": [],
                          "channel_state": in_flight.get(sub)}
            if kind == "keyed":
                mine = key_group_range_for(sub, vertex.parallelism, graph.max_parallelism)
                for s in op.subtasks:
                    if s.keyed is None:
                        continue
                    if s.key_group_range is None:
                        raise CorruptCheckpointError(
                            f"operator {uid!r}: subtask {s.index} of {snapshot.directory} has "
                            "keyed state without a key_group_range; the snapshot is corrupt")
                    if len(mine.intersect(KeyGroupRange(*s.key_group_range))):
                        spec["keyed"].append(s.keyed)
            result.setdefault((vertex.id, sub), {})[uid] = spec
    return result


# -- falling back past jobs ------------------------------------------------------------------


def _sinks(graph: ExecutionGraph) -> list:
    return [n for v in graph.vertices for n in v.nodes if n.kind == "sink" and n.uid]


def discard_output_of_skipped_jobs(graph: ExecutionGraph, skipped: dict[str, list[str]], *,
                                   restored_job: str | None, restored_id: int,
                                   restored_from: str) -> None:
    """``restore="latest"`` fell back past every unusable checkpoint of the jobs in
    ``skipped`` (job id -> why each checkpoint was unusable) to ``restored_from`` (a
    checkpoint of ``restored_job`` with id ``restored_id``, or empty state: ``None``/-1).
    What those jobs committed after it is written again by this job, so every sink removes
    it first, as on failover: the restored job's output after ``restored_id``, every other
    skipped job's output entirely (it is all newer than the restored checkpoint).

    Raises :class:`UnsafeRestoreFallbackError` before anything is removed when a sink
    cannot remove committed output (:meth:`~..connectors.base.Sink.can_discard_committed`).
    """
    if not skipped:
        return
    sinks = _sinks(graph)
    unable = [f"{n.uid!r} ({n.payload.describe()})" for n in sinks
              if not n.payload.can_discard_committed()]
    if unable:
        why = "; ".join(f"job {job}: {reasons[0]}" + (f" (and {len(reasons) - 1} more)"
                                                      if len(reasons) > 1 else "")
                        for job, reasons in sorted(skipped.items()))
        raise UnsafeRestoreFallbackError(
            f"restore latest would fall back to {restored_from} past every retained "
            f"checkpoint of job(s) {', '.join(sorted(skipped))}, which cannot be restored "
            f"({why}); their committed output would be written again, and sink(s) "
            f"{', '.join(unable)} cannot remove it. Restore an explicit checkpoint or "
            "savepoint (restore=PATH, `ckpt run --restore PATH`), or remove that output from "
            "the sink yourself and run with restore=None (`--restore none`)")
    for job in sorted(skipped):
        after = restored_id if job == restored_job else -1
        for n in sinks:
            n.payload.discard_committed_after(n.uid, job, after)
