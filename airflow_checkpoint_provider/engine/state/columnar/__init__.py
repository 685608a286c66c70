"""Columnar keyed state: per-key state kept as numpy columns or Arrow tables and updated a
batch at a time, for the built-in vectorized operators (no Python call per record).

* :mod:`.aggregates` -- :class:`AggregateTable`, the accumulators of ``aggregate()``
  (count, sum, min, max per column), one row per key;
* :mod:`.key_index` -- key -> row number, a batch at a time;
* :mod:`.distinct_state` -- exact ``count_distinct``;
* :mod:`.windows`, :mod:`.session_state` -- tumbling/sliding and session windows;
* :mod:`.topn_state`, :mod:`.topn_snapshot` -- ``top_n`` and its snapshot file;
* :mod:`.join_buffers` -- the buffered rows of the vectorized interval and window joins.

Each table implements the :class:`~..backend.KeyedStateBackend` protocol itself (one Arrow
IPC file per snapshot), whichever state backend the job chose.
"""

import warnings

from . import aggregates
from .aggregates import LAST_UPDATE, AggregateSpec, AggregateTable

__all__ = ["LAST_UPDATE", "AggregateSpec", "AggregateTable"]


def __getattr__(name: str) -> object:
    """Any other name of the module ``state.columnar`` was before issue 53 (``KeyIndex``,
    helpers): read from :mod:`.aggregates`, with a :class:`DeprecationWarning`."""
    if name.startswith("__") or not hasattr(aggregates, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated: import it from {aggregates.__name__}",
                  DeprecationWarning, stacklevel=2)
    return getattr(aggregates, name)
