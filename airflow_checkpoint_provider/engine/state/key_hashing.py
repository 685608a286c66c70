"""Vectorized key hashing for Arrow arrays: key hash, key group and channel of every row at once.

This module implements the key-group contract of :mod:`.keygroups` (MurmurHash3 x86 32-bit,
seed 0, unsigned, over each key's canonical bytes; ``key_group = hash % max_parallelism``;
``channel = key_group * parallelism // max_parallelism``) over whole ``pyarrow`` arrays with
numpy, so record batches can be partitioned without a Python call per row. For every array,
``key_hashes(array)`` equals ``[key_hash(v) for v in array.to_pylist()]`` element for element.

Fast paths: integers (canonical bytes: int64 little-endian), floating point (float64
little-endian), bool, string/binary (UTF-8 / raw bytes, read straight from the Arrow offsets and
data buffers) and dictionary arrays (hash the dictionary once, then gather). Nulls hash as
``key_hash(None)``. Any other type falls back to the scalar :func:`.keygroups.key_hash` per row.
"""

# Why hand-written: mmh3 hashes one buffer per call and no available library (pyarrow.compute,
# numpy, pandas) exposes MurmurHash3 x86_32 over the rows of an Arrow array; pyarrow's own hash
# kernels use different functions, which would break the savepoint contract.

from __future__ import annotations

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .keygroups import key_group_for, key_hash

__all__ = ["channels_for", "key_groups", "key_groups_of", "key_hashes", "murmur3_32_fixed"]

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M = np.uint32(5)
_N = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_S13 = np.uint32(13)
_S15 = np.uint32(15)
_S16 = np.uint32(16)
_S17 = np.uint32(17)
_S19 = np.uint32(19)
# Mask keeping the first ``r`` little-endian bytes of a word, r = 0..4.
_TAIL_MASK = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)

# Rows longer than this many bytes are hashed one by one with mmh3 (C, fast on long input): the
# vectorized loop runs once per 4-byte column, which does not pay for a few long keys.
_MAX_VECTOR_BYTES = 256

# View types only exist in pyarrow >= 16 (the project allows 15).
_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)
_is_binary_view = getattr(pa.types, "is_binary_view", lambda t: False)

_NONE_HASH = np.uint32(key_hash(None))
_TRUE_HASH = np.uint32(key_hash(True))
_FALSE_HASH = np.uint32(key_hash(False))


def _mix_k(k: np.ndarray) -> np.ndarray:
    """``k *= c1; k = rotl(k, 15); k *= c2``, in place on a writable ``uint32`` array."""
    k *= _C1
    high = k >> _S17
    k <<= _S15
    k |= high
    k *= _C2
    return k


def _mix_h(h: np.ndarray) -> None:
    """``h = rotl(h, 13) * 5 + 0xe6546b64`` (after ``h ^= k``), in place (``h`` may be a view)."""
    high = h >> _S19
    h <<= _S13
    h |= high
    h *= _M
    h += _N


def _fmix(h: np.ndarray) -> np.ndarray:
    h ^= h >> _S16
    h *= _F1
    h ^= h >> _S13
    h *= _F2
    h ^= h >> _S16
    return h


def murmur3_32_fixed(words: np.ndarray) -> np.ndarray:
    """MurmurHash3 x86 32-bit (seed 0) of ``n`` equal-length keys of ``4 * nwords`` bytes.

    ``words`` is a 2-D ``uint32`` array of shape ``(n, nwords)``: row ``i`` holds key ``i``
    as little-endian 4-byte blocks. Returns ``uint32`` hashes of shape ``(n,)``.
    """
    words = np.asarray(words)
    if words.ndim != 2:
        raise ValueError(f"words must be 2-D (n, nwords), got shape {words.shape}")
    if words.dtype != np.uint32:
        raise TypeError(f"words must be uint32, got {words.dtype}")
    n, nwords = words.shape
    h = np.zeros(n, dtype=np.uint32)
    for j in range(nwords):
        h ^= _mix_k(words[:, j].copy())
        _mix_h(h)
    h ^= np.uint32((4 * nwords) & 0xFFFFFFFF)
    return _fmix(h)


def _hash_int64(values: np.ndarray) -> np.ndarray:
    """Hashes of int64 (or uint64 < 2**63) values: canonical bytes are 8 bytes little-endian."""
    v = np.ascontiguousarray(values).astype("<i8", copy=False)
    words = v.view("<u4").reshape(len(v), 2).astype(np.uint32, copy=False)
    return murmur3_32_fixed(words)


def _hash_float64(values: np.ndarray) -> np.ndarray:
    # + 0.0 turns -0.0 into 0.0 (IEEE-754) and leaves every other value alone: the key
    # contract hashes -0.0 as 0.0 (state/keygroups.py)
    v = np.ascontiguousarray(values).astype("<f8", copy=False) + 0.0
    words = v.view("<u4").reshape(len(v), 2).astype(np.uint32, copy=False)
    return murmur3_32_fixed(words)


def _hash_varlen(starts: np.ndarray, lengths: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Hashes of the byte strings ``data[starts[i] : starts[i] + lengths[i]]``.

    Rows are sorted by length (descending), so for 4-byte column ``j`` the rows with a full
    block there form a prefix ``[0, f)`` and the rows whose tail block is column ``j`` the next
    run ``[f, t)``; each column only touches those rows (total work ~ total bytes / 4).
    """
    n = len(lengths)
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out
    long_rows = np.flatnonzero(lengths > _MAX_VECTOR_BYTES)
    for i in long_rows.tolist():
        s = int(starts[i])
        out[i] = mmh3.hash(data[s : s + int(lengths[i])].tobytes(), 0, signed=False)
    if len(long_rows):
        short_rows = np.flatnonzero(lengths <= _MAX_VECTOR_BYTES)
        starts, lengths = starts[short_rows], lengths[short_rows]
    else:
        short_rows = None
    if len(lengths) == 0:
        return out

    # Stable radix sort on a small unsigned key puts the longest rows first.
    order = np.argsort((_MAX_VECTOR_BYTES - lengths).astype(np.uint16), kind="stable")
    sl = lengths[order]
    ss = starts[order]
    neg = -sl  # ascending, for searchsorted: count(sl >= x) = searchsorted(neg, -x, "right")

    # Three zero bytes after the data let the last (tail) block of any row be read as a word;
    # ``words[p]`` is the (unaligned) little-endian word at byte ``p``.
    pad = np.zeros(len(data) + 3, dtype=np.uint8)
    pad[: len(data)] = data
    words = np.ndarray(shape=(len(data),), dtype="<u4", buffer=pad, strides=(1,))

    def count_at_least(x: int) -> int:
        return int(np.searchsorted(neg, -x, side="right"))

    h = np.zeros(len(sl), dtype=np.uint32)
    ncols = (int(sl[0]) + 3) // 4
    for j in range(ncols):
        off = 4 * j
        f = count_at_least(off + 4)  # rows [0, f) have a full block at column j
        if f:
            k = words[ss[:f] + off].astype(np.uint32, copy=False)
            hf = h[:f]
            hf ^= _mix_k(k)
            _mix_h(hf)
        t = count_at_least(off + 1)  # rows [f, t) end inside column j: their tail block
        if t > f:
            k = words[ss[f:t] + off].astype(np.uint32, copy=False)
            # Lengths off+3, off+2, off+1 come in that order: mask each run's spilled bytes.
            start = 0
            for r in (3, 2, 1):
                stop = count_at_least(off + r) - f
                k[start:stop] &= _TAIL_MASK[r]
                start = stop
            h[f:t] ^= _mix_k(k)
    h ^= sl.astype(np.uint32)
    h = _fmix(h)

    if short_rows is None:
        out[order] = h
    else:
        out[short_rows[order]] = h
    return out


def _hash_binary_like(arr: pa.Array) -> np.ndarray:
    """string / large_string / binary / large_binary: hash the bytes in the Arrow buffers."""
    n = len(arr)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(
        offsets_buf, dtype=np.int64 if large else np.int32, count=arr.offset + n + 1
    )[arr.offset :].astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    if data_buf is None or last == first:
        data = np.empty(0, dtype=np.uint8)
    else:
        data = np.frombuffer(data_buf, dtype=np.uint8, count=last)[first:]
    starts = offsets[:-1] - first
    lengths = np.diff(offsets)
    if arr.null_count:
        # Bytes under a null slot are meaningless; those rows are overwritten by the caller.
        lengths = np.where(_valid_mask(arr), lengths, 0)
    return _hash_varlen(starts, lengths, data)


def _valid_mask(arr: pa.Array) -> np.ndarray:
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _untuple(v: object) -> object:
    # The engine turns list keys into tuples before hashing (state/rocksdb.py, state/heap.py).
    return tuple(v) if isinstance(v, list) else v


def _fallback(arr: pa.Array) -> np.ndarray:
    return np.fromiter(
        (key_hash(_untuple(v)) for v in arr.to_pylist()), dtype=np.uint32, count=len(arr)
    )


def _hash_array(arr: pa.Array) -> np.ndarray:
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np.uint32)
    t = arr.type
    if pa.types.is_null(t):
        return np.full(n, _NONE_HASH, dtype=np.uint32)
    if pa.types.is_dictionary(t):
        dictionary = arr.dictionary
        if len(dictionary) == 0:  # then every index is null
            return np.full(n, _NONE_HASH, dtype=np.uint32)
        idx = arr.indices.fill_null(0).to_numpy(zero_copy_only=False)
        out = _hash_array(dictionary)[idx]
    elif pa.types.is_boolean(t):
        values = arr.fill_null(False).to_numpy(zero_copy_only=False)
        out = np.where(values, _TRUE_HASH, _FALSE_HASH).astype(np.uint32)
    elif pa.types.is_uint64(t):
        values = arr.fill_null(0).to_numpy(zero_copy_only=False)
        out = _hash_int64(values.view(np.int64))
        # Above int64 range the contract hashes the msgpack encoding: rare, do it per value.
        for i in np.flatnonzero(values >= np.uint64(2**63)).tolist():
            out[i] = key_hash(int(values[i]))
    elif pa.types.is_integer(t):
        out = _hash_int64(arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))
    elif pa.types.is_floating(t):
        # to_pylist() gives Python floats, i.e. float16/float32 widened exactly to float64.
        out = _hash_float64(arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64))
    elif (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return _with_nulls(arr, _hash_binary_like(arr))
    elif _is_string_view(t):
        return _hash_array(pc.cast(arr, pa.large_string()))
    elif _is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return _hash_array(pc.cast(arr, pa.large_binary()))
    else:
        return _fallback(arr)
    return _with_nulls(arr, out)


def _with_nulls(arr: pa.Array, out: np.ndarray) -> np.ndarray:
    if arr.null_count:
        out[~_valid_mask(arr)] = _NONE_HASH
    return out


def key_hashes(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``uint32`` array equal to ``[key_hash(v) for v in array.to_pylist()]``."""
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 0:
            return np.empty(0, dtype=np.uint32)
        return np.concatenate([_hash_array(c) for c in array.chunks])
    if isinstance(array, pa.Array):
        return _hash_array(array)
    raise TypeError(f"expected a pyarrow Array or ChunkedArray, got {type(array).__name__}")


def key_groups(array: pa.Array | pa.ChunkedArray, max_parallelism: int) -> np.ndarray:
    """``int64`` key group of every row: ``key_hash % max_parallelism``."""
    if max_parallelism < 1:
        raise ValueError(f"max_parallelism must be >= 1, got {max_parallelism}")
    return key_hashes(array).astype(np.int64) % np.int64(max_parallelism)


def channels_for(
    array: pa.Array | pa.ChunkedArray, parallelism: int, max_parallelism: int
) -> np.ndarray:
    """``int64`` operator subtask of every row: ``key_group * parallelism // max_parallelism``."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    groups = key_groups(array, max_parallelism)
    return groups * np.int64(parallelism) // np.int64(max_parallelism)


#: below this many keys, hashing key by key (mmh3 per key) is faster than the numpy passes
MIN_VECTOR_KEYS = 256


def key_groups_of(keys: list, max_parallelism: int) -> list[int] | None:
    """Key group of every key of a Python list, in one vectorized pass, when every key is a
    ``str`` or every key is an ``int`` (not ``bool``) within int64: equal to
    ``[key_group_for(k, max_parallelism) for k in keys]``. ``None`` for any other list
    (mixed or other types, ints beyond 64 bits, strings that are not valid UTF-8): the
    caller then hashes key by key, with that path's errors. Lists shorter than
    ``MIN_VECTOR_KEYS`` also get ``None``: the numpy passes cost more than they save there."""
    if not keys:
        return []
    if len(keys) < MIN_VECTOR_KEYS:
        return None
    kinds = set(map(type, keys))
    if kinds == {str}:
        arrow_type = pa.string()
    elif kinds == {int}:
        arrow_type = pa.int64()
    else:
        return None
    try:
        array = pa.array(keys, arrow_type)
    except (pa.ArrowException, OverflowError, UnicodeError):
        return None
    return (key_hashes(array) % np.uint32(max_parallelism)).tolist()


def key_groups_for(keys: list, max_parallelism: int) -> list[int]:
    """Key group of every key: one vectorized pass where :func:`key_groups_of` can, else key
    by key (with that path's errors)."""
    groups = key_groups_of(keys, max_parallelism)
    if groups is None:
        groups = [key_group_for(k, max_parallelism) for k in keys]
    return groups
