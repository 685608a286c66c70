"""What the upsert sinks share: definition-time checks and the per-epoch compaction of a
changelog (:mod:`..changelog`) to one operation per key.

An upsert sink (``DeltaSink``/``IcebergSink``/``PostgresSink`` with ``mode="upsert"`` and
``key=[...]``) collects a checkpoint epoch's records. At the barrier the epoch is compacted
per key, *in arrival order, the last operation wins*: a key whose last record is ``+I`` or
``+U`` (or has no ``_op``) becomes that row; one whose last record is ``-D`` or ``-U`` (an
update-before without its update-after) is deleted. The compacted epoch is then applied to
the table in one transaction of the sink's two-phase commit (Delta: one ``MERGE``; Iceberg:
one table transaction deleting the affected keys and appending their new rows; PostgreSQL:
``INSERT ... ON CONFLICT DO UPDATE`` and ``DELETE`` in the prepared transaction).

Order between records of one key is only defined on one channel: with a sink parallelism
above 1, ``key_by`` the sink's key (or feed it from an operator keyed by it) so each key's
changes reach one sink subtask in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..changelog import INSERT, OP_FIELD, RETRACT, ROW_KINDS, row_kind
from ..errors import BadRecordError, ConfigurationError

MODES = ("append", "upsert")


def upsert_key(what: str, mode: str, key: Sequence[str] | None, modes=MODES) -> list[str]:
    """The key columns of a sink's ``mode``/``key`` options, refused when inconsistent
    (``mode="upsert"`` without ``key``, a ``key`` for an appending sink)."""
    if mode not in modes:
        raise ConfigurationError(f"{what}: mode {mode!r} is unknown; use one of "
                                 f"{', '.join(map(repr, modes))}")
    if isinstance(key, str):
        key = [key]
    cols = list(key or [])
    if mode == "upsert" and not cols:
        raise ConfigurationError(f"{what}: mode='upsert' needs key=[the key columns]")
    if mode != "upsert" and cols:
        raise ConfigurationError(f"{what}: key= is for mode='upsert' (mode is {mode!r})")
    if not all(isinstance(c, str) and c and c != OP_FIELD for c in cols) or len(set(cols)) != len(cols):
        raise ConfigurationError(f"{what}: key {cols!r} must be distinct column names "
                                 f"(not {OP_FIELD!r})")
    return cols


def _ops(table: pa.Table, where: str) -> pa.Array:
    """The ``_op`` column as strings, ``+I`` where missing or null; unknown kinds refused."""
    if OP_FIELD not in table.column_names:
        return pa.array([INSERT] * table.num_rows, pa.string())
    ops = table.column(OP_FIELD).combine_chunks()
    if pa.types.is_dictionary(ops.type):
        ops = ops.dictionary_decode()
    if pa.types.is_null(ops.type):
        ops = ops.cast(pa.string())
    if not (pa.types.is_string(ops.type) or pa.types.is_large_string(ops.type)):
        raise BadRecordError(f"{where}: column {OP_FIELD!r} is {ops.type}, not a string")
    ops = ops.cast(pa.string()).fill_null(INSERT)
    known = pc.is_in(ops, pa.array(ROW_KINDS)).to_numpy(zero_copy_only=False)
    if not known.all():
        row_kind({OP_FIELD: ops[int(np.flatnonzero(~known)[0])].as_py()}, where)
    return ops


def compact(table: pa.Table, key: list[str], where: str) -> pa.Table:
    """One row per key of ``table`` (an epoch's records, in arrival order): its last record,
    with ``_op`` either ``+U`` (write this row) or ``-D`` (delete the key). A key column
    missing or null raises :class:`BadRecordError` naming ``where`` and the column."""
    for col in key:
        if col not in table.column_names:
            raise BadRecordError(f"{where}: a record has no key column {col!r} (columns: "
                                 f"{', '.join(c for c in table.column_names if c != OP_FIELD)})")
        if table.column(col).null_count:
            raise BadRecordError(f"{where}: a record has a null key column {col!r}")
    ops = _ops(table, where)
    n = table.num_rows
    order = table.select(key).append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
    last = order.group_by(key, use_threads=False).aggregate([("__row", "max")])
    rows = np.sort(last.column("__row_max").to_numpy())
    delete = pc.is_in(ops.take(pa.array(rows)), pa.array(sorted(RETRACT)))
    out = table.take(pa.array(rows))
    if OP_FIELD in out.column_names:
        out = out.drop_columns([OP_FIELD])
    kinds = pc.if_else(delete, pa.scalar("-D"), pa.scalar("+U"))
    return out.append_column(OP_FIELD, kinds).combine_chunks()


def split(compacted: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``(rows to write without _op, rows to delete)`` of a :func:`compact` result."""
    delete = pc.equal(compacted.column(OP_FIELD), "-D")
    rows = compacted.drop_columns([OP_FIELD])
    return rows.filter(pc.invert(delete)), rows.filter(delete)
