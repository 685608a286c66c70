"""The specs of the two-input operators: what the DSL (:mod:`..datastream`) puts in a job
graph node's ``payload`` and the runtime (:mod:`..runtime`) builds its operator from.

Plain data below both layers: the runtime reads a spec without importing the DSL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..eventtime import TimestampSpec, WindowAssigner
from .functions import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, ProcessJoinFunction

#: ``how`` of an interval join: which sides emit their unmatched rows
JOIN_TYPES = ("inner", "left", "right", "full")


def merge_rows(left: dict | None, right: dict | None) -> dict:
    """The default output of a join: the left record's fields, then the right record's
    fields the left one does not have (a field in both keeps the left value). An unmatched
    row of an outer join is emitted with its own fields only."""
    if left is None:
        return dict(right or {})
    out = dict(left)
    if right is not None:
        for k, v in right.items():
            if k not in out:
                out[k] = v
    return out


@dataclass
class CoProcessSpec:
    """``connect(...).key_by(...).process(fn)``."""

    fn: KeyedCoProcessFunction
    key_selectors: tuple[Callable, Callable]
    timestamps: tuple[TimestampSpec | None, TimestampSpec | None]


@dataclass
class IntervalJoinSpec:
    """``interval_join(...).between(lower, upper).process(fn)``: ``fn`` is a
    :class:`ProcessJoinFunction`, a function ``fn(left, right)`` or None (:func:`merge_rows`)."""

    fn: ProcessJoinFunction | Callable | None
    key_selectors: tuple[Callable, Callable]
    timestamps: tuple[TimestampSpec, TimestampSpec]
    lower_ms: int
    upper_ms: int
    how: str = "inner"
    #: run the vectorized operator (:mod:`.runtime.operators.joins.vectorized`)
    vectorized: bool = False

    def outer(self, side: int) -> bool:
        """Whether input ``side`` (1 = left, 2 = right) emits its unmatched rows."""
        return self.how == "full" or self.how == ("left", "right")[side - 1]


@dataclass
class WindowJoinSpec:
    """``join(...).where(...).equal_to(...).window(assigner).apply(fn)``."""

    fn: ProcessJoinFunction | Callable | None
    key_selectors: tuple[Callable, Callable]
    timestamps: tuple[TimestampSpec, TimestampSpec]
    assigner: WindowAssigner
    #: run the vectorized operator (:mod:`.runtime.operators.joins.vectorized`)
    vectorized: bool = False


REGULAR_JOIN = "regular_join"


@dataclass
class RegularJoinSpec:
    """``left.regular_join(right, how=..., ...)``."""

    key_selectors: tuple[Callable, Callable]
    how: str
    #: per side: the primary-key fields, or None (a multiset of rows)
    primary_keys: tuple[tuple[str, ...] | None, tuple[str, ...] | None]
    fn: Callable[[dict | None, dict | None], dict] | None = None
    #: idle state retention in ms (None: keep rows until retracted)
    state_ttl_ms: int | None = None
    #: the join key's field name when both sides are keyed by the same field (kept once)
    shared_key_field: str | None = None
    #: per side: its field names, set to None in a row of the other side emitted alone
    #: (``left_fields`` / ``right_fields``; default output only)
    padding: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def outer(self, side: int) -> bool:
        """Whether side ``side`` (0 = left, 1 = right) emits its rows without a match."""
        return self.how == "full" or self.how == ("left", "right")[side]


TEMPORAL_JOIN = "temporal_join"
TEMPORAL_JOIN_TYPES = ("inner", "left")


@dataclass
class TemporalJoinSpec:
    """``probe.temporal_join(table, how=...).process(fn)``: ``fn`` is a
    :class:`ProcessJoinFunction`, a function ``fn(probe, row)`` or None (merge the fields)."""

    fn: ProcessJoinFunction | Callable | None
    key_selectors: tuple[Callable, Callable]
    #: the probe's event time (required) and the table's (None: a table without time)
    timestamps: tuple[TimestampSpec, TimestampSpec | None]
    how: str = "inner"


UPSERT_MATERIALIZER = "upsert_materializer"


@dataclass
class UpsertMaterializerSpec:
    """``stream.materialize_upserts(key=[...], uid=...)``."""

    key: tuple[str, ...]


BROADCAST_PROCESS = "broadcast_process"


@dataclass
class BroadcastProcessSpec:
    """``keyed.connect(broadcast_stream).process(fn)``."""

    fn: KeyedBroadcastProcessFunction
    key_selector: Callable
    timestamps: tuple[TimestampSpec | None, TimestampSpec | None]
    state_names: tuple[str, ...]
