"""Key groups: the unit in which keyed state is partitioned, snapshotted and redistributed.

CONTRACT (savepoints depend on it; changing it is a breaking change):

* ``key_hash(key)`` = MurmurHash3 x86 32-bit, seed 0, unsigned, over the key's canonical bytes:
  ``str`` -> UTF-8; ``bool`` -> b"\\x01"/b"\\x00" prefixed by b"b"; ``int`` -> 8-byte signed
  little-endian (ints outside 64 bits: their msgpack encoding); ``bytes`` -> as is;
  ``float`` -> 8-byte IEEE-754 little-endian (``-0.0`` as ``0.0``); anything else (tuples, lists, None) -> msgpack
  of the value (tuples encoded as arrays).
* ``key_group = key_hash(key) % max_parallelism``.
* Operator subtask ``i`` of ``p`` owns the contiguous range
  ``[ceil(i*m/p), ceil((i+1)*m/p) - 1]`` and key group ``g`` belongs to subtask ``g*p // m``
  (the same formulas as Flink's KeyGroupRangeAssignment).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import mmh3
import msgpack

from ..errors import BadRecordError

_INT64 = struct.Struct("<q")
_FLOAT64 = struct.Struct("<d")


def key_bytes(key: object) -> bytes:
    """Canonical bytes of a key (see the module contract)."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bool):
        return b"b\x01" if key else b"b\x00"
    if isinstance(key, int):
        if -(2**63) <= key < 2**63:
            return _INT64.pack(key)
        try:
            return msgpack.packb(key)
        except OverflowError:
            raise BadRecordError(f"key {key!r} is an int beyond 64 bits") from None
    if isinstance(key, bytes):
        return key
    if isinstance(key, float):
        return _FLOAT64.pack(0.0 if key == 0.0 else key)  # -0.0 is the key 0.0
    try:
        return msgpack.packb(key, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRecordError(f"key {key!r} of type {type(key).__name__} cannot be a key "
                             f"({exc}); keys are str, bytes, bool, int, float, None or a "
                             "flat tuple of those") from None


def key_hash(key: object) -> int:
    return mmh3.hash(key_bytes(key), 0, signed=False)


def key_group_for(key: object, max_parallelism: int) -> int:
    return key_hash(key) % max_parallelism


def operator_index_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    return key_group * parallelism // max_parallelism


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range of key groups ``[start, end]``; empty when ``end < start``."""

    start: int
    end: int

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self):
        return iter(range(self.start, self.end + 1))

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def intersect(self, other: KeyGroupRange) -> KeyGroupRange:
        return KeyGroupRange(max(self.start, other.start), min(self.end, other.end))

    def to_list(self) -> list[int]:
        return [self.start, self.end]


def key_group_range_for(index: int, parallelism: int, max_parallelism: int) -> KeyGroupRange:
    if not 0 <= index < parallelism <= max_parallelism:
        raise ValueError(
            f"subtask {index} of parallelism {parallelism} with max parallelism {max_parallelism}"
        )
    start = -(-index * max_parallelism // parallelism)
    end = -(-(index + 1) * max_parallelism // parallelism) - 1
    return KeyGroupRange(start, end)
