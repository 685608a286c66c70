"""Regular (unbounded) joins of changelogs: Flink SQL's ``a JOIN b ON a.k = b.k``.

    joined = orders.key_by("customer_id").regular_join(
        customers.key_by("id"), how="left", uid="orders-customers",
        left_primary_key="order_id", right_primary_key="id")

Both inputs may be changelogs (:mod:`.changelog`: ``+I``/``-U``/``+U``/``-D`` in ``_op``, a
record without it is an insert); the output is a changelog. Per join key the operator keeps
every row of each side, with no time bound (the state grows with the tables, unless
``state_ttl`` drops idle rows), and emits:

* on ``+I``/``+U`` of a row: one ``+I`` per row of the other side of its key, joined;
* on ``-U``/``-D``: one ``-D`` per joined row that disappears (the same fields as the ``+I``
  that added it: built from the stored row, so a retraction needs only the row's identity).

A side with a *primary key* (``left_primary_key`` / ``right_primary_key``: a field or a
tuple of fields) keeps one row per primary key: an insert or ``+U`` of a primary key it holds
replaces that row (its joined rows are retracted first), and a ``-U``/``-D`` needs only the
primary-key fields (and the join key, to reach its subtask) -- what PostgreSQL CDC sends for
a delete with ``REPLICA IDENTITY DEFAULT``. A side without one is a multiset: a row is
identified by all its fields, duplicates are counted, and a retraction must carry the whole
row. A retraction of a row the state does not hold (never seen, or dropped by the TTL) is
dropped, counted (``dropped_retractions``) and logged.

Outer joins (``how="left"``/``"right"``/``"full"``): a row of an outer side whose key has no
row on the other side is emitted alone (``+I``, the other side's fields absent, or
``fn(row, None)``); when the other side's first row of the key arrives, that row is
retracted (``-D``) before the joined rows are emitted, and when the other side's last row
of the key goes, it is emitted alone again (Flink's ``numOfAssociations``: here every row
of a key matches every row of the other side, so one count per key and side suffices).

Output fields: the left row's fields and the right row's; a field in both is refused with
:class:`~.errors.BadRecordError` naming the join and the field, except the join key when
both sides are keyed by the same field name (kept once). Pass ``fn(left, right) -> dict``
to choose and rename the fields (``left`` or ``right`` is None for a row emitted alone); it
must be deterministic: a retraction calls it again on the stored rows. Without ``fn``,
``left_fields=`` / ``right_fields=`` (field names) pad a row emitted alone with the other
side's fields set to None (the engine has no schema: a sink that needs every column, as the
PostgreSQL upsert sink, gets them).

The operator is :class:`~.runtime.operators.joins.regular.RegularJoinOperator`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import PipelineDefinitionError
from ..eventtime import duration_ms
from ..plan.specs import JOIN_TYPES, REGULAR_JOIN, RegularJoinSpec

if TYPE_CHECKING:
    from .handles import DataStream, KeyedStream

def _primary_key(uid: str, label: str, pk) -> tuple[str, ...] | None:
    if pk is None:
        return None
    fields = (pk,) if isinstance(pk, str) else tuple(pk)
    if not fields or not all(isinstance(f, str) and f for f in fields):
        raise PipelineDefinitionError(
            f"regular join {uid!r}: {label}_primary_key={pk!r} must be a field name or a "
            "non-empty tuple of field names")
    if "_op" in fields:
        raise PipelineDefinitionError(
            f"regular join {uid!r}: {label}_primary_key cannot contain '_op' (the row kind)")
    return fields


def _fields(uid: str, label: str, fields, fn) -> tuple[str, ...]:
    if fields is None:
        return ()
    names = (fields,) if isinstance(fields, str) else tuple(fields)
    if not all(isinstance(f, str) and f and f != "_op" for f in names):
        raise PipelineDefinitionError(
            f"regular join {uid!r}: {label}_fields={fields!r} must be field names (not '_op')")
    if fn is not None:
        raise PipelineDefinitionError(
            f"regular join {uid!r}: {label}_fields pads the default output; with fn= the "
            "function builds every row (it gets None for the missing side): drop one of them")
    return names


def regular_join(left: KeyedStream, right: KeyedStream, *, how: str, uid: str,
                 left_primary_key=None, right_primary_key=None,
                 fn: Callable[[dict | None, dict | None], dict] | None = None,
                 state_ttl=None, parallelism: int | None = None,
                 name: str | None = None, left_fields=None,
                 right_fields=None) -> DataStream:
    """Build the join node (:meth:`~.api.KeyedStream.regular_join` documents the arguments)."""
    from .joins import _check_pair, _two_input

    if right._key_selector is None:
        raise PipelineDefinitionError(
            f"regular join {uid!r}: key the other stream too: "
            "a.key_by(...).regular_join(b.key_by(...), ...)")
    _check_pair("regular_join", left, right)
    if how not in JOIN_TYPES:
        raise PipelineDefinitionError(
            f"regular join {uid!r}: how={how!r} is not one of {', '.join(JOIN_TYPES)}")
    if fn is not None and not callable(fn):
        raise PipelineDefinitionError(
            f"regular join {uid!r}: fn={fn!r} is not a function(left, right) -> dict")
    ttl = None if state_ttl is None else duration_ms(state_ttl, "state_ttl")
    if ttl is not None and ttl <= 0:
        raise PipelineDefinitionError(
            f"regular join {uid!r}: state_ttl must be positive, got {ttl} ms")
    pks = (_primary_key(uid, "left", left_primary_key),
           _primary_key(uid, "right", right_primary_key))
    selectors = (left._key_selector, right._key_selector)
    fields = [getattr(s, "field", None) for s in selectors]  # key_by("field")
    shared = fields[0] if fields[0] is not None and fields[0] == fields[1] else None
    padding = (_fields(uid, "left", left_fields, fn), _fields(uid, "right", right_fields, fn))
    spec = RegularJoinSpec(selectors, how, pks, fn, ttl, shared, padding)
    out = _two_input(REGULAR_JOIN, name or f"RegularJoin ({how})", uid, parallelism, spec,
                     left, right, selectors)
    out._timestamp = None  # joined rows carry no event time of their own
    return out
