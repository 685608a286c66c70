"""The rows a join holds for one side, per key: one state entry per row.

Each side of an interval or window join is an entry map state (``ENTRY_MAP``,
:mod:`..state.descriptors`) of the operator's keyed backend: per key, user key
``t * 2**20 + seq`` -> the row, where ``t`` is the row's timestamp (interval join) or its
window's start (window join) and ``seq`` numbers the rows of the key at ``t`` (0, 1, ...);
the entry ``t * 2**20 + COUNT`` holds how many there are. In RocksDB every entry is its own
row, so buffering a row writes that row and the count, never the key's other rows; the
clean-up at ``t`` removes exactly the rows at ``t`` (and the count).

Snapshots written before this layout hold each side as map state (``interval-join.left`` /
``.right``: timestamp -> ``[[row, matched], ...]``; ``window-join.left`` / ``.right``: window
start -> rows), one value per key. :func:`convert_legacy` moves a restored one into the new
states when the operator opens, then drops it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from ....errors import BadRecordError
from ....state.descriptors import EntryMapStateDescriptor, MapStateDescriptor
from ....state.key_hashing import key_groups_for

log = logging.getLogger(__name__)

SEQ_BITS = 20
#: the seq of the entry that counts a timestamp's rows (so at most COUNT rows per key and t)
COUNT = (1 << SEQ_BITS) - 1
#: timestamps (ms) must lie within +-2**42 (about 139 years around 1970): the user key is a
#: 64-bit integer
TIME_LIMIT = 1 << 42


class RowBuffer:
    """One side's rows of the current key (the backend's current key)."""

    __slots__ = ("state", "name", "uid", "in_place")

    def __init__(self, backend: Any, name: str, uid: str) -> None:
        self.state = backend.get_state(EntryMapStateDescriptor(name))
        self.name = name
        self.uid = uid
        #: heap: the key's dict, changed in place (one state call per row instead of three)
        self.in_place = getattr(self.state, "writable_map", None)

    def _base(self, t: int) -> int:
        if not -TIME_LIMIT <= t < TIME_LIMIT:
            raise BadRecordError(
                f"join {self.uid!r}: time {t} ms is outside +-2**42 ms (about 139 years "
                "around 1970), which the join state can hold; check the timestamp field's unit "
                "(milliseconds since the epoch)")
        return t << SEQ_BITS

    def add(self, t: int, value: object) -> None:
        """Buffer ``value`` at ``t``: writes its entry and the count of ``t``."""
        state, base = self.state, self._base(t)
        m = self.in_place() if self.in_place is not None else None
        n = (state if m is None else m).get(base + COUNT, 0)
        if n >= COUNT:
            raise BadRecordError(
                f"join {self.uid!r}: more than {COUNT - 1:,} rows of one key at time {t} on "
                f"one side ({self.name}); a join holds at most that many per key and "
                "timestamp (interval join) or window (window join): use a finer key or "
                "smaller windows")
        if m is None:
            state.put(base + n, value)
            state.put(base + COUNT, n + 1)
        else:
            m[base + n] = value
            m[base + COUNT] = n + 1

    def entries(self) -> list[tuple[int, int, Any]]:
        """``(t, entry id, value)`` of every row of the key."""
        return [(uk >> SEQ_BITS, uk, v) for uk, v in self.state.items()
                if uk & COUNT != COUNT]

    def put(self, entry: int, value: object) -> None:
        """Replace the value of one row (an entry id from :meth:`entries`)."""
        self.state.put(entry, value)

    def pop(self, t: int) -> list:
        """Remove the rows at ``t`` and return them (in the order they came). Heap: one read
        of the key's entries, one clear when they are all at ``t`` (a window join's key
        usually has one open window); RocksDB: point reads and deletes of exactly them."""
        state, base = self.state, self._base(t)
        if self.in_place is None:  # RocksDB: point reads and deletes (a scan skips tombstones)
            n = state.get(base + COUNT)
            if not n:
                return []
            rows = [state.get(base + i) for i in range(n)]
            for i in range(n + 1):
                state.remove(base + (i if i < n else COUNT))
            return rows
        entries = state.items()
        if not entries:
            return []
        mine = [(uk, v) for uk, v in entries if uk >> SEQ_BITS == t]
        if len(mine) == len(entries):
            state.clear()
        else:
            for uk, _ in mine:
                state.remove(uk)
        return [v for uk, v in sorted(mine, key=lambda e: e[0]) if uk != base + COUNT]

    def size(self) -> int:
        """Rows of the current key."""
        return sum(1 for uk in self.state.keys() if uk & COUNT != COUNT)


def convert_legacy(backend: Any, uid: str, legacy: str, buffer: RowBuffer) -> int:
    """Move a restored side of the old layout (map state ``legacy``: per key, ``t`` -> list
    of rows) into ``buffer`` and drop it; returns the rows moved (0 if the restored
    snapshot has no such state)."""
    if legacy not in backend.restored_meta:
        return 0
    old = backend.get_state(MapStateDescriptor(legacy))
    moved = 0
    for key in list(backend.keys(legacy)):
        backend.set_current_key(key)
        for t, rows in sorted(old.items()):
            for row in rows:
                buffer.add(t, row)
                moved += 1
        old.clear()
    backend.drop_state(legacy)
    log.info("join %r: moved %d buffered rows of state %r (the layout before per-row entries) "
             "into %r", uid, moved, legacy, buffer.name)
    return moved


def with_current_keys(backend: Any, records: list[dict], selector: Callable[[dict], object],
                      check: Callable[[object], object]) -> Iterator[dict]:
    """Each record, the backend's current key set to its key (checked by ``check``; the
    batch's key groups hashed in one pass)."""
    keys = [check(selector(r)) for r in records]
    set_key = backend.set_current_key_in_group
    for r, key, group in zip(records, keys, key_groups_for(keys, backend.max_parallelism),
                             strict=True):
        set_key(key, group)
        yield r
