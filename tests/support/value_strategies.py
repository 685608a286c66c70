"""Hypothesis strategies for the state value contract (issue 35): every type a state keeps,
nested, and a comparison that checks types as well as values."""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo
from decimal import Decimal

import numpy as np
from hypothesis import strategies as st

ZONES = [zoneinfo.ZoneInfo(k) for k in ("UTC", "Europe/Berlin", "America/New_York",
                                        "Asia/Kolkata")]
TZS = st.one_of(
    st.none(), st.just(dt.UTC), st.sampled_from(ZONES),
    st.builds(lambda m, named: dt.timezone(dt.timedelta(minutes=m), f"Z{m}") if named
              else dt.timezone(dt.timedelta(minutes=m)),
              st.integers(-23 * 60, 23 * 60), st.booleans()))

NUMPY = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.integers(0, 255).map(np.uint8),
    st.floats(width=32, allow_nan=False).map(np.float32),
    st.floats(allow_nan=False).map(np.float64),
    st.booleans().map(np.bool_),
    st.integers(-(10**12), 10**12).map(lambda n: np.datetime64(n, "ms")),
)


def _hashable_leaves(allow_nan: bool):
    return st.one_of(
        st.none(), st.booleans(),
        st.integers(-(2**70), 2**70),          # beyond 64 bits, both signs
        st.floats(allow_nan=allow_nan, allow_infinity=True),
        st.text(max_size=8), st.binary(max_size=8),
        st.datetimes(timezones=TZS), st.dates(), st.times(timezones=TZS), st.timedeltas(),
        st.decimals(allow_nan=allow_nan, allow_infinity=True, places=None),
        st.complex_numbers(allow_nan=False, max_magnitude=1e6),
        st.uuids(), NUMPY,
    )


#: hashable values (map keys, set elements): no NaN (a NaN key is never found again)
HASHABLE = st.recursive(
    _hashable_leaves(False),
    lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=3).map(tuple),
                            st.frozensets(inner, max_size=3)),
    max_leaves=6)

#: any value a state keeps
VALUES = st.recursive(
    _hashable_leaves(True),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(HASHABLE, inner, max_size=3), st.sets(HASHABLE, max_size=3),
        st.frozensets(HASHABLE, max_size=3)),
    max_leaves=8)

#: keys of keyed state (the key contract: int, str, tuples of them)
STATE_KEYS = st.one_of(st.integers(-10**6, 10**6), st.text(max_size=6),
                       st.tuples(st.integers(0, 50), st.text(max_size=3)))


def _nan(x) -> bool:
    return (isinstance(x, (float, np.floating)) and x != x) or \
        (isinstance(x, Decimal) and x.is_nan())


def same(a, b) -> bool:
    """``a == b`` and of the same type, all the way down (containers, map keys, time
    zones); NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        by_key = {k: k for k in b}
        return all(k in b and type(by_key[k]) is type(k) and same(k, by_key[k])
                   and same(v, b[k]) for k, v in a.items())
    if isinstance(a, (set, frozenset)):
        return a == b and all(any(same(x, y) for y in b) for x in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if _nan(a):
        return _nan(b) and (not isinstance(a, Decimal) or a.is_snan() == b.is_snan())
    if isinstance(a, Decimal):
        return str(a) == str(b)  # exponent and sign of zero kept
    if isinstance(a, (dt.datetime, dt.time)):
        return (a == b and a.fold == b.fold and type(a.tzinfo) is type(b.tzinfo)
                and a.tzinfo == b.tzinfo and
                (a.tzinfo is None or a.tzinfo.tzname(None) == b.tzinfo.tzname(None)
                 or isinstance(a.tzinfo, zoneinfo.ZoneInfo)))
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float) and a == 0:
        return str(a) == str(b)  # -0.0 stays -0.0
    return a == b


__all__ = ["HASHABLE", "STATE_KEYS", "VALUES", "same", "uuid"]
