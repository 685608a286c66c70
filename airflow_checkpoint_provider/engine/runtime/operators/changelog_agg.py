"""Changelog input and output of ``key_by(field).aggregate(...)``.

Input: a batch with an :data:`~..changelog.OP_FIELD` column is a changelog (a row without a
kind, or a null one, is ``+I``). ``+I``/``+U`` rows add to their key's accumulators, ``-U``/
``-D`` rows subtract: ``count``, ``sum`` and ``mean`` retract exactly (sums of integers stay
integers). ``min`` and ``max`` are refused on retraction with :class:`BadRecordError` naming
the operator and the aggregation: retracting them needs every value per key (a multiset per
key), which this columnar state does not keep -- use ``process()`` with keyed state for that.
A key whose count falls to 0 has no result any more; its row leaves the next snapshot.

Output (``emit``):

* ``"update"`` (the default for input without the field): one row per key the batch touched,
  with its running results (Structured Streaming's update mode), as before.
* ``"changelog"`` (the default for changelog input, or ``aggregate(..., emit="changelog")`` /
  ``.to_changelog()``): per key the batch changed, ``-U`` old then ``+U`` new, ``+I`` for a
  key that had no result, ``-D`` (with its last results) for a key whose count fell to 0. A
  key whose results did not change emits nothing.
* ``"upsert"`` (``.to_upsert()``): the same without the ``-U`` rows: the key and its latest
  results (``+I``/``+U``), ``-D`` when the key is gone -- what an upsert sink keyed on the
  key column needs.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...changelog import DELETE, INSERT, OP_FIELD, RETRACT, ROW_KINDS, UPDATE_AFTER, UPDATE_BEFORE
from ...errors import BadRecordError
from ...state.columnar import LAST_UPDATE, AggregateTable

log = logging.getLogger(__name__)


def signs(batch: pa.RecordBatch | pa.Table, uid: str) -> np.ndarray | None:
    """+1 (``+I``/``+U``) or -1 (``-U``/``-D``) per row when the batch is a changelog, else
    ``None``. A kind that is not one of :data:`~..changelog.ROW_KINDS` raises
    :class:`BadRecordError` naming the operator."""
    if OP_FIELD not in batch.schema.names:
        return None
    ops = batch.column(OP_FIELD)
    if isinstance(ops, pa.ChunkedArray):
        ops = ops.combine_chunks()
    if pa.types.is_dictionary(ops.type):
        ops = ops.dictionary_decode()
    if not (pa.types.is_string(ops.type) or pa.types.is_large_string(ops.type)
            or pa.types.is_null(ops.type)):
        raise BadRecordError(f"aggregate {uid!r}: field {OP_FIELD!r} is {ops.type}, not a "
                             f"string (one of {', '.join(ROW_KINDS)})")
    ops = ops.cast(pa.string()).fill_null(INSERT)
    known = pc.is_in(ops, pa.array(ROW_KINDS)).to_numpy(zero_copy_only=False)
    if not known.all():
        bad = ops[int(np.flatnonzero(~known)[0])].as_py()
        raise BadRecordError(f"aggregate {uid!r}: record field {OP_FIELD!r} is {bad!r}, not "
                             f"one of {', '.join(ROW_KINDS)}")
    retract = pc.is_in(ops, pa.array(sorted(RETRACT))).to_numpy(zero_copy_only=False)
    return np.where(retract, -1, 1).astype(np.int64)


def _refuse_min_max(table: AggregateTable) -> None:
    for out, fn, col in table.spec.aggregations:
        if fn in ("min", "max"):
            raise BadRecordError(
                f"aggregate {table.uid!r}: aggregation {out!r} = {fn}({col}) cannot retract a "
                f"row (a -U/-D record arrived): {fn} of a changelog needs every value per key, "
                "which aggregate() does not keep. Drop it (count, sum and mean retract "
                "exactly) or compute it in process() with keyed state")


def _check_counts(table: AggregateTable, key_col: pa.Array, rows: np.ndarray) -> None:
    """A key with more retractions than rows: refused, unless the aggregate has a TTL --
    then its rows may have expired (their state is gone), and the retraction is dropped:
    the key starts from zero (as Flink ignores a retraction for which no state is left)."""
    negative = table.acc["count"][rows] < 0
    if not negative.any():
        return
    if table.spec.ttl_ms is not None:
        for name, arr in table.acc.items():
            if name != LAST_UPDATE:
                arr[rows[negative]] = 0
        log.info("aggregate %r: dropped the retractions of %d key(s) with no rows left "
                 "(expired by its ttl)", table.uid, int(negative.sum()))
        return
    key = key_col[int(np.flatnonzero(negative)[0])].as_py()
    raise BadRecordError(
        f"aggregate {table.uid!r}: key {key!r} got more retractions (-U/-D) than rows "
        "(+I/+U): the changelog retracts a row it never added (records of one key out of "
        "order? key the stream by the changelog's key before this operator)")


def _changed(old: pa.Table, new: pa.Table, names: list[str]) -> np.ndarray:
    """Per row: whether any result column differs (two nulls are equal)."""
    out = np.zeros(old.num_rows, dtype=bool)
    for name in names:
        a, b = old.column(name), new.column(name)
        differ = pc.fill_null(pc.not_equal(a, b), True)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        out |= pc.and_not(differ, both_null).combine_chunks().to_numpy(zero_copy_only=False)
    return out


def changelog_update(table: AggregateTable, batch: pa.RecordBatch | pa.Table,
                     emit: str | None) -> pa.RecordBatch:
    """Fold a batch (a changelog or not) into ``table`` and return what ``emit`` asks for
    (module docstring)."""
    sign = signs(batch, table.uid)
    mode = emit or ("changelog" if sign is not None else "update")
    if sign is not None and (sign < 0).any():
        _refuse_min_max(table)
    if mode == "update":
        key_col, rows = table.fold(batch, sign)
        _check_counts(table, key_col, rows)
        return table._output(key_col, rows)
    keys = batch.column(table.spec.key)
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    distinct = pc.unique(keys)
    before_rows = table._rows_of(distinct)  # new keys get a row of zeros (count 0: absent)
    old, old_count = table._output(distinct, before_rows), table.acc["count"][before_rows].copy()
    key_col, rows = table.fold(batch, sign)
    _check_counts(table, key_col, rows)
    new, new_count = table._output(key_col, rows), table.acc["count"][rows]
    order = np.argsort(before_rows)
    at = order[np.searchsorted(before_rows[order], rows)]
    # the old results row for row with the new (an int column may have turned float)
    old_t = pa.Table.from_batches([old]).take(pa.array(at)).cast(new.schema)
    new_t = pa.Table.from_batches([new])
    old_count = old_count[at]
    existed, exists = old_count > 0, new_count > 0
    names = [out for out, _, _ in table.spec.aggregations]
    changed = _changed(old_t, new_t, names)
    before = existed & ~exists if mode == "upsert" else existed & (~exists | changed)
    after = exists & (~existed | changed)
    n = len(rows)
    # rows 0..n-1 of ``old`` then n..2n-1 of ``new``; each key's old row right before its new
    take = np.stack([np.arange(n), np.arange(n, 2 * n)], axis=1).ravel()
    keep = np.stack([before, after], axis=1).ravel()
    kinds = np.empty(2 * n, dtype=object)
    kinds[0::2] = np.where(exists, UPDATE_BEFORE, DELETE)
    kinds[1::2] = np.where(existed, UPDATE_AFTER, INSERT)
    both = pa.concat_tables([old_t, new_t])
    picked = both.take(pa.array(take[keep]))
    picked = picked.append_column(OP_FIELD, pa.array(kinds[keep].tolist(), pa.string()))
    batches = picked.combine_chunks().to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=picked.schema)
    return batches[0]
