"""State you can read and write as tables (Flink's State Processor API, in Python).

* :func:`read_state_table` -- one operator's keyed state of a checkpoint or savepoint as a
  ``pyarrow.Table`` (``ckpt state read``);
* :func:`state_dataframe` -- the same as a Spark DataFrame, each partition read by an
  executor from its own key groups;
* :func:`bootstrap_savepoint` -- a savepoint for a new job from a table;
  :func:`rewrite_savepoint` -- a fixed copy of a snapshot with keys rewritten or dropped
  (``ckpt state write``). Both restore at any parallelism.
"""

from __future__ import annotations

from .exceptions import (
    NotKeyedStateError,
    StateKeyError,
    StateSchemaError,
    StateTableError,
    TargetExistsError,
    UnknownOperatorError,
    UnknownStateError,
)
from .read import read_state_table
from .spark import state_dataframe
from .write import bootstrap_savepoint, rewrite_savepoint

__all__ = [
    "NotKeyedStateError", "StateKeyError", "StateSchemaError", "StateTableError", "TargetExistsError",
    "UnknownOperatorError", "UnknownStateError", "bootstrap_savepoint", "read_state_table",
    "rewrite_savepoint", "state_dataframe",
]
