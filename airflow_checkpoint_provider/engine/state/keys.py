"""The key contract of per-record keyed state, the same for the heap and RocksDB backends.

A key is a scalar -- ``str``, ``bytes``, ``bool``, ``int`` (64-bit signed), ``float`` (not
NaN), ``None`` -- or a flat tuple (or list) of scalars. All keys of one keyed operator have
the same type (for tuples: the same element types, position by position).

Why the second rule: Python treats ``1``, ``True`` and ``1.0`` as equal, so a dict-based
backend (heap) would merge their state when they land in the same key group, while RocksDB
(keys stored as msgpack bytes) keeps them apart -- results would depend on the backend and
on the parallelism. One type per operator makes both backends agree. ``-0.0`` is the same
key as ``0.0`` (also for the key-group hash). Anything else (NaN, ints beyond 64 bits,
dicts, datetimes, nested tuples) is refused with a :class:`BadRecordError` naming the
operator and the key's type -- a deterministic error that fails the job without restarts.
"""

from __future__ import annotations

import math

from ..errors import BadRecordError

_SCALARS = (str, bytes, bool, int, float, type(None))
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _scalar(value: object, uid: str, key: object) -> object:
    if not isinstance(value, _SCALARS):
        raise BadRecordError(
            f"operator {uid!r}: key {key!r} has a value of type {type(value).__name__}; keys "
            "are str, bytes, bool, int, float, None or a flat tuple of those")
    if isinstance(value, float):
        if math.isnan(value):
            raise BadRecordError(f"operator {uid!r}: key {key!r} is (or holds) NaN, which "
                                 "never equals itself: it cannot address state")
        if value == 0.0:
            return 0.0  # -0.0 and 0.0 are one key
    elif isinstance(value, int) and not isinstance(value, bool):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise BadRecordError(f"operator {uid!r}: key {key!r} is an int beyond 64 bits")
    return value


def _signature(key: object) -> object:
    if isinstance(key, tuple):
        return tuple(type(v).__name__ for v in key)
    return type(key).__name__


class KeyContract:
    """Checks (and canonicalizes) the keys of one keyed operator."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.signature: object = None
        self._fast: type | None = None  # str or bytes once established: nothing to check

    def check(self, key: object) -> object:
        if type(key) is self._fast:  # the per-record hot path: one type test
            return key
        return self._check(key)

    def _check(self, key: object) -> object:
        if isinstance(key, tuple | list):
            key = tuple(_scalar(v, self.uid, key) for v in key)
        else:
            key = _scalar(key, self.uid, key)
        sig = _signature(key)
        if self.signature is None:
            self.signature = sig
            if type(key) in (str, bytes):
                self._fast = type(key)
        elif sig != self.signature:
            raise BadRecordError(
                f"operator {self.uid!r}: key {key!r} is of type {sig}, but this operator's "
                f"keys are {self.signature}; one key type per keyed operator (1, True and "
                f"1.0 would otherwise be one key or three depending on the state backend)")
        return key
