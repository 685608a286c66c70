"""Errors of reading and writing state as tables: each names the snapshot, operator uid,
state or column that is wrong and says what to do."""

from __future__ import annotations

from ..errors import EngineError


class StateTableError(EngineError):
    """State cannot be read into a table or written from one."""


class UnknownOperatorError(StateTableError):
    """The snapshot has no operator with that uid."""


class UnknownStateError(StateTableError):
    """The operator has no state with that name."""


class NotKeyedStateError(StateTableError):
    """The operator holds operator state (source positions, sink transactions), which has
    no keys and does not read as a table."""


class StateSchemaError(StateTableError):
    """A table does not have the columns or types the state needs."""


class StateKeyError(StateSchemaError):
    """A key the job could never read back (NaN, an int beyond 64 bits, a struct, a key of
    another type than the operator's keys): names the operator uid, the state, the key and
    its row of the table; nothing is written."""


class TargetExistsError(StateTableError):
    """The directory a savepoint is to be written to is not empty."""
