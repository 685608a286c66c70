"""The typed msgpack encoding of state values and records: every value comes back equal
and of the same type.

Plain msgpack has no tuple, set, datetime, Decimal or big integer: tuples came back as
lists (so tuple map keys could not be restored at all). This encoding keeps msgpack's
native types (None, bool, int within 64 bits, float, str, bytes, list, dict with any
supported keys) and adds ExtType codes for the others. Nothing is pickled: decoding
executes no code of the snapshot.

=====  ==============  ======================================================
code   type            payload
=====  ==============  ======================================================
1      tuple           packed list of the elements
2      set             packed list of the elements
3      frozenset       packed list of the elements
4      int > 64 bits   signed big-endian two's complement bytes
5      datetime        packed ``[y, mo, d, h, mi, s, us, fold, tz]``
6      date            packed ``[y, mo, d]``
7      time            packed ``[h, mi, s, us, fold, tz]``
8      timedelta       packed ``[days, seconds, microseconds]``
9      Decimal         ``str(value)`` (NaN, infinities and the exponent kept)
10     numpy scalar    packed ``[dtype.str, raw bytes]`` (kinds b i u f c m M U S)
11     complex         packed ``[real, imag]``
13     UUID            the 16 bytes
=====  ==============  ======================================================

``tz`` is ``None``, ``[0, days, seconds, microseconds, name or None]`` for a
:class:`datetime.timezone`, or ``[1, key]`` for a :class:`zoneinfo.ZoneInfo`; other
``tzinfo`` classes (pytz, dateutil) are refused. Types are exact: a subclass (``IntEnum``,
``defaultdict``, ``OrderedDict``, ``pandas.Timestamp``) would come back as its base class,
so it is refused, as is ``bytearray`` (msgpack writes it as ``bytes``) and anything else
(objects, dataclasses, ``memoryview``). Nesting is limited to
:data:`MAX_DEPTH` levels.

Map *keys* of RocksDB rows (entry map state) use :func:`pack_key`: tuples at any depth stay
msgpack arrays there (the bytes earlier versions wrote, so lookups in a restored database
find its rows) and :func:`unpack_key` reads arrays back as tuples (a list cannot be a key).

Decoding is a superset of plain msgpack decoding: data written before this encoding (no
ext types) decodes exactly as before, except that arrays used as map keys (tuple keys,
which plain msgpack could not restore) come back as tuples.
"""

from __future__ import annotations

import datetime as _dt
import threading
import uuid
import zoneinfo
from decimal import Decimal
from typing import Any

import msgpack
import msgspec
import numpy as np

#: the version of the state encoding written in heap key-group chunks (absent: plain msgpack)
FORMAT_VERSION = 2
#: deepest nesting of containers a value may have
MAX_DEPTH = 100

TUPLE, SET, FROZENSET, BIGINT, DATETIME, DATE, TIME, TIMEDELTA, DECIMAL, NUMPY, COMPLEX = \
    range(1, 12)
UUID = 13  # (12: reserved)
_NUMPY_KINDS = frozenset("biufcmMUS")

_ExtType = msgpack.ExtType


class UnsupportedValueError(TypeError):
    """A value the typed encoding cannot round-trip (the message names its type and where
    it sits in the value)."""


def _new_packer() -> msgpack.Packer:
    return msgpack.Packer(use_bin_type=True, strict_types=True, default=_default,
                          buf_size=1024)


def _pack_nested(obj: object) -> bytes:
    # the default hook runs inside another Packer's pack(), which is not reentrant: take a
    # free packer of this thread (creating one allocates its buffer: too slow per tuple)
    try:
        free = _local.free
    except AttributeError:
        free = _local.free = []
    packer = free.pop() if free else _new_packer()
    try:
        data = packer.pack(obj)
    except BaseException:
        raise  # the packer is dropped: its buffer may hold a partial value
    free.append(packer)
    return data


def _tz(tz: _dt.tzinfo | None) -> object:
    if tz is None:
        return None
    if type(tz) is _dt.timezone:
        args = tz.__getinitargs__()  # type: ignore[attr-defined]
        off: _dt.timedelta = args[0]
        return [0, off.days, off.seconds, off.microseconds, args[1] if len(args) > 1 else None]
    if type(tz) is zoneinfo.ZoneInfo and tz.key is not None:
        return [1, tz.key]
    raise UnsupportedValueError(
        f"a tzinfo of type {_type_name(tz)} (only datetime.timezone and zoneinfo.ZoneInfo "
        "time zones round-trip; convert with .astimezone(zoneinfo.ZoneInfo(name)))")


def _default(obj: object) -> msgpack.ExtType:
    t = type(obj)
    if t is tuple:
        return _ExtType(TUPLE, _pack_nested(list(obj)))  # type: ignore[call-overload]
    if t is int:  # beyond 64 bits (strict_types sends only those here)
        n: int = obj  # type: ignore[assignment]
        return _ExtType(BIGINT, n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True))
    if t is set:
        return _ExtType(SET, _pack_nested(list(obj)))  # type: ignore[call-overload]
    if t is frozenset:
        return _ExtType(FROZENSET, _pack_nested(list(obj)))  # type: ignore[call-overload]
    if t is _dt.datetime:
        d: _dt.datetime = obj  # type: ignore[assignment]
        return _ExtType(DATETIME, _pack_nested([
            d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond, d.fold,
            _tz(d.tzinfo)]))
    if t is _dt.date:
        da: _dt.date = obj  # type: ignore[assignment]
        return _ExtType(DATE, _pack_nested([da.year, da.month, da.day]))
    if t is _dt.time:
        ti: _dt.time = obj  # type: ignore[assignment]
        return _ExtType(TIME, _pack_nested([ti.hour, ti.minute, ti.second, ti.microsecond,
                                            ti.fold, _tz(ti.tzinfo)]))
    if t is _dt.timedelta:
        td: _dt.timedelta = obj  # type: ignore[assignment]
        return _ExtType(TIMEDELTA, _pack_nested([td.days, td.seconds, td.microseconds]))
    if t is Decimal:
        return _ExtType(DECIMAL, str(obj).encode())
    if t is complex:
        c: complex = obj  # type: ignore[assignment]
        return _ExtType(COMPLEX, _pack_nested([c.real, c.imag]))
    if t is uuid.UUID:
        return _ExtType(UUID, obj.bytes)  # type: ignore[attr-defined]
    if isinstance(obj, np.generic) and obj.dtype.kind in _NUMPY_KINDS:
        return _ExtType(NUMPY, _pack_nested([obj.dtype.str, obj.tobytes()]))
    raise UnsupportedValueError(f"a value of type {_type_name(obj)}{_hint(obj)}")


def _type_name(obj: object) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _hint(obj: object) -> str:
    if isinstance(obj, dict):
        return " (a dict subclass would come back as a plain dict: store dict(value))"
    if isinstance(obj, (list, tuple, set, frozenset)):
        return (" (a subclass of a container would come back as its base type: store "
                "list/tuple/set(value))")
    if isinstance(obj, (int, float, str, bytes)):
        return " (a subclass (e.g. an enum) would come back as its base type: store its value)"
    if isinstance(obj, (bytearray, memoryview)):
        return " (it would come back as bytes: store bytes(value))"
    return (" (a state keeps None, bool, int, float, str, bytes, complex, tuple, "
            "list, dict, set, frozenset, datetime, date, time, timedelta, Decimal, UUID, "
            "numpy scalars and nestings of them)")


def _tzinfo(spec: object) -> _dt.tzinfo | None:
    if spec is None:
        return None
    if isinstance(spec, list) and spec and spec[0] == 0 and len(spec) == 5:
        off = _dt.timedelta(days=spec[1], seconds=spec[2], microseconds=spec[3])
        return _dt.timezone(off) if spec[4] is None else _dt.timezone(off, spec[4])
    if isinstance(spec, list) and len(spec) == 2 and spec[0] == 1 and isinstance(spec[1], str):
        return zoneinfo.ZoneInfo(spec[1])
    raise ValueError(f"bad time zone {spec!r:.80}")


def _ext_hook(code: int, data: memoryview) -> object:
    try:
        if code == TUPLE:
            return tuple(_decode(data))
        if code == SET:
            return set(_decode(data))
        if code == FROZENSET:
            return frozenset(_decode(data))
        if code == BIGINT:
            return int.from_bytes(data, "big", signed=True)
        if code == DATETIME:
            y, mo, d, h, mi, s, us, fold, tz = _decode(data)
            return _dt.datetime(y, mo, d, h, mi, s, us, tzinfo=_tzinfo(tz), fold=fold)
        if code == DATE:
            return _dt.date(*_decode(data))
        if code == TIME:
            h, mi, s, us, fold, tz = _decode(data)
            return _dt.time(h, mi, s, us, tzinfo=_tzinfo(tz), fold=fold)
        if code == TIMEDELTA:
            days, secs, us = _decode(data)
            return _dt.timedelta(days=days, seconds=secs, microseconds=us)
        if code == DECIMAL:
            return Decimal(bytes(data).decode("ascii"))
        if code == NUMPY:
            dtype_str, raw = _decode(data)
            dtype = np.dtype(dtype_str)
            if dtype.kind not in _NUMPY_KINDS or dtype.itemsize != len(raw):
                raise ValueError(f"bad numpy scalar {dtype_str!r}")
            return np.frombuffer(raw, dtype=dtype)[0]
        if code == COMPLEX:
            re, im = _decode(data)
            return complex(re, im)
        if code == UUID:
            return uuid.UUID(bytes=bytes(data))
    except (TypeError, ValueError, LookupError, ArithmeticError,
            zoneinfo.ZoneInfoNotFoundError, msgspec.DecodeError) as exc:
        raise msgspec.DecodeError(f"malformed typed value (ext code {code}): {exc}") from exc
    raise msgspec.DecodeError(f"unknown ext type code {code} in a typed value")


_DECODER = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
_decode = _DECODER.decode
_local = threading.local()


def _packer() -> msgpack.Packer:
    p = _local.packer = _new_packer()
    return p


def pack_value(obj: object) -> bytes:
    """``obj`` in the typed encoding; :class:`UnsupportedValueError` (a ``TypeError``) if
    some part of it cannot round-trip. Thread-safe."""
    try:
        pack = _local.packer.pack
    except AttributeError:
        pack = _packer().pack
    try:
        return pack(obj)
    except UnsupportedValueError:
        _local.packer = None  # its buffer holds a partial value
        _packer()
        raise
    except (ValueError, OverflowError) as exc:  # nesting too deep, too long
        _packer()
        raise UnsupportedValueError(f"a value msgpack cannot encode ({exc})") from exc


def unpack_value(data: bytes | memoryview) -> object:
    """Inverse of :func:`pack_value`; also reads plain msgpack (earlier snapshots)."""
    return _decode(data)


# -- keys of RocksDB rows -------------------------------------------------------------------

def _array_header(n: int) -> bytes:
    if n <= 15:
        return bytes((0x90 | n,))
    if n <= 0xFFFF:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def pack_key(key: object) -> bytes:
    """A map key for a RocksDB row: as :func:`pack_value`, but tuples (at any depth outside
    other ext values) are msgpack arrays, byte for byte what plain msgpack wrote."""
    if type(key) is tuple:
        return b"".join((_array_header(len(key)), *map(pack_key, key)))  # type: ignore[arg-type]
    return pack_value(key)


def _key_ext_hook(code: int, data: memoryview) -> object:
    return _ext_hook(code, data)


def unpack_key(data: bytes | memoryview) -> object:
    """Inverse of :func:`pack_key` (arrays are tuples)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=False,
                           ext_hook=_key_ext_hook)


# -- validation -----------------------------------------------------------------------------

#: the types :func:`check_value` accepts with one set lookup (callers inline the test
#: ``type(v) in SCALARS`` to skip the call)
SCALARS = _SCALARS = frozenset({type(None), bool, int, float, str, bytes})
_LEAVES = frozenset({_dt.date, _dt.timedelta, Decimal, complex, uuid.UUID})
_SEQUENCES = frozenset({list, tuple, set, frozenset})
_all_scalars = _SCALARS.issuperset  # iterates in C, stops at the first other type


def check_value(obj: object) -> None:
    """Raise :class:`UnsupportedValueError` unless :func:`pack_value` round-trips ``obj``
    (same value, same types). Costs one set lookup for a scalar."""
    if type(obj) not in _SCALARS:
        _check(obj, 0)


def _check(obj: Any, depth: int) -> None:
    t = type(obj)
    if t in _SCALARS or t in _LEAVES:
        return
    if depth >= MAX_DEPTH:
        raise UnsupportedValueError(f"a value nested deeper than {MAX_DEPTH} levels")
    if t in _SEQUENCES:
        if _all_scalars(map(type, obj)):
            return
        for x in obj:
            if type(x) not in _SCALARS:
                _check(x, depth + 1)
    elif t is dict:
        if _all_scalars(map(type, obj.values())) and _all_scalars(map(type, obj)):
            return
        for k, x in obj.items():
            if type(k) not in _SCALARS:
                _check(k, depth + 1)
            if type(x) not in _SCALARS:
                _check(x, depth + 1)
    elif t is _dt.datetime or t is _dt.time:
        _tz(obj.tzinfo)
    elif isinstance(obj, np.generic) and obj.dtype.kind in _NUMPY_KINDS:
        return
    else:
        raise UnsupportedValueError(f"a value of type {_type_name(obj)}{_hint(obj)}")
