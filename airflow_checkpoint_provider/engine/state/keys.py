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

A restore keeps the key type: a keyed operator restored from a snapshot takes the type of
its restored keys as its key type (:meth:`KeyContract.expect`), so the first record whose
key has another type fails the job at once instead of silently orphaning the restored
state (``1`` and ``True`` would even share it on the heap backend). ``ckpt state write``
and ``ckpt verify-restore`` check snapshot keys with the same rules (:func:`canonical_key`,
:func:`key_type`).
"""

from __future__ import annotations

import math

import msgpack

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


def canonical_key(key: object, uid: str) -> object:
    """``key`` as the engine stores it (a list becomes a tuple, ``-0.0`` becomes ``0.0``),
    or :class:`BadRecordError` naming operator ``uid`` when it is no key at all (NaN, an
    int beyond 64 bits, a dict, a nested tuple, ...)."""
    if isinstance(key, tuple | list):
        return tuple(_scalar(v, uid, key) for v in key)
    return _scalar(key, uid, key)


def _type_name(signature: object) -> str:
    return f"tuple[{', '.join(signature)}]" if isinstance(signature, tuple) else str(signature)


def key_type(key: object) -> str:
    """The type of a canonical key as the contract names it: ``str``, ``bytes``, ``bool``,
    ``int``, ``float``, ``NoneType`` or ``tuple[str, int]``."""
    return _type_name(_signature(key))


#: :func:`restored_key` of a backend that restored no key
NO_KEY = object()


def restored_key(backend) -> object:
    """One key of the state a per-key backend restored, or :data:`NO_KEY`: every key of an
    operator has one type, so one key tells the type."""
    db = getattr(backend, "db", None)
    if db is not None:  # RocksDB: its first key, whatever its state (no scan per state)
        for raw in db.keys():  # <key group: 2 bytes><state name>\x00<msgpack key>[<user key>]
            # the key's first msgpack object only: an entry map state's row carries its user
            # key after it (a regular join's first row is one, it has no timer state)
            unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
            unpacker.feed(bytes(raw)[2:].partition(b"\x00")[2])
            key = next(unpacker)
            return tuple(key) if isinstance(key, list) else key
        return NO_KEY
    for name in list(getattr(backend, "restored_meta", None) or ()):
        for key in backend.keys(name):
            return key
    return NO_KEY


def expect_restored_key_type(op, directory: str) -> None:
    """After a restore: operator ``op``'s key contract (if it has one, i.e. per-key state)
    takes the type of its restored keys, so a record key of another type fails the job."""
    contract = getattr(op, "keys", None)
    if isinstance(contract, KeyContract):
        key = restored_key(op.backend)
        if key is not NO_KEY:
            contract.expect(key, directory)


class KeyContract:
    """Checks (and canonicalizes) the keys of one keyed operator."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.signature: object = None
        self._fast: type | None = None  # str or bytes once established: nothing to check
        #: where the key type came from when not from the first record (a restore)
        self.origin: str | None = None

    def expect(self, key: object, origin: str) -> None:
        """Take the type of ``key`` (a restored key) as this operator's key type before any
        record is seen; ``origin`` says where the key comes from in error messages."""
        try:
            self._check(key)
        except BadRecordError as exc:
            raise BadRecordError(f"{exc} (a key of the state restored from {origin}: the "
                                 "snapshot holds a key the job cannot address)") from None
        self.origin = origin

    def check(self, key: object) -> object:
        if type(key) is self._fast:  # the per-record hot path: one type test
            return key
        return self._check(key)

    def _check(self, key: object) -> object:
        key = canonical_key(key, self.uid)
        sig = _signature(key)
        if self.signature is None:
            self.signature = sig
            if type(key) in (str, bytes):
                self._fast = type(key)
        elif sig != self.signature and self.origin is not None:
            raise BadRecordError(
                f"operator {self.uid!r}: key {key!r} is of type {key_type(key)}, but the "
                f"state restored from {self.origin} has keys of type "
                f"{_type_name(self.signature)}; a restore must keep the key type "
                f"(the restored state would never be read again): make key_by return "
                f"{_type_name(self.signature)} keys, rewrite the state's keys "
                f"(ckpt state read / ckpt state write), or give the operator a new uid and "
                f"restore with allow_non_restored_state=True")
        elif sig != self.signature:
            raise BadRecordError(
                f"operator {self.uid!r}: key {key!r} is of type {sig}, but this operator's "
                f"keys are {self.signature}; one key type per keyed operator (1, True and "
                f"1.0 would otherwise be one key or three depending on the state backend)")
        return key
