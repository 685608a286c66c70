"""The builders of the vectorized operators (the node kinds of :data:`KINDS`)."""

from __future__ import annotations

from ..errors import PipelineDefinitionError
from .api import FORWARD, DataStream
from .joins import _check_pair, _two_input

#: node kind -> what it is (graph.py lists them as keyed kinds; runtime/operators/registry.py runs them)
KINDS = {"max_by_join": "vectorized max-by join", "latest_by_key": "vectorized latest row",
         "unique_key_join": "vectorized unique-key join",
         "temporal_table_join": "vectorized temporal table join"}


def _field(stream: DataStream, what: str, uid: str, label: str) -> str:
    selector = stream._key_selector
    name = getattr(selector, "field", None)
    if selector is None or name is None:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: the {label} input must be keyed by a field name: "
            "stream.key_by('<field>')")
    return name


def max_by_join(left: DataStream, right: DataStream, *, uid: str, start: str, end: str,
                right_time: str, by: str, right_columns: dict[str, str] | None = None,
                parallelism: int | None = None, name: str | None = None) -> DataStream:
    """Per left row (one per key, open from its ``start`` to its ``end`` time), the right
    row of its key with the highest ``by`` and ``start <= right_time <= end`` (ties: the
    earlier right time, then the earlier arrival), emitted once when the watermark passes
    ``end``: the left row's columns, then ``right_columns`` (right column -> output name;
    default: every right column kept under its name). Both inputs ``key_by(field)``; needs
    watermarks. See :mod:`.max_join`."""
    from ..plan.vectorized_specs import MaxJoinSpec

    what = "max_by_join"
    _check_pair(what, left, right)
    lk, rk = _field(left, what, uid, "left"), _field(right, what, uid, "right")
    if left._timestamp is None and right._timestamp is None:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: emits when the watermark passes each row's end: the inputs "
            "need a watermark strategy on their source")
    spec = MaxJoinSpec(lk, rk, start, end, right_time, by, dict(right_columns or {}))
    return _two_input("max_by_join", name or f"Max-by join: {by}", uid, parallelism, spec,
                      left, right, (left._key_selector, right._key_selector))


def latest_by_key(stream: DataStream, *, by: str, uid: str, parallelism: int | None = None,
                  name: str | None = None) -> DataStream:
    """Per key, the row with the highest ``by`` (ties: the later row), vectorized: for each
    input batch, the rows that became their key's latest (at most one per key): an upsert
    stream by key without retractions. ``stream`` is ``key_by(field)``. See :mod:`.latest`."""
    from ..plan.vectorized_specs import LatestSpec

    field = getattr(stream._key_selector, "field", None)
    if field is None:
        raise PipelineDefinitionError(f"latest_by_key {uid!r}: needs key_by(<field name>)")
    if not isinstance(by, str) or not by:
        raise PipelineDefinitionError(f"latest_by_key {uid!r}: by must be a column name")
    spec = LatestSpec(field, by)
    node = stream._then("latest_by_key", name or f"Latest by {by}", uid, parallelism, spec,
                        stream._key_selector)
    return DataStream(stream._p, [node], FORWARD, timestamp=stream._timestamp)


def unique_key_join(stream: DataStream, table: DataStream, *, uid: str,
                    parallelism: int | None = None, name: str | None = None) -> DataStream:
    """Inner join of ``stream`` with ``table``, whose rows have a unique key (the first row
    of a key is kept, later ones are ignored), insert-only, vectorized: a stream row joins
    its key's table row at once, or waits in state until it comes (then leaves). Output:
    the stream row's columns, then the table row's columns the stream lacks. Both inputs
    ``key_by(field)``. See :mod:`.unique_join`."""
    from ..plan.vectorized_specs import UniqueJoinSpec

    what = "unique_key_join"
    _check_pair(what, stream, table)
    spec = UniqueJoinSpec(_field(stream, what, uid, "stream"), _field(table, what, uid, "table"))
    return _two_input("unique_key_join", name or "Unique-key join", uid, parallelism, spec,
                      stream, table, (stream._key_selector, table._key_selector))


def temporal_table_join(probe: DataStream, table: DataStream, *, uid: str, how: str = "inner",
                        parallelism: int | None = None, name: str | None = None) -> DataStream:
    """Each ``probe`` row joined with the version of ``table``'s row of its key valid at the
    probe's event time (Flink's ``FOR SYSTEM_TIME AS OF``), vectorized: the semantics and
    default output of ``probe.temporal_join(table, how=how).process(uid=...)``. ``table``
    is an upsert or changelog stream (``_op``) with event time, or a bounded source without
    a watermark strategy (a static table: the probes wait until it was read). Event time is
    each input's ``timestamp_field`` (a column). ``how``: ``"inner"`` or ``"left"`` (the
    table columns null). Both inputs ``key_by(field)``. See :mod:`.temporal`."""
    from ..plan.specs import TEMPORAL_JOIN_TYPES
    from ..plan.vectorized_specs import TemporalTableJoinSpec

    what = "temporal_table_join"
    _check_pair(what, probe, table)
    if how not in TEMPORAL_JOIN_TYPES:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: how={how!r} is not one of {', '.join(TEMPORAL_JOIN_TYPES)}")
    times = []
    for label, stream in (("probe", probe), ("table", table)):
        stamp = stream._timestamp
        if stamp is not None and stamp.field is None:
            raise PipelineDefinitionError(
                f"{what} {uid!r}: the {label} input's event time is a function; this join "
                "reads it from a column: WatermarkStrategy...(timestamp_field='<column>')")
        times.append(None if stamp is None else stamp.field)
    if times[0] is None:
        raise PipelineDefinitionError(
            f"{what} {uid!r}: the probe (first) input needs event time: pass "
            "watermarks=WatermarkStrategy.for_bounded_out_of_orderness(..., "
            "timestamp_field=...) to the source(s) it reads from")
    spec = TemporalTableJoinSpec(_field(probe, what, uid, "probe"),
                                 _field(table, what, uid, "table"), times[0], times[1], how)
    out = _two_input("temporal_table_join", name or f"Temporal table join ({how})", uid,
                     parallelism, spec, probe, table, (probe._key_selector, table._key_selector))
    out._timestamp = probe._timestamp  # the output is the probe's columns first
    return out
