"""A Spark DataFrame over the keyed state of one operator of a snapshot.

The driver only opens ``_metadata`` (validated like any restore). The key groups
``[0, max_parallelism)`` are cut into ``partitions`` contiguous ranges (the ranges of that
many subtasks, :func:`~..state.keygroups.key_group_range_for`); Spark partition ``i`` is
read by an executor from the state files of range ``i`` only, so the DataFrame is
partitioned by key group and no state passes through the driver. Two passes: the executors
first report their part's Arrow schema (the driver unifies them: a value column's type is
known only from the data), then read their part again into the DataFrame
(``mapInArrow``). Executors must reach the snapshot's storage (a shared path or S3).
"""

from __future__ import annotations

import pyarrow as pa

from ..state.keygroups import key_group_range_for
from .read import open_keyed_operator, read_state_table


def _part(snapshot: str, uid: str, state: str | None, index: int, partitions: int,
          max_parallelism: int) -> pa.Table:
    kgr = key_group_range_for(index, partitions, max_parallelism)
    return read_state_table(snapshot, uid, state, key_groups=kgr)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names
               else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def state_dataframe(spark, snapshot: str, uid: str, state: str | None = None, *,
                    partitions: int | None = None):
    """The table :func:`~.read.read_state_table` returns, as a Spark DataFrame with one
    partition per key group range (``partitions`` ranges; default: the operator's
    parallelism in the snapshot). Errors about the snapshot, uid or state are raised on
    the driver before any Spark job runs."""
    from pyspark.sql.pandas.types import from_arrow_schema

    keyed = open_keyed_operator(snapshot, uid)
    keyed.check_state(state)
    directory, maxp = keyed.snapshot.directory, keyed.max_parallelism
    n = min(partitions or max(keyed.operator.parallelism, 1), maxp)
    sc = spark.sparkContext

    def schema_of(index: int) -> bytes:
        return _part(directory, uid, state, index, n, maxp).schema.serialize().to_pybytes()

    schemas = sc.parallelize(range(n), n).map(schema_of).collect()
    schema = pa.unify_schemas([pa.ipc.read_schema(pa.py_buffer(s)) for s in schemas],
                              promote_options="permissive")
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f
                        for f in schema])

    def read_parts(batches):
        for batch in batches:
            for index in batch.column(0).to_pylist():
                table = _conform(_part(directory, uid, state, index, n, maxp), schema)
                yield from table.to_batches()

    ids = spark.range(0, n, 1, n)
    return ids.mapInArrow(read_parts, from_arrow_schema(schema))
