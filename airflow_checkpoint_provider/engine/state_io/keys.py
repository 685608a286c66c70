"""Keys of state written from tables and of snapshots: the job's key contract, checked.

A keyed operator reads a key back only if it is a key of the contract
(:mod:`..state.keys`: ``str``, ``bytes``, ``bool``, int64, ``float`` but NaN, ``None``, or a
flat tuple of those) and of the operator's one key type, and if it sits in the key group
its hash gives (:mod:`..state.keygroups`). ``aggregate()`` state keeps its keys in an Arrow
column: integer (int64 range), floating (no NaN), boolean, string or binary, one kind per
operator.

The key type of an operator's state is not a field of the snapshot: it is the type of the
keys the snapshot holds (for ``aggregate()`` state: the Arrow type of its key column),
which covers every snapshot, including those written before these checks. Written
savepoints hold keys of one type only, so a snapshot's keys tell its key type.

* :class:`KeyCheck` -- the keys of a table for ``ckpt state write`` (and its ``drop_keys``),
  against the operator's key type in the source snapshot;
* :func:`arrow_key_problem` -- the same for an ``aggregate()`` key column;
* :func:`.snapshot_keys.snapshot_key_problems` -- every key of a snapshot's operator (``ckpt
  verify-restore``): its key type, or the keys no job can read back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadRecordError
from ..state.keygroups import key_group_for
from ..state.keys import canonical_key, key_type
from .exceptions import StateKeyError

log = logging.getLogger(__name__)

#: Arrow key kinds of ``aggregate()`` state, named as the key contract names the types
ARROW_KEY_KINDS = (("int", pa.types.is_integer), ("float", pa.types.is_floating),
                   ("bool", pa.types.is_boolean), ("str", pa.types.is_string),
                   ("str", pa.types.is_large_string), ("bytes", pa.types.is_binary),
                   ("bytes", pa.types.is_large_binary))
_INT64_MAX = 2**63 - 1
#: bad keys named per operator in a verify-restore report (then a count)
MAX_NAMED = 3


def _reason(exc: BadRecordError, uid: str) -> str:
    return str(exc).removeprefix(f"operator {uid!r}: ")


class KeyCheck:
    """The keys written for operator ``uid``: each a key of the contract, all of one type
    -- ``expected`` (the snapshot's key type) when given, else the first key's."""

    def __init__(self, uid: str, expected: str | None, origin: str) -> None:
        self.uid = uid
        self.expected = expected
        #: what the expected type comes from, for messages ("the snapshot X", "row 0")
        self.origin = origin

    def check(self, key: object, state: str | None, where: str) -> object:
        """The canonical ``key``, or :class:`StateKeyError` naming operator, ``state``, the
        key and ``where`` it comes from (a row of the table, ``drop_keys``)."""
        label = (f"operator {self.uid!r}" + (f", state {state!r}" if state else "")
                 + f", {where}")
        try:
            key = canonical_key(key, self.uid)
        except BadRecordError as exc:
            raise StateKeyError(f"{label}: {_reason(exc, self.uid).split('; keys are')[0]}; "
                                "keys are str, bytes, bool, int (64-bit), float (not NaN), "
                                "None or a flat tuple (list) of those; nothing was "
                                "written") from None
        kind = key_type(key)
        if self.expected is None:
            self.expected, self.origin = kind, f"as the key of {where}"
        elif kind != self.expected:
            raise StateKeyError(
                f"{label}: key {key!r} is of type {kind}, but the operator's keys are "
                f"{self.expected} ({self.origin}): the job would never read it back (one key "
                f"type per keyed operator); write {self.expected} keys; nothing was written")
        return key


@dataclass
class KeyTypes:
    """The key types found in a snapshot operator's per-key state."""

    examples: dict[str, tuple[str, object]] = field(default_factory=dict)  # type -> (state, key)

    def add(self, state: str, key: object) -> None:
        self.examples.setdefault(key_type(key), (state, key))

    @property
    def single(self) -> str | None:
        return next(iter(self.examples)) if len(self.examples) == 1 else None

    def describe(self) -> str:
        return ", ".join(f"{t} (e.g. key {k!r} of state {s!r})"
                         for t, (s, k) in sorted(self.examples.items()))


# -- aggregate() keys (an Arrow column) ---------------------------------------------------

def arrow_key_kind(arrow_type: pa.DataType) -> str | None:
    """The key type of an Arrow key column as the key contract names it (``None``: no key
    type of the contract, e.g. a struct or list)."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    for kind, test in ARROW_KEY_KINDS:
        if test(arrow_type):
            return kind
    return None


def arrow_key_problem(keys: pa.Array | pa.ChunkedArray, expected: str | None) -> str | None:
    """Why the Arrow key column ``keys`` cannot be an ``aggregate()`` operator's keys of
    type ``expected`` (``None``: any type of the contract), or ``None``."""
    if pa.types.is_null(keys.type):
        return None
    kind = arrow_key_kind(keys.type)
    if kind is None:
        return (f"the key column is {keys.type}; aggregate() keys are integer, floating, "
                "boolean, string or binary")
    if expected is not None and kind != expected:
        return (f"the key column is {keys.type} ({kind} keys), but the operator's keys are "
                f"{expected}: the job would never read them back; cast the column to "
                f"{expected} keys")
    if kind == "float":
        nan = pc.fill_null(pc.is_nan(keys), False)
        if pc.any(nan).as_py():
            row = int(np.flatnonzero(np.asarray(nan))[0])
            return f"key NaN (row {row}) never equals itself: it cannot address state"
    if pa.types.is_unsigned_integer(keys.type) and len(keys) and keys.null_count < len(keys):
        big = pc.fill_null(pc.greater(keys, pa.scalar(_INT64_MAX, keys.type)), False)
        if pc.any(big).as_py():
            row = int(np.flatnonzero(np.asarray(big))[0])
            return f"key {keys[row].as_py()} (row {row}) is an int beyond 64 bits"
    return None


def _entry_problem(uid: str, kg: int, key: object, maxp: int) -> str | None:
    try:
        key = canonical_key(key, uid)
    except BadRecordError as exc:
        return _reason(exc, uid)
    expected = key_group_for(key, maxp)
    if expected != kg:
        return (f"key {key!r} is stored in key group {kg}, but its hash gives key group "
                f"{expected}: no job reads it")
    return None


def entries_with_keys(uid: str, entries: Iterator[tuple[int, str, object, object]],
                      maxp: int) -> Iterator[tuple[int, str, object, object]]:
    """The snapshot entries a rewrite copies, each with its canonical key in the key group
    its hash gives; entries whose key no job can address are left out with a warning (no
    job ever read them)."""
    for _, name, key, value in entries:
        try:
            key = canonical_key(key, uid)
        except BadRecordError as exc:
            log.warning("State write: operator %r, state %r: the snapshot's key %r is left "
                        "out of the copy: %s", uid, name, key, _reason(exc, uid))
            continue
        yield key_group_for(key, maxp), name, key, value
