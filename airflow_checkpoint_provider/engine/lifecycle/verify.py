"""Pre-flight restore check: can this pipeline restore that snapshot? Answered without
starting the job (``ckpt verify-restore``, ``VerifyRestoreOperator``).

1. The snapshot's ``_metadata`` and every state file it references verify (sizes, SHA-256).
2. The pipeline's job graph (at ``parallelism`` if given) maps the snapshot's operators by
   uid: operator kinds, max parallelism, unmatched uids (unless
   ``allow_non_restored_state``), in-flight records of an unaligned checkpoint at another
   parallelism; sinks accept their restored transactions.
2b. The keys of every keyed operator it restores (all of them, :mod:`.state_io.keys`): each
   a key of the key contract (no NaN, int64, no struct...) in the key group its hash
   gives, all of one type -- keys of a second type are the orphaned state of a restore that
   changed the key type, or keys written with another type. The key type of each operator
   is in the report (``key_types``); ``key_types=`` (uid -> the type the job's ``key_by``
   gives) reports a restore that would change it (the restored job would fail at its first
   record of the other type).
2c. A snapshot of the other keyed-state backend (RocksDB for a heap job, or heap for a
   RocksDB job) restores, state by state; a state that does not convert (entry map state
   with its own serializer) is a problem naming the operator and the state.
3. In a throwaway process, every subtask's operators are created and opened on the restored
   state of a sample of their key groups (the first ``sample_key_groups`` of each subtask's
   range): user functions declare their states, so a state whose kind or serializer changed,
   a TTL that does not fit, a changed ``aggregate()`` are found here. Sinks are not opened
   (opening one commits the restored transactions); sources open their restored splits.
4. In the same process, a sample of the job's input from the restored positions goes through
   the job graph up to every keyed operator the snapshot restores, and the runtime's own key
   checks run on its keys against the snapshot's (:mod:`.key_probe`): a ``key_by`` that now
   returns another type, an ``aggregate()`` whose key column changed type, are refused with
   the error the restored job would fail with at its first record. Operators no sample
   record reached are listed in the report (``keys_unprobed``).

The report names each problem's operator uid and, where known, the state.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import cloudpickle

from ..connectors.capabilities import SupportsRelocation
from ..errors import EngineError
from .key_probe import PROBE_RECORDS, RestoredKey, probe_key_types

_UID = re.compile(r"operator(?:\(s\))? '([^']+)'")
_STATE = re.compile(r"state '([^']+)'")


@dataclass
class RestoreProblem:
    uid: str | None
    state: str | None
    reason: str

    @classmethod
    def of(cls, exc: BaseException | str, uid: str | None = None) -> RestoreProblem:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        found_uid = _UID.search(text)
        found_state = _STATE.search(text)
        return cls(uid or (found_uid[1] if found_uid else None),
                   found_state[1] if found_state else None, text)


@dataclass
class VerifyReport:
    snapshot: str
    checkpoint_id: int | None = None
    parallelism: dict[str, int] = field(default_factory=dict)
    operators_opened: list[str] = field(default_factory=list)
    problems: list[RestoreProblem] = field(default_factory=list)
    #: uid -> the type of the keys of its state in the snapshot (``str``, ``int``,
    #: ``tuple[str, int]``...; operators without keys are left out)
    key_types: dict[str, str] = field(default_factory=dict)
    #: uid -> how many sample input records' keys were checked against the snapshot's keys
    keys_probed: dict[str, int] = field(default_factory=dict)
    #: uid -> why no sample record's key was checked (step 4 could not reach it)
    keys_unprobed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def describe(self) -> str:
        if self.ok:
            keys = ", ".join(f"{uid}: {t}" for uid, t in sorted(self.key_types.items()))
            unprobed = ", ".join(f"{uid} ({why})" for uid, why in
                                 sorted(self.keys_unprobed.items()))
            return (f"{self.snapshot} (checkpoint {self.checkpoint_id}) restores: "
                    f"{len(self.operators_opened)} operator subtasks opened on their state"
                    + (f"; key types {keys}" if keys else "")
                    + (f"; keys of sample input checked for "
                       f"{', '.join(sorted(self.keys_probed))}" if self.keys_probed else "")
                    + (f"; keys not checked on input: {unprobed}" if unprobed else ""))
        return "; ".join(f"operator {p.uid!r}" + (f", state {p.state!r}" if p.state else "")
                         + f": {p.reason}" for p in self.problems)


def verify_restore(pipeline, snapshot: str, *, parallelism: int | None = None,
                   allow_non_restored_state: bool = False, sample_key_groups: int = 1,
                   timeout: float = 300.0,
                   key_types: Mapping[str, object] | None = None,
                   probe_records: int = PROBE_RECORDS, metadata_url: str | None = None,
                   trust_snapshot: bool = False) -> VerifyReport:
    """Check that ``pipeline`` (an :class:`~.api.Pipeline`) restores ``snapshot``.
    ``key_types``: operator uid -> the type of the keys the job gives it (``int``,
    ``"str"``, ``"tuple[str, int]"``); a restore that changes it is a problem.
    ``probe_records``: input records read to check the keys the job gives (0: none).
    ``metadata_url``: the job's metadata DB: the snapshot must be signed with its key (or
    ``$CKPT_SNAPSHOT_HMAC_KEY``), as the restore requires (:class:`~..checkpoint.trust.
    SnapshotTrust`, the restore's own check), unless ``trust_snapshot``."""
    from ..checkpoint.restore import assign_restore
    from ..snapshot.verify import load_verified_snapshot

    report = VerifyReport(snapshot=snapshot)
    try:
        if metadata_url is not None:
            from ..catalog import MetadataStore
            from ..checkpoint.trust import SnapshotTrust

            with MetadataStore(metadata_url, migrate=False) as store:
                SnapshotTrust(store, trust_snapshot=trust_snapshot).load(snapshot)
        snap = load_verified_snapshot(snapshot)
    except EngineError as exc:
        report.problems.append(RestoreProblem.of(exc))
        return report
    report.checkpoint_id = snap.checkpoint_id
    if parallelism is not None:
        pipeline = copy.deepcopy(pipeline)
        for node in pipeline._graph.nodes:
            node.parallelism = parallelism
    graph = pipeline.execution_graph()
    report.parallelism = {n.uid: v.parallelism for v in graph.vertices for n in v.nodes if n.uid}
    try:
        assignments = assign_restore(snap, graph, allow_non_restored_state=allow_non_restored_state)
    except EngineError as exc:
        report.problems.append(RestoreProblem.of(exc))
        return report
    ops = snap.metadata.operators
    restored_keys = _check_keys(report, snap, graph, key_types or {})
    _check_backend_switch(report, snap, graph, pipeline.state_backend)
    for v in graph.vertices:
        for n in v.nodes:
            if n.kind == "sink" and n.uid in ops and isinstance(n.payload, SupportsRelocation):
                txns = [t for s in ops[n.uid].subtasks for e in s.operator_state
                        if isinstance(e, dict) for t in e.get("transactions") or []]
                try:
                    n.payload.check_restored_transactions(txns, location=snapshot)
                except EngineError as exc:
                    report.problems.append(RestoreProblem.of(exc, n.uid))
    if report.problems:
        return report
    job = {"graph": graph, "assignments": assignments, "sample": sample_key_groups,
           "state_backend": {"kind": pipeline.state_backend, "incremental": pipeline.incremental},
           "job_name": pipeline.name, "restored_keys": restored_keys,
           "probe_records": probe_records}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        proc = subprocess.run([sys.executable, "-m", "airflow_checkpoint_provider.engine.lifecycle.verify"],
                              input=cloudpickle.dumps(job), capture_output=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        report.problems.append(RestoreProblem(None, None, f"opening the restored operators "
                                                          f"took longer than {timeout:.0f} s"))
        return report
    try:
        result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        report.problems.append(RestoreProblem(None, None, "the check process failed: "
                                              + proc.stderr.decode()[-2000:]))
        return report
    report.operators_opened = result["opened"]
    report.problems += [RestoreProblem(**p) for p in result["problems"]]
    report.keys_probed = result.get("keys_probed", {})
    report.keys_unprobed = result.get("keys_unprobed", {})
    return report


def _type_name(declared: object) -> str:
    if declared is None or declared is type(None):
        return "NoneType"
    return declared.__name__ if isinstance(declared, type) else str(declared)


def _check_keys(report: VerifyReport, snap, graph,
                key_types: Mapping[str, object]) -> dict[str, RestoredKey]:
    """Every key of every keyed operator ``graph`` restores from ``snap``; the key types in
    the report; a key type that differs from the job's (``key_types``) is a problem.
    Returns what step 4 checks the sample's keys against (uid -> a restored key)."""
    from ..state.keys import canonical_key
    from ..state_io.read import KEY, iter_entries, open_keyed_operator, read_arrow_rows
    from ..state_io.snapshot_keys import snapshot_key_problems

    examples: dict[str, RestoredKey] = {}
    restored = {n.uid for v in graph.vertices for n in v.nodes if n.uid}
    for uid, op in sorted(snap.metadata.operators.items()):
        if op.kind != "keyed" or uid not in restored:
            continue
        try:
            keyed = open_keyed_operator(snap, uid)
            found, problems = snapshot_key_problems(keyed)
        except EngineError as exc:
            report.problems.append(RestoreProblem.of(exc, uid))
            continue
        report.problems += [RestoreProblem(uid, state, reason) for state, reason in problems]
        if found is None:
            continue
        report.key_types[uid] = found
        if not problems:
            if keyed.columnar:
                keys = read_arrow_rows(keyed).column(KEY)
                examples[uid] = RestoredKey(uid, arrow_type=keys.type)
            else:
                key = next((k for _, _, k, _ in iter_entries(keyed)), None)
                examples[uid] = RestoredKey(uid, example=canonical_key(key, uid))
        declared = key_types.get(uid)
        if declared is not None and _type_name(declared) != found:
            report.problems.append(RestoreProblem(
                uid, None, f"the snapshot's keys are {found}, but the job keys this operator "
                f"by {_type_name(declared)}: a restore must keep the key type (the restored "
                f"job fails at its first record, its restored state would never be read "
                f"again); make key_by return {found} keys, rewrite the state's keys (ckpt "
                f"state read / ckpt state write), or give the operator a new uid and restore "
                f"with allow_non_restored_state=True"))
    return examples


def _check_backend_switch(report: VerifyReport, snap, graph, backend: str) -> None:
    """A snapshot written by the other keyed-state backend (RocksDB -> heap, heap ->
    RocksDB) restores, except the states that do not convert
    (:func:`~..state.heap.restore.backend_switch_problems`): each is a problem naming the
    operator and the state, found here for every key group, not only the sampled ones."""
    from ..state.heap.restore import backend_switch_problems

    restored = {n.uid for v in graph.vertices for n in v.nodes if n.uid}
    for uid, op in sorted(snap.metadata.operators.items()):
        if op.kind != "keyed" or uid not in restored:
            continue
        types = {s.keyed.type for s in op.subtasks if s.keyed is not None}
        report.problems += [RestoreProblem(uid, state, reason) for state, reason in
                            backend_switch_problems(op.states, types, backend)]


def _open_all(job: dict) -> dict:
    """In the throwaway process: open every restoring operator on a sample of its key groups."""
    from ..plan.functions import RuntimeContext
    from ..runtime.operators.registry import open_operator
    from ..state.keygroups import KeyGroupRange, key_group_range_for

    graph, opened, problems = job["graph"], [], []
    for (vid, sub), specs in sorted(job["assignments"].items()):
        v = graph.vertex(vid)
        for node in v.nodes:
            spec = specs.get(node.uid) if node.uid else None
            if spec is None or node.kind == "sink" or (
                    node.kind == "source" and not getattr(node.payload, "open_in_verify", True)):
                continue  # a source whose open has side effects is checked at job start
            full = key_group_range_for(sub, v.parallelism, graph.max_parallelism)
            sample = KeyGroupRange(full.start, min(full.end, full.start + job["sample"] - 1))
            ctx = RuntimeContext(job_id="verify-restore", job_name=job["job_name"],
                                 operator_uid=node.uid, subtask_index=sub,
                                 parallelism=v.parallelism, attempt=0)
            try:
                op = open_operator(node, ctx, sample, graph.max_parallelism,
                                   job["state_backend"], spec)
                try:
                    _check_declared_states(node.uid, op, spec)
                finally:
                    op.close()
                opened.append(f"{node.uid}[{sub}]")
            except Exception as exc:  # noqa: BLE001 - every problem is reported
                problems.append(asdict(RestoreProblem.of(exc, node.uid)))
    if not problems and job["probe_records"] > 0 and job["restored_keys"]:
        probe = probe_key_types(graph, job["assignments"], job["restored_keys"],
                                state_backend=job["state_backend"], job_name=job["job_name"],
                                records=job["probe_records"])
        problems += [asdict(RestoreProblem(uid, None, reason)) for uid, reason in probe.problems]
        return {"opened": opened, "problems": problems, "keys_probed": probe.probed,
                "keys_unprobed": probe.unprobed}
    return {"opened": opened, "problems": problems}


def _check_declared_states(uid: str, op, spec: dict) -> None:
    """Every state the operator declared in ``open`` against the snapshot's declaration of
    it, whether or not the sampled key groups hold any of its entries (a restore checks only
    the states it finds data for)."""
    from ..state.descriptors import check_compatible

    declared = getattr(getattr(op, "backend", None), "descriptors", None) or {}
    for name, meta in (spec.get("states") or {}).items():
        if name in declared:
            check_compatible(uid, declared[name], None, meta)


def main() -> int:
    job = cloudpickle.loads(sys.stdin.buffer.read())
    print(json.dumps(_open_all(job)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
