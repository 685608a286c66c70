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

from ..connectors.capabilities import SupportsDiscardCommitted
from ..errors import CorruptCheckpointError, RestoreError
from ..plan.graph import AUTO_UID_PREFIX, KEYED_KINDS, ExecutionGraph
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
    chains = {uid: op for uid, op in ops.items() if uid.startswith(AUTO_UID_PREFIX)}
    unmatched = sorted(uid for uid in ops if uid not in chains and graph.node_by_uid(uid) is None)
    if unmatched and not allow_non_restored_state:
        raise RestoreError(
            f"cannot map state of operator(s) {', '.join(repr(u) for u in unmatched)} from "
            f"{snapshot.directory} to the pipeline (no operator has that uid); pass "
            "allow_non_restored_state=True to drop it"
        )
    result: dict[tuple[int, int], dict] = {}
    _assign_chain_records(snapshot, graph, chains, result, allow_non_restored_state)
    for uid, op in ops.items():
        if uid in chains:
            continue
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
        in_flight = _in_flight(snapshot, f"operator {uid!r}", op, vertex.parallelism)
        # FLIP-147: an operator whose every subtask had reached the end of its input is
        # finished (its sources read everything, its end_input ran and its output is in the
        # snapshot): a restore does not run that again. Partly finished: per subtask when the
        # parallelism is unchanged, else not at all (the state of both kinds mixes).
        all_finished = bool(op.subtasks) and all(s.finished for s in op.subtasks)
        finished_subtasks = ({s.index for s in op.subtasks if s.finished}
                             if op.parallelism == vertex.parallelism else set())
        for sub in range(vertex.parallelism):
            spec: dict = {"directory": snapshot.directory, "states": op.states,
                          "operator_state": union, "keyed": [],
                          "channel_state": in_flight.get(sub),
                          "finished": all_finished or sub in finished_subtasks,
                          "timestamp_ms": snapshot.metadata.timestamp_ms}
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


def _in_flight(snapshot: LoadedSnapshot, what: str, op, parallelism: int) -> dict:
    """``{subtask: ChannelStateHandle}`` of ``op``'s in-flight records (unaligned checkpoints:
    restorable only at the parallelism they were taken at)."""
    in_flight = {s.index: s.channel_state for s in op.subtasks if s.channel_state is not None}
    if in_flight and op.parallelism != parallelism:
        raise RestoreError(
            f"{what}: {snapshot.directory} is an unaligned checkpoint with "
            f"in-flight records of {op.parallelism} subtasks, which cannot be restored at "
            f"parallelism {parallelism}; restore it at parallelism "
            f"{op.parallelism}, take a savepoint (savepoints are aligned) and rescale from "
            "that")
    return in_flight


def _assign_chain_records(snapshot: LoadedSnapshot, graph: ExecutionGraph, chains: dict,
                          result: dict, allow_non_restored_state: bool) -> None:
    """The in-flight records stored under a chain's derived id (a chain without a stateful
    operator with a uid, :attr:`~..graph.Vertex.auto_uid`) go to the chain with that id.
    None has it when the topology changed: refused, unless ``allow_non_restored_state``
    (the records are then dropped)."""
    for auto_uid, op in chains.items():
        vertex = graph.vertex_by_auto_uid(auto_uid)
        if vertex is None:
            if allow_non_restored_state:
                continue
            raise RestoreError(
                f"{snapshot.directory} is an unaligned checkpoint with in-flight records of "
                f"an operator chain without a uid (derived id {auto_uid!r}), and no chain of "
                "the pipeline has that id: the operators before it changed. Restore a "
                "savepoint (savepoints are aligned) or a checkpoint of this pipeline, give a "
                "stateless operator between two exchanges a uid (e.g. map(..., uid='...')) "
                "so that its in-flight records keep their place, or pass "
                "allow_non_restored_state=True to drop these records")
        what = f"chain {vertex.name!r} (derived id {auto_uid!r})"
        in_flight = _in_flight(snapshot, what, op, vertex.parallelism)
        for sub, handle in in_flight.items():
            result.setdefault((vertex.id, sub), {})[auto_uid] = {
                "directory": snapshot.directory, "states": {}, "operator_state": [],
                "keyed": [], "channel_state": handle,
                "timestamp_ms": snapshot.metadata.timestamp_ms}


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

    Only after :func:`~..runners.jobmaster.restore_plan.check_restore_plan` accepted the fallback:
    every sink confirmed it can remove that output (``Sink.check_restore``, which refuses a
    discard a sink cannot do, :meth:`~..connectors.base.Sink.can_discard_committed`), else
    :class:`~..errors.UnsafeRestoreFallbackError` before anything was removed.
    """
    for job in sorted(skipped):
        after = restored_id if job == restored_job else -1
        for n in _sinks(graph):
            if isinstance(n.payload, SupportsDiscardCommitted):  # else: it keeps nothing to remove
                n.payload.discard_committed_after(n.uid, job, after)
