"""Upsert materialization: Flink's ``SinkUpsertMaterializer`` in front of an upsert sink.

    joined.materialize_upserts(key=["order_id"], uid="orders-out.upsert-materializer")

Why: an upsert sink (:mod:`.connectors.upsert`) applies, per key, the *last* record it
receives. A changelog whose records of one sink key come from several subtasks has no order
between them: when a :mod:`.regular_join` row moves to another join key (an order changes
customer), its ``-D`` is emitted by the subtask of the old join key and its ``+I`` by the
subtask of the new one, so the sink may get the ``+I`` first and then delete the new row.

What: keyed by the sink's key, the operator keeps the rows currently *alive* for the key (a
``+I``/``+U`` adds one, a ``-U``/``-D`` removes an equal one: full-row equality, ``_op``
excluded; equal rows are counted), and emits the last alive row as an upsert (``+U``), or a
delete (``-D``) when none is left. Arrival order of the two halves of a move no longer
matters: either the ``-D`` removes the old row before the ``+I`` adds the new one, or the
``+I`` becomes the last alive row and the late ``-D`` removes the older, hidden one (no
output). A retraction of a row the key does not hold is counted (``dropped_retractions``)
and dropped when the key holds other rows; when it holds none, it goes on as a delete of the
key (idempotent: it keeps a sink written before the materializer existed right, where
Flink's would leave the stale row).

Where: :meth:`~.api.DataStream.sink` puts one automatically in front of an upsert sink
(``mode="upsert"``, ``key=[...]``) fed by a ``regular_join`` when the join or anything
between it and the sink (the sink included) runs at a parallelism above 1, with uid
``<sink uid>.upsert-materializer``; ``sink(..., materialize_upserts=True/False)`` forces it
on or off. The operator is :class:`~.runtime.operators.upsert_materializer.UpsertMaterializerOperator`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..connectors.capabilities import upsert_columns
from ..errors import BadRecordError, PipelineDefinitionError
from ..plan.specs import UPSERT_MATERIALIZER, UpsertMaterializerSpec

if TYPE_CHECKING:
    from ..connectors.base import Sink
    from .handles import DataStream

#: the suffix of the uid of a materializer :meth:`~.api.DataStream.sink` adds
AUTO_UID_SUFFIX = ".upsert-materializer"


class ColumnsSelector:
    """The key of a record as the tuple of several fields (picklable, unlike a lambda)."""

    __slots__ = ("fields",)

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)

    def __call__(self, record: dict) -> tuple:
        try:
            return tuple(record[f] for f in self.fields)
        except KeyError as exc:
            raise BadRecordError(f"key field {exc.args[0]!r} is missing from a record (its "
                                 f"fields: {', '.join(map(str, list(record)[:20]))})") from None

    def __reduce__(self):
        return (ColumnsSelector, (self.fields,))

    def __repr__(self) -> str:
        return f"ColumnsSelector({self.fields!r})"


def _key_fields(uid: str, key) -> tuple[str, ...]:
    fields = (key,) if isinstance(key, str) else tuple(key or ())
    if not fields or not all(isinstance(f, str) and f and f != "_op" for f in fields) \
            or len(set(fields)) != len(fields):
        raise PipelineDefinitionError(
            f"upsert materializer {uid!r}: key={key!r} must be a field name or distinct field "
            "names (the upsert sink's key columns, not '_op')")
    return fields


def materialize_upserts(stream: DataStream, *, key, uid: str, parallelism: int | None = None,
                        name: str | None = None) -> DataStream:
    """Build the node (:meth:`~.api.DataStream.materialize_upserts` documents it)."""
    fields = _key_fields(uid, key)
    # one field: key_by's field selector (vectorized hashing); several: a tuple
    keyed = stream.key_by(fields[0] if len(fields) == 1 else ColumnsSelector(fields))
    node = keyed._then(UPSERT_MATERIALIZER, name or f"UpsertMaterializer ({', '.join(fields)})",
                       uid, parallelism, UpsertMaterializerSpec(fields), keyed._key_selector)
    return keyed._downstream(node, stream._timestamp)


def upsert_sink_key(sink: Sink) -> list[str] | None:
    """The key columns of an upsert sink (``mode="upsert"``,
    :class:`~..connectors.capabilities.SupportsUpsert`), else None."""
    return upsert_columns(sink)


def unordered_join_upstream(stream: DataStream, sink_parallelism: int | None) -> str | None:
    """The uid of a ``regular_join`` whose output reaches ``stream``'s heads (not through a
    materializer) with a parallelism above 1 on the way -- the join's, an operator's in
    between, or the sink's (``sink_parallelism``, None: its default) -- else None."""
    from ..plan.graph import _resolve_parallelism

    graph = stream._p._graph
    par = _resolve_parallelism(graph)
    sink_p = sink_parallelism or max((par[h.id] for h in stream._heads), default=1)
    seen: set[tuple[int, bool]] = set()
    todo = [(h.id, sink_p > 1) for h in stream._heads]
    while todo:
        node_id, wide = todo.pop()
        wide = wide or par[node_id] > 1
        if (node_id, wide) in seen:
            continue
        seen.add((node_id, wide))
        node = graph.nodes[node_id]
        if node.kind == UPSERT_MATERIALIZER:
            continue
        if node.kind == "regular_join" and wide:
            return node.uid or node.name
        todo.extend((e.source, wide) for e in graph.inputs(node_id))
    return None


def before_sink(stream: DataStream, sink: Sink, *, uid: str, parallelism: int | None,
                materialize: bool | None) -> DataStream:
    """``stream``, or a materializer of it when the sink needs one (see the module doc)."""
    key = upsert_sink_key(sink)
    if key is None:
        if materialize:
            raise PipelineDefinitionError(
                f"sink {uid!r}: materialize_upserts=True is for upsert sinks (mode='upsert', "
                "key=[...]); this sink appends")
        return stream
    if materialize is None:
        materialize = unordered_join_upstream(stream, parallelism) is not None
    if not materialize:
        return stream
    return materialize_upserts(stream, key=key, uid=f"{uid}{AUTO_UID_SUFFIX}",
                               parallelism=parallelism,
                               name=f"UpsertMaterializer ({uid})")
