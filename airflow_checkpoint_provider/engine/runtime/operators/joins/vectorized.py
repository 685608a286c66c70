"""Vectorized joins: interval and window joins on Arrow batches, no Python call per record.

``interval_join(...).between(lo, hi).process(vectorized=True, uid=...)`` and
``join(...).where(..).equal_to(..).window(..).apply(vectorized=True, uid=...)`` run these
operators instead of the per-record ones of :mod:`.joins`, with the same semantics and the
same output rows (the default :func:`~..joins.merge_rows` output: the left row's columns,
then the right row's columns the left one lacks; a window join adds ``window_start`` and
``window_end``). They need field-name keys and a timestamp field on both sides, and no
join function (chain a ``map_batches`` for a vectorized projection).

Per input batch (one side): the timestamps and key groups of every row in numpy (the
engine's murmur3 key-group hash, :mod:`..state.key_hashing`); rows at or behind the
operator's watermark are dropped and counted (``dropped_late``, as the row path). Then

* interval join: the batch probes the other side's buffered rows with one Arrow hash join
  on the key (Acero, C++), the candidate pairs are filtered by the time range in numpy, the
  pairs are emitted as one Arrow batch, and the batch's rows that can still match a row to
  come are appended to this side's buffer (:class:`~..state.columnar.join_buffers.SideBuffer`);
* window join: the batch's rows are appended to this side's buffer once per window.

On a watermark: an interval join drops the rows whose range the watermark passed (an outer
join emits those that matched nothing: Structured Streaming's semantics, as the row path);
a window join joins the rows of the windows that end at or before the watermark with one
hash join on (key, window start) and drops them. The state is
:class:`~..state.columnar.join_buffers.JoinState`: columnar in memory with either state backend (as
``aggregate()``), one Arrow file per snapshot, rescaled by key group on restore.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pyarrow as pa

from ....errors import BadRecordError
from ....plan.functions import RuntimeContext
from ....plan.graph import Node
from ....plan.specs import IntervalJoinSpec, WindowJoinSpec
from ....state.columnar.join_buffers import JoinState, concat
from ....state.key_hashing import key_groups
from ....state.keygroups import KeyGroupRange
from ...batches import to_record_batch
from ..base import _KeyedStateOperator
from ..windowing import _CheckpointedWatermark

LEFT, RIGHT = 0, 1


def _probe(build: pa.ChunkedArray | pa.Array, probe: pa.Array | pa.ChunkedArray,
           build_extra: tuple = (), probe_extra: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs ``(build row, probe row)`` with equal keys (and equal ``*_extra`` columns),
    by Arrow's hash join (C++, no Python per row)."""
    if probe.type != build.type:
        try:
            probe = probe.cast(build.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise BadRecordError(f"join keys of type {probe.type} and {build.type} cannot be "
                                 f"compared ({exc}); both sides need keys of one type") from None
    names = ["k", *(f"x{n}" for n in range(len(build_extra)))]
    b = pa.table([build, *build_extra, pa.array(np.arange(len(build)))], names=[*names, "__b"])
    p = pa.table([probe, *probe_extra, pa.array(np.arange(len(probe)))], names=[*names, "__p"])
    joined = p.join(b, names, join_type="inner", use_threads=False)
    return (joined.column("__b").to_numpy().astype(np.int64, copy=False),
            joined.column("__p").to_numpy().astype(np.int64, copy=False))


def merge_tables(left: pa.Table, right: pa.Table) -> pa.Table:
    """Row ``i`` of the result is ``merge_rows(left[i], right[i])``: the left columns, then
    the right columns the left does not have."""
    names, columns = list(left.column_names), list(left.columns)
    for name in right.column_names:
        if name not in names:
            names.append(name)
            columns.append(right.column(name))
    return pa.Table.from_arrays(columns, names=names)


def _as_table(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    return batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])


class _VectorJoinOperator(_CheckpointedWatermark, _KeyedStateOperator):
    """What the vectorized joins share: Arrow input per side, columnar state, watermark."""

    vectorized = True
    columnar = True
    two_input = True
    backend: JoinState

    def __init__(self, node: Node, ctx: RuntimeContext, key_groups: KeyGroupRange,
                 max_parallelism: int) -> None:
        super().__init__(node, ctx)
        self.spec: Any = node.payload
        spec: Any = node.payload
        self.fields = tuple(s.field for s in spec.key_selectors)
        self.backend = JoinState(node.kind, cast(str, node.uid), key_groups, max_parallelism,
                                 self.fields, self.describe())
        self.dropped_late = 0

    def describe(self) -> dict:
        return {"keys": list(self.fields)}

    def open(self, restored_operator_state):
        self._restore_watermark(restored_operator_state)

    def process(self, records):  # pragma: no cover - the task calls process_input
        raise TypeError(f"operator {self.uid!r} has two inputs: use process_input")

    def _input(self, side: int, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """Every row's event time (int64 ms) and key group."""
        uid = cast(str, self.uid)
        ts = self.spec.timestamps[side].of_batch(batch, uid)
        field = self.fields[side]
        try:
            keys = batch.column(field)
        except KeyError:
            raise BadRecordError(f"operator {uid!r}: key field {field!r} is not a column "
                                 f"(columns: {', '.join(batch.schema.names)})") from None
        if keys.null_count:
            raise BadRecordError(
                f"operator {uid!r}: key field {field!r} is null in {keys.null_count} row(s); "
                "the vectorized join needs a key in every row: filter them out before the join")
        return ts, key_groups(keys, self.backend.max_parallelism)

    def buffered_rows(self) -> int:
        """Rows held in the join's state (both sides)."""
        return self.backend.size()


class VectorIntervalJoinOperator(_VectorJoinOperator):
    """:class:`~.joins.IntervalJoinOperator` on Arrow batches (inner, left, right, full)."""

    spec: IntervalJoinSpec

    def __init__(self, node, ctx, key_groups, max_parallelism):
        super().__init__(node, ctx, key_groups, max_parallelism)
        lo, hi = self.spec.lower_ms, self.spec.upper_ms
        #: per input: the other side's matching timestamps relative to a row's own
        self.ranges = ((lo, hi), (-hi, -lo))
        self.outer = (self.spec.outer(1), self.spec.outer(2))

    def describe(self) -> dict:
        return {**super().describe(), "lower_ms": self.spec.lower_ms,
                "upper_ms": self.spec.upper_ms, "how": self.spec.how}

    def process_input(self, input: int, batch: pa.RecordBatch) -> pa.RecordBatch | list:
        if not len(batch):
            return []
        i, uid = input - 1, cast(str, self.uid)
        ts, kg = self._input(i, batch)
        wm = self.watermark
        late = ts <= wm  # every row it could match may be gone already
        if late.any():
            self.dropped_late += int(late.sum())
            on_time = ~late
            batch, ts, kg = batch.filter(pa.array(on_time)), ts[on_time], kg[on_time]
            if not len(batch):
                return []
        rows = _as_table(batch)
        mine, other = self.backend.sides[i], self.backend.sides[1 - i]
        lo, hi = self.ranges[i]
        matched = np.zeros(len(ts), dtype=bool)
        out = []
        if len(other):
            b, p = _probe(other.keys(), rows.column(self.fields[i]))
            ots, t = other.time[b], ts[p]
            hit = (ots >= t + lo) & (ots <= t + hi)
            b, p = b[hit], p[hit]
            if len(p):
                matched[p] = True
                other.matched[b] = True
                mine_rows, other_rows = rows.take(pa.array(p)), other.take(b)
                out.append(merge_tables(mine_rows, other_rows) if i == LEFT
                           else merge_tables(other_rows, mine_rows))
        keep = ts + hi > wm  # rows a row to come (later than the watermark) can still match
        mine.append(rows.filter(pa.array(keep)) if not keep.all() else rows, kg[keep], ts[keep],
                    matched[keep], uid)
        if self.outer[i]:
            alone = ~keep & ~matched
            if alone.any():
                out.append(rows.filter(pa.array(alone)))
        return to_record_batch(concat(out, uid), f"interval join {uid!r}") if out else []

    def on_watermark(self, watermark):
        wm = self._advance(watermark)
        out = []
        for i, side in enumerate(self.backend.sides):
            if not len(side):
                continue
            gone = side.time + self.ranges[i][1] <= wm
            if not gone.any():
                continue
            if self.outer[i]:
                alone = np.flatnonzero(gone & ~side.matched)
                if len(alone):
                    out.append(to_record_batch(side.take(alone), f"interval join {self.uid!r}"))
            side.keep(~gone)
        return out


class VectorWindowJoinOperator(_VectorJoinOperator):
    """:class:`~.joins.WindowJoinOperator` on Arrow batches (tumbling and sliding windows)."""

    spec: WindowJoinSpec

    def describe(self) -> dict:
        return {**super().describe(), "window": self.spec.assigner.describe()}

    def process_input(self, input: int, batch: pa.RecordBatch) -> list:
        if not len(batch):
            return []
        i = input - 1
        ts, kg = self._input(i, batch)
        assigner = self.spec.assigner
        rows, starts = assigner.assign(ts)
        alive = starts + (assigner.size - 1) > self.watermark
        if not alive.all():
            rows, starts = rows[alive], starts[alive]
            # a row is late when every window it belongs to has fired
            self.dropped_late += len(batch) - len(np.unique(rows))
        if len(rows):
            table = _as_table(batch)
            if not (len(rows) == len(batch) and np.array_equal(rows, np.arange(len(batch)))):
                table = table.take(pa.array(rows))
            self.backend.sides[i].append(table, kg[rows], starts.astype(np.int64),
                                         np.zeros(len(rows), dtype=bool), cast(str, self.uid))
        return []

    def on_watermark(self, watermark):
        wm = self._advance(watermark)
        size = self.spec.assigner.size
        left, right = self.backend.sides
        due = [s.time + (size - 1) <= wm if len(s) else np.zeros(0, dtype=bool)
               for s in (left, right)]
        if not (due[0].any() or due[1].any()):
            return []
        out = []
        if due[0].any() and due[1].any():
            li, ri = np.flatnonzero(due[0]), np.flatnonzero(due[1])
            lrows, rrows = left.take(li), right.take(ri)
            lstart, rstart = left.time[li], right.time[ri]
            b, p = _probe(rrows.column(self.fields[RIGHT]), lrows.column(self.fields[LEFT]),
                          (pa.array(rstart),), (pa.array(lstart),))
            if len(p):
                merged = merge_tables(lrows.take(pa.array(p)), rrows.take(pa.array(b)))
                start = lstart[p]
                for name, values in (("window_start", start), ("window_end", start + size)):
                    column = pa.array(values, pa.int64())
                    at = merged.schema.get_field_index(name)
                    merged = (merged.set_column(at, name, column) if at >= 0
                              else merged.append_column(name, column))
                out.append(to_record_batch(merged, f"window join {self.uid!r}"))
        for side, fired in zip((left, right), due, strict=True):
            if len(side):
                side.keep(~fired)
        return out
