"""The operator registry: for every kind of plan node, the operator that runs it, the spec
its node carries, the keyed state it keeps and what a restore may bring it.

Each operator is declared once, by an :class:`OperatorEntry`:

* ``operator`` -- the class the task runs (:mod:`.base` and the modules beside it);
* ``spec`` -- the type of the node's payload (:mod:`...plan.specs` and the state specs),
  checked when the operator is created (``None``: a plain user function);
* ``layout`` -- how its keyed state is kept: :attr:`StateLayout.PER_RECORD` (per-key entries
  in the job's state backend), :attr:`StateLayout.COLUMNAR` (Arrow tables, ``arrow``
  snapshot files) or :attr:`StateLayout.NONE` (no keyed state);
* ``states`` -- the names of the keyed states it owns (the states a user function declares
  are not listed: their names are the user's);
* ``when`` -- for a kind run by two operators, the spec test that picks this one (a join
  declared with ``vectorized=True``; an aggregate with ``count_distinct``).

Restore compatibility asks the registry (:func:`check_restore`): a snapshot's keyed state is
read only by an operator of the same layout, and the operator that wrote it is found by the
state names the snapshot holds, never by parsing them. The ``verify-restore`` pre-flight
opens every restoring operator through :func:`open_operator` and so applies the same rules.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ...connectors.base import Sink, Source
from ...errors import CorruptCheckpointError, RestoreError
from ...plan.functions import KeyedProcessFunction, RuntimeContext
from ...plan.graph import Node
from ...plan.specs import (
    BroadcastProcessSpec,
    CoProcessSpec,
    IntervalJoinSpec,
    RegularJoinSpec,
    TemporalJoinSpec,
    UpsertMaterializerSpec,
    WindowJoinSpec,
)
from ...plan.vectorized_specs import (
    LatestSpec,
    MaxJoinSpec,
    TemporalTableJoinSpec,
    UniqueJoinSpec,
)
from ...snapshot.handles import keyed_handle_from_dict
from ...state.columnar import AggregateSpec
from ...state.columnar.distinct_state import has_distinct
from ...state.columnar.topn_state import TopNSpec
from ...state.columnar.windows import WindowFunctionSpec, WindowSpec
from ...state.keygroups import KeyGroupRange
from ...state.keys import expect_restored_key_type
from .base import (
    AggregateOperator,
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    Operator,
    ProcessOperator,
    ReduceOperator,
    _KeyedStateOperator,
)
from .broadcast import BroadcastProcessOperator
from .distinct import DistinctAggregateOperator
from .edges import SinkOperator, SourceOperator
from .joins import per_record, regular, temporal
from .joins.vectorized import VectorIntervalJoinOperator, VectorWindowJoinOperator
from .sessions import SessionAggregateOperator
from .topn import TopNOperator
from .upsert_materializer import STATE as UPSERT_STATE
from .upsert_materializer import UpsertMaterializerOperator
from .vectorized import latest, max_join, unique_join
from .vectorized import temporal as temporal_table
from .windowing import WindowAggregateOperator, WindowFunctionOperator


class StateLayout(enum.Enum):
    """How an operator keeps its keyed state (what its snapshot files are)."""

    NONE = "none"
    PER_RECORD = "per-record"
    COLUMNAR = "columnar"


@dataclass(frozen=True)
class OperatorEntry:
    """One operator as the registry knows it (see the module docstring)."""

    kind: str
    operator: type[Operator]
    spec: type | tuple[type, ...] | None
    layout: StateLayout
    states: tuple[str, ...] = ()
    when: Callable[[object], bool] | None = None
    #: the family a restore error names its state by (``vectorized ops``: by state name)
    family: str = ""

    @property
    def takes_state_backend(self) -> bool:
        """The job's state backend choice reaches it (it keeps per-record keyed state)."""
        return self.layout is StateLayout.PER_RECORD


def _vectorized(payload: object) -> bool:
    return bool(getattr(payload, "vectorized", False))


def _distinct(payload: object) -> bool:
    return has_distinct(cast(AggregateSpec, payload))


P, C, N = StateLayout.PER_RECORD, StateLayout.COLUMNAR, StateLayout.NONE

#: every operator, the more specific entry of a kind (with ``when``) first
ENTRIES: tuple[OperatorEntry, ...] = (
    OperatorEntry("source", SourceOperator, Source, N),
    OperatorEntry("sink", SinkOperator, Sink, N),
    OperatorEntry("map", MapOperator, None, N),
    OperatorEntry("flat_map", FlatMapOperator, None, N),
    OperatorEntry("filter", FilterOperator, None, N),
    OperatorEntry("map_batches", MapBatchesOperator, None, N),
    OperatorEntry("process", ProcessOperator, KeyedProcessFunction, P),
    OperatorEntry("reduce", ReduceOperator, None, P),
    OperatorEntry("window", WindowFunctionOperator, WindowFunctionSpec, P),
    OperatorEntry("co_process", per_record.CoProcessOperator, CoProcessSpec, P),
    OperatorEntry("interval_join", VectorIntervalJoinOperator, IntervalJoinSpec, C,
                  ("interval-join.vectorized",), when=_vectorized, family="vectorized join"),
    OperatorEntry("interval_join", per_record.IntervalJoinOperator, IntervalJoinSpec, P,
                  per_record.INTERVAL_STATES),
    OperatorEntry("window_join", VectorWindowJoinOperator, WindowJoinSpec, C,
                  ("window-join.vectorized",), when=_vectorized, family="vectorized join"),
    OperatorEntry("window_join", per_record.WindowJoinOperator, WindowJoinSpec, P,
                  per_record.WINDOW_STATES + per_record.LEGACY_WINDOW_STATES),
    OperatorEntry("broadcast_process", BroadcastProcessOperator, BroadcastProcessSpec, P),
    OperatorEntry("temporal_join", temporal.TemporalJoinOperator, TemporalJoinSpec, P,
                  (temporal.PROBE_STATE, temporal.VERSION_STATE, temporal.PROBE_COUNT_STATE,
                   temporal.LEGACY_PROBE_STATE)),
    OperatorEntry("regular_join", regular.RegularJoinOperator, RegularJoinSpec, P,
                  regular.STATES),
    OperatorEntry("upsert_materializer", UpsertMaterializerOperator, UpsertMaterializerSpec, P,
                  (UPSERT_STATE,)),
    OperatorEntry("aggregate", DistinctAggregateOperator, AggregateSpec, C, when=_distinct),
    OperatorEntry("aggregate", AggregateOperator, AggregateSpec, C),
    OperatorEntry("window_aggregate", WindowAggregateOperator, WindowSpec, C),
    OperatorEntry("top_n", TopNOperator, TopNSpec, C),
    OperatorEntry("session_aggregate", SessionAggregateOperator, WindowSpec, C),
    OperatorEntry("max_by_join", max_join.MaxJoinOperator, MaxJoinSpec, C,
                  (max_join.STATE_NAME,), family="vectorized ops"),
    OperatorEntry("latest_by_key", latest.LatestOperator, LatestSpec, C,
                  (latest.STATE_NAME,), family="vectorized ops"),
    OperatorEntry("unique_key_join", unique_join.UniqueJoinOperator, UniqueJoinSpec,
                  C, (unique_join.STATE_NAME,), family="vectorized ops"),
    OperatorEntry("temporal_table_join", temporal_table.TemporalTableJoinOperator,
                  TemporalTableJoinSpec, C, (temporal_table.STATE_NAME,),
                  family="vectorized ops"),
)

_BY_KIND: dict[str, list[OperatorEntry]] = {}
for _e in ENTRIES:
    _BY_KIND.setdefault(_e.kind, []).append(_e)
_OWNER: dict[str, OperatorEntry] = {name: e for e in ENTRIES for name in e.states}


def kinds() -> frozenset[str]:
    """Every node kind the runtime runs."""
    return frozenset(_BY_KIND)


def entry_for(node: Node) -> OperatorEntry:
    """The entry that runs ``node`` (its kind, and its spec for a kind with variants)."""
    try:
        candidates = _BY_KIND[node.kind]
    except KeyError:
        raise ValueError(f"node {node.uid or node.name!r}: no operator runs node kind "
                         f"{node.kind!r}") from None
    return next(e for e in candidates if e.when is None or e.when(node.payload))


def owner_of(state_name: str) -> OperatorEntry | None:
    """The operator that owns the keyed state ``state_name``, if one declares it."""
    return _OWNER.get(state_name)


def create_operator(node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                    max_parallelism: int, state_backend: dict | None = None) -> Operator:
    """The operator of ``node`` (not opened), after checking its spec type."""
    entry = entry_for(node)
    if entry.spec is not None and not isinstance(node.payload, entry.spec):
        raise TypeError(f"node {node.uid or node.name!r} ({node.kind}): its spec is a "
                        f"{type(node.payload).__name__}, the {entry.operator.__name__} "
                        f"takes a {getattr(entry.spec, '__name__', entry.spec)}")
    cls = cast(Callable[..., Operator], entry.operator)
    if entry.layout is StateLayout.NONE:
        return cls(node, ctx)
    if entry.takes_state_backend:
        return cls(node, ctx, key_groups, max_parallelism, state_backend)
    return cls(node, ctx, key_groups, max_parallelism)


def check_restore(node: Node, entry: OperatorEntry, spec: dict, handle_kinds: set[str]) -> None:
    """Refuse (:class:`RestoreError`) a snapshot whose keyed state ``node``'s operator does
    not read: columnar (``arrow`` files) into a per-record operator or the other way round.
    The state is not converted: the message says to keep the operator as it was or to give
    it a new uid and restore with ``allow_non_restored_state=True``."""
    if not handle_kinds:
        return
    columnar = "arrow" in handle_kinds
    if columnar == (entry.layout is StateLayout.COLUMNAR):
        return
    joins = [e for e in _BY_KIND.get(node.kind, ()) if e.family == "vectorized join"]
    held = "aggregate()" if columnar else "process()/reduce()"
    if joins:  # the per-record and the vectorized join keep different state
        held = "vectorized join" if columnar else "per-record (vectorized=False) join"
    owned = sorted(n for n in spec.get("states") or {}
                   if (o := owner_of(n)) is not None and o.family == "vectorized ops")
    if owned:  # a vectorized-ops snapshot into another operator
        held = f"vectorized ({', '.join(owned)})"
    if entry.family == "vectorized ops":
        held = "vectorized" if columnar else "per-record (co-process/reduce/temporal_join)"
        raise RestoreError(
            f"operator {node.uid!r}: the snapshot holds {held} state, but the operator "
            f"with this uid is now a {node.kind}() (its state is columnar); the per-record "
            "state is not converted: give it a new uid and restore with "
            "allow_non_restored_state=True")
    vectorized_now = bool(joins) and entry.family == "vectorized join"
    now = f"{node.kind}(){' with vectorized=True' if vectorized_now else ''}"
    raise RestoreError(
        f"operator {node.uid!r}: the snapshot holds {held} state, but the operator with "
        f"this uid is now a {now}; {'keep vectorized= as it was, or ' * bool(joins)}"
        "give it a new uid and restore with allow_non_restored_state=True")


def open_operator(node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                  max_parallelism: int, state_backend: dict | None, spec: dict | None, *,
                  splits: list[str] | None = None) -> Operator:
    """Create the operator of ``node`` and open it on its restored state ``spec`` (an entry
    of :func:`~...checkpoint.restore.assign_restore`, or ``None``): keyed state of the key
    groups in ``key_groups``, then operator state. ``splits``: a source's split list."""
    entry = entry_for(node)
    op = create_operator(node, ctx, key_groups, max_parallelism, state_backend)
    if isinstance(op, SourceOperator):
        op.splits = splits
    # decoded (and validated) again here: the spec's handles came from a _metadata file
    handles = [keyed_handle_from_dict(h, location=cast(dict, spec)["directory"])
               for h in (spec or {}).get("keyed") or []]
    if spec:
        check_restore(node, entry, spec, {h.type for h in handles})
    if spec and op.keyed:  # the backend keeps exactly the key groups it owns
        cast(_KeyedStateOperator, op).backend.restore_state(spec["directory"], handles,
                                                            spec["states"])
        expect_restored_key_type(op, spec["directory"])  # a restore keeps the key type
    try:
        op.open(spec.get("operator_state") if spec else None)
    except CorruptCheckpointError as exc:
        if not spec:
            raise
        raise CorruptCheckpointError(
            f"{exc} (operator {node.uid!r}, restored from {spec['directory']})") from exc
    return op
