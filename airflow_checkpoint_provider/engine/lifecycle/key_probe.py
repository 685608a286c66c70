"""The key types a job would give its restored keyed operators, tried on a sample of its input
(``ckpt verify-restore``, step 4 of :mod:`.verify`).

The key type of a keyed operator is not declared anywhere: it is the type of what ``key_by``
returns (or of the key column of an ``aggregate()``). A restore keeps the key type, and the
job finds out at its first record (:class:`~..state.keys.KeyContract`,
:meth:`~..state.columnar.AggregateTable.check_key_type`). The pre-flight runs the same
checks on real records before the job starts:

1. Every source whose open has no side effects (``open_in_verify``) is opened on its restored
   splits and read for at most ``records`` records or ``seconds`` seconds.
2. The records go through the job graph vertex by vertex (topological order), every
   operator created fresh in this throwaway process; sinks are never created.
3. Before a keyed operator the snapshot restores takes its records, the runtime's own key
   check runs on them against a key of the snapshot: ``KeyContract.expect(restored key)``
   then ``KeyContract.check(key)`` for per-record state, ``AggregateTable.check_key_type``
   with the snapshot's key column type then the records' for ``aggregate()`` state (windowed
   or not). The error is the one the restored job would fail with.

What the probe cannot reach is named, not guessed: an operator no sample record reached (a
window that did not fire, a two-input operator, a source not opened) is listed in
``unprobed``. A user function that raises on the sample stops that path (the job would
fail on it too, but that is no restore problem): it is named in ``unprobed`` with the error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa

from ..plan.functions import RuntimeContext
from ..runtime.batches import as_arrow, as_rows
from ..runtime.operators.edges import SourceOperator
from ..runtime.operators.registry import open_operator
from ..state.columnar import AggregateSpec, AggregateTable
from ..state.keygroups import KeyGroupRange, key_group_range_for
from ..state.keys import KeyContract

#: records read from the sources for the probe (per job), and the time allowed to read them
PROBE_RECORDS = 200
PROBE_SECONDS = 5.0


@dataclass
class RestoredKey:
    """What the snapshot says about one keyed operator's keys: one key (per-record state) or
    the Arrow type of its key column (``aggregate()`` state)."""

    uid: str
    example: object = None
    arrow_type: pa.DataType | None = None


@dataclass
class ProbeResult:
    #: uid -> how many sample records' keys were checked
    probed: dict[str, int] = field(default_factory=dict)
    #: uid -> why its keys were not checked
    unprobed: dict[str, str] = field(default_factory=dict)
    #: (uid, reason): the error the restored job would fail with
    problems: list[tuple[str, str]] = field(default_factory=list)


def _aggregate_spec(payload: object) -> AggregateSpec | None:
    if isinstance(payload, AggregateSpec):
        return payload
    inner = getattr(payload, "aggregate", None)  # a WindowSpec's aggregation
    return inner if isinstance(inner, AggregateSpec) else None


def check_keys(node, restored: RestoredKey, batch, max_parallelism: int) -> None:
    """Raise what the restored operator ``node`` raises at the first record of ``batch`` whose
    key does not have the restored keys' type (the runtime's checks, not a copy of them)."""
    agg = _aggregate_spec(node.payload)
    if restored.arrow_type is not None and agg is not None:
        table = AggregateTable(agg, KeyGroupRange(0, -1), max_parallelism, restored.uid)
        table.check_key_type(restored.arrow_type)  # what restore_rows does first
        table.check_key_type(as_arrow(batch).schema.field(agg.key).type)  # then update()
        return
    if node.key_selector is not None and restored.example is not None:
        contract = KeyContract(restored.uid)
        contract.expect(restored.example, "the snapshot")
        for record in as_rows(batch):
            contract.check(node.key_selector(record))


def _read_sources(graph, assignments, state_backend, job_name: str, records: int,
                  seconds: float) -> dict[int, list]:
    """Step 1: ``{vertex id: [batches]}`` of every source vertex that could be read."""
    out: dict[int, list] = {}
    deadline = time.monotonic() + seconds
    for v in graph.vertices:
        node = v.nodes[0]
        if node.kind != "source":
            continue
        if not getattr(node.payload, "open_in_verify", True):
            continue  # opening it has side effects (a replication slot): not read here
        batches: list = []
        count = 0
        for sub in range(v.parallelism):
            spec = assignments.get((v.id, sub), {}).get(node.uid) if node.uid else None
            ctx = RuntimeContext(job_id="verify-restore", job_name=job_name,
                                 operator_uid=node.uid, subtask_index=sub,
                                 parallelism=v.parallelism, attempt=0)
            kgs = key_group_range_for(sub, v.parallelism, graph.max_parallelism)
            op = open_operator(node, ctx, kgs, graph.max_parallelism, state_backend, spec)
            try:
                assert isinstance(op, SourceOperator)
                while count < records and time.monotonic() < deadline:
                    batch = op.read_batch(records - count)
                    if batch is None:
                        break
                    if len(batch):
                        batches.append(batch)
                        count += len(batch)
                    else:
                        time.sleep(0.01)
            finally:
                op.close()
        out[v.id] = batches
    return out


def probe_key_types(graph, assignments: dict, restored: dict[str, RestoredKey], *,
                    state_backend: dict | None, job_name: str, records: int = PROBE_RECORDS,
                    seconds: float = PROBE_SECONDS) -> ProbeResult:
    """Steps 1-3 of the module doc for the keyed operators in ``restored`` (uid -> what the
    snapshot holds)."""
    result = ProbeResult()
    inputs = _read_sources(graph, assignments, state_backend, job_name, records, seconds)
    produced: dict[int, list] = {}
    full = KeyGroupRange(0, graph.max_parallelism - 1)
    for v in graph.vertices:
        if v.nodes[0].kind == "source":
            batches = inputs.get(v.id)
            nodes = v.nodes[1:]
        elif any(e.input is not None for e in v.inputs):
            batches, nodes = None, v.nodes  # a two-input operator: not fed by the probe
        else:
            # side outputs (late records...) are not followed: only main outputs
            got = [produced.get(u.id) for u in graph.vertices for e in u.outputs
                   if e.target_vertex == v.id and e.side is None]
            batches = None if any(b is None for b in got) or not got else [
                b for bs in got for b in (bs or [])]
            nodes = v.nodes
        for node in nodes:
            if node.kind == "sink":
                break
            restoring = node.uid in restored
            if batches is None or not any(len(b) for b in batches):
                if restoring:
                    result.unprobed[node.uid] = "no sample record reached it"
                batches = None if batches is None else []
                continue
            if restoring:
                try:
                    for b in batches:
                        check_keys(node, restored[node.uid], b, graph.max_parallelism)
                except Exception as exc:  # noqa: BLE001 - the job's own error, reported
                    result.problems.append((node.uid, str(exc)))
                    batches = None
                    continue
                result.probed[node.uid] = sum(len(b) for b in batches)
            batches = _run_fresh(node, batches, full, graph.max_parallelism, state_backend,
                                 job_name, result)
        produced[v.id] = batches if batches is not None else None  # type: ignore[assignment]
    for uid in restored:
        if uid not in result.probed and uid not in result.unprobed and not any(
                p[0] == uid for p in result.problems):
            result.unprobed[uid] = "no sample record reached it"
    return result


def _run_fresh(node, batches: list, key_groups: KeyGroupRange, max_parallelism: int,
               state_backend: dict | None, job_name: str, result: ProbeResult) -> list | None:
    """Step 2: ``batches`` through a fresh instance of ``node``; None when it raised."""
    ctx = RuntimeContext(job_id="verify-restore", job_name=job_name, operator_uid=node.uid,
                         subtask_index=0, parallelism=1, attempt=0)
    try:
        op = open_operator(node, ctx, key_groups, max_parallelism, state_backend, None)
    except Exception as exc:  # noqa: BLE001 - named in unprobed below
        result.unprobed[node.uid or node.name] = f"not created in the probe: {exc}"
        return None
    out: list = []
    try:
        for b in batches:
            if not len(b):
                continue
            res = op.process(as_arrow(b) if op.vectorized else as_rows(b))
            if res is not None and len(res):
                out.append(res)
    except Exception as exc:  # noqa: BLE001 - the probe stops on this path
        result.unprobed[node.uid or node.name] = (f"its function raised on the sample "
                                                  f"({type(exc).__name__}: {exc})")
        return None
    finally:
        op.close()
    return out
