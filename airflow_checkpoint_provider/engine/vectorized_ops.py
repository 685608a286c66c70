"""Vectorized keyed operators for the queries that ran per record (issue 39): no Python
call per record, columnar state in memory with either state backend, one Arrow file per
snapshot, rescaled by key group.

* :func:`max_by_join`: the expiring max-by join (Nexmark's winning bid: q4, q6, q9);
* :func:`latest_by_key`: the latest row per key (q18);
* :func:`unique_key_join`: the insert-only regular join of a stream with a side that holds
  one row per key (q3, q20);
* :func:`temporal_table_join`: the event-time temporal join with a versioned or static
  table (q13's side input).

Each runs as its own node kind with its own state: a savepoint of the per-record operator
they replace is refused (a typed :class:`~.errors.RestoreError` naming the operator), not
converted; switch with a new uid. The builders live in the DSL layer
(:mod:`.datastream.vectorized_ops`), the operators in the runtime
(:mod:`.runtime.operators.vectorized`).
"""

from .datastream.vectorized_ops import (
    latest_by_key,
    max_by_join,
    temporal_table_join,
    unique_key_join,
)

__all__ = ["latest_by_key", "max_by_join", "temporal_table_join", "unique_key_join"]
