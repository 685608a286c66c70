"""Stream-table (temporal) joins: Flink's event-time ``FOR SYSTEM_TIME AS OF`` join.

    (orders.key_by("currency")
           .temporal_join(rates.key_by("currency"), how="left")   # rates: a changelog
           .process(uid="priced"))                                 # fn(order, rate) or merge

The second stream is a *versioned table*: each of its records is a version of the table row
of its key, valid from the record's event time until the key's next version. A record with
the changelog field ``_op`` (:mod:`.changelog`) equal to ``-D`` or ``-U`` ends the row (no
version from then on, until a later ``+I``/``+U``); a record without it is an upsert. Each
record of the first stream (the *probe*) joins the version of its key valid at the probe's
event time, once the operator's watermark (the minimum of both inputs') reaches that time,
so every version up to it has arrived.

* ``how="inner"``: a probe with no valid version (none yet, or deleted) emits nothing;
  ``how="left"``: it emits ``fn(probe, None)``.
* A table stream without a watermark strategy is a table *without time*: every record is a
  version valid since the beginning of time (the last one of a key wins), and its watermark
  stays at the minimum until it ends, so probes wait until a bounded table source was read
  entirely (a stream-static join: load a dimension table, then join).
* Rows at or behind the operator's watermark are late: dropped and counted, as in the other
  joins (a late table row could otherwise revive a row whose delete was cleaned already).

The operator is :class:`~.runtime.operators.joins.temporal.TemporalJoinOperator`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import PipelineDefinitionError
from ..plan.functions import ProcessJoinFunction
from ..plan.specs import TEMPORAL_JOIN, TEMPORAL_JOIN_TYPES, TemporalJoinSpec

if TYPE_CHECKING:
    from .handles import DataStream, KeyedStream

class TemporalJoin:
    """``probe.key_by(k).temporal_join(table.key_by(k), how=...)``: :meth:`process` it."""

    def __init__(self, probe: KeyedStream, table: KeyedStream, how: str) -> None:
        from .joins import _check_pair

        _check_pair("temporal_join", probe, table)
        if how not in TEMPORAL_JOIN_TYPES:
            raise PipelineDefinitionError(
                f"temporal_join: how={how!r} is not one of {', '.join(TEMPORAL_JOIN_TYPES)}")
        self.probe, self.table, self.how = probe, table, how

    def process(self, fn: ProcessJoinFunction | Callable | None = None, *, uid: str,
                parallelism: int | None = None, name: str | None = None) -> DataStream:
        """Emit ``fn(probe, row)`` per probe record with the table row of its key valid at
        its event time (``fn(probe, None)`` without one, left join only); default: the probe's
        fields plus the row's fields the probe lacks (:func:`~.joins.merge_rows`, without
        ``_op``)."""
        from .joins import _join_function, _two_input

        _join_function("temporal join", uid, fn)
        probe, table = self.probe, self.table
        if probe._timestamp is None:
            raise PipelineDefinitionError(
                f"temporal join {uid!r}: the probe (first) input needs event time: pass "
                "watermarks=WatermarkStrategy.for_bounded_out_of_orderness(...) to the "
                "source(s) it reads from")
        selectors = (probe._key_selector, table._key_selector)
        spec = TemporalJoinSpec(fn, selectors, (probe._timestamp, table._timestamp), self.how)
        label = name or f"TemporalJoin ({self.how})"
        out = _two_input(TEMPORAL_JOIN, label, uid, parallelism, spec, probe, table, selectors)
        if fn is None:  # the output is the probe's fields first: its event time too
            out._timestamp = probe._timestamp
        return out
