"""The regular join of changelogs (the DSL and its semantics are :mod:`..regular_join`).

State, all keyed (heap or RocksDB; in every checkpoint and savepoint; moves with its key
group on rescale): per join key and side, one entry map state (``regular-join.left`` /
``regular-join.right``, :data:`~..state.descriptors.ENTRY_MAP`):

* user key = the row's identity -> ``[row, count, touched]``: the identity is the msgpack
  encoding of the primary-key values (a side with a primary key; ``count`` is 1) or of the
  row's ``(field, value)`` pairs sorted by field (a side without one; ``count`` is how many
  equal rows it holds); ``touched`` is the processing time (epoch ms) the entry was last
  written, for ``state_ttl``;
* user key ``b""`` -> the side's total row count of the key (the sum of ``count``), which
  tells an outer join whether the other side's rows of the key stand alone (count 0).

A record reads its own entry (one point read), the count entries, and the other side's rows
of its key (one prefix scan in RocksDB), and writes its own entry and its side's count:
never the key's other rows (Flink's per-row ``numOfAssociations`` of an outer join is the
other side's count here, since every row of a key matches every row of the other side).

``state_ttl``: each write registers a processing-time timer of the key at the write time
plus the TTL (rounded up to :func:`_ttl_resolution`); when it fires, the key's entries not
written for the TTL leave both sides silently (no retraction is emitted, as Flink's state
TTL), and a timer for the earliest remaining entry is registered.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import msgpack

from ....changelog import DELETE, INSERT, OP_FIELD, RETRACT, row_kind
from ....errors import BadRecordError
from ....plan.specs import RegularJoinSpec
from ....state import ttl as state_ttl
from ....state.descriptors import EntryMapStateDescriptor
from ..base import KeyedOperator
from ..timers import PROCESSING_TIME, TimerService
from .state import with_current_keys

log = logging.getLogger(__name__)

STATES = ("regular-join.left", "regular-join.right")
#: the user key of a side's total row count of the key
COUNT_KEY = b""
SIDES = ("left", "right")


def _ttl_resolution(ttl_ms: int) -> int:
    """Timers of a key are rounded up to this many ms (at most ~16 timers per TTL)."""
    return max(1000, ttl_ms // 16)


def _now_ms() -> int:
    return state_ttl.now_ms()  # the wall clock, or an unaligned replay's checkpoint time


class RegularJoinOperator(KeyedOperator):
    """``a.key_by(ka).regular_join(b.key_by(kb), how=..., uid=...)``."""

    two_input = True

    def open(self, restored_operator_state):
        spec = cast(RegularJoinSpec, self.node.payload)
        self.spec = spec
        self.uid_label = self.uid or self.node.name
        self.sides = tuple(self.backend.get_state(EntryMapStateDescriptor(n)) for n in STATES)
        # the identities' msgpack (the bytes of packb, a reused packer: 5x faster)
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self.outer = (spec.outer(0), spec.outer(1))
        self.pks = spec.primary_keys
        self.ttl = spec.state_ttl_ms
        self.timers = TimerService(self.backend)
        self.timers.rebuild()
        self.where = tuple(f"regular join {self.uid_label!r}, {s} input" for s in SIDES)
        #: retractions of rows the state did not hold (never seen, or expired): dropped
        self.dropped_retractions = 0
        #: rows the state TTL dropped
        self.expired_rows = 0
        self.now = 0

    def process(self, records):  # pragma: no cover - the task calls process_input
        raise TypeError(f"operator {self.uid!r} has two inputs: use process_input")

    # -- output ---------------------------------------------------------------------------
    def _row(self, left: dict | None, right: dict | None, op: str) -> dict:
        fn = self.spec.fn
        if fn is not None:
            out = fn(left, right)
            if type(out) is not dict:
                raise BadRecordError(
                    f"regular join {self.uid_label!r}: fn returned {type(out).__name__}, not a "
                    "dict (one output row per joined pair)")
            return {**out, OP_FIELD: op}
        if left is None:
            pad = self.spec.padding[0]
            if pad:
                return {**dict.fromkeys(pad), **cast(dict, right), OP_FIELD: op}
            return {**cast(dict, right), OP_FIELD: op}
        if right is None:
            pad = self.spec.padding[1]
            if pad:
                return {**dict.fromkeys(pad), **left, OP_FIELD: op}
            return {**left, OP_FIELD: op}
        out = {**left, **right}
        n = len(out)
        if n == len(left) + len(right):  # no field in both (cheaper than a set of keys)
            out[OP_FIELD] = op
            return out
        shared = self.spec.shared_key_field
        if n == len(left) + len(right) - 1 and shared in left and shared in right:
            out[shared] = left[shared]
            out[OP_FIELD] = op
            return out
        both = left.keys() & right.keys()
        if len(both) > 1 or shared not in both:
            field = sorted(both - {shared})[0]
            raise BadRecordError(
                f"regular join {self.uid_label!r}: field {field!r} is in both the left and the "
                "right row; pass fn=lambda left, right: {...} to regular_join() to rename or "
                "drop it (left or right is None for an outer join's row without a match)")
        raise AssertionError("unreachable: one shared field is handled above")

    def _pair(self, side: int, mine: dict, other: dict | None, op: str) -> dict:
        return self._row(mine, other, op) if side == 0 else self._row(other, mine, op)

    # -- state ----------------------------------------------------------------------------
    def _identity(self, side: int, row: dict) -> bytes:
        pk, pack = self.pks[side], self._pack
        if pk is None:
            return pack(sorted(row.items()))
        try:
            return pack([row[f] for f in pk])
        except KeyError as exc:
            raise BadRecordError(
                f"{self.where[side]}: primary-key field {exc.args[0]!r} is missing from a "
                f"record (its fields: {', '.join(map(str, row))})") from None

    def _count(self, side: int) -> int:
        return self.sides[side].get(COUNT_KEY, 0)

    def _set_count(self, side: int, n: int) -> None:
        if n:
            self.sides[side].put(COUNT_KEY, n)
        else:
            self.sides[side].remove(COUNT_KEY)

    def _others(self, side: int) -> list[tuple[dict, int]]:
        """The other side's rows of the current key with their counts."""
        return [(v[0], v[1]) for k, v in self.sides[1 - side].items() if k != COUNT_KEY]

    def _touch(self) -> None:
        if self.ttl is not None:
            res = _ttl_resolution(self.ttl)
            self.timers.register_processing_time_timer(-(-(self.now + self.ttl) // res) * res)

    # -- records --------------------------------------------------------------------------
    def process_input(self, input: int, records: list[dict]) -> list:
        side = input - 1
        where = self.where[side]
        out: list[dict] = []
        self.now = _now_ms()
        for r in with_current_keys(self.backend, records, self.spec.key_selectors[side],
                                   self.keys.check):
            kind = row_kind(r, where)
            row = r if OP_FIELD not in r else {k: v for k, v in r.items() if k != OP_FIELD}
            ident = self._identity(side, row)
            if kind in RETRACT:
                self._retract(side, ident, out)
                continue
            if self.pks[side] is not None and self.sides[side].contains(ident):
                self._retract(side, ident, out)  # a new version of the primary key
            self._accumulate(side, ident, row, out)
        return out

    def _accumulate(self, side: int, ident: bytes, row: dict, out: list) -> None:
        mine = self.sides[side]
        mine_total = self._count(side)
        others = self._others(side)
        if others:
            pair, append = self._pair, out.append
            if self.outer[1 - side] and mine_total == 0:
                for other, n in others:  # they stood alone until now
                    retract = pair(1 - side, other, None, DELETE)
                    for _ in range(n):
                        append(retract)
            for other, n in others:
                joined = pair(side, row, other, INSERT)
                for _ in range(n):
                    append(joined)
        elif self.outer[side]:
            out.append(self._pair(side, row, None, INSERT))
        entry = mine.get(ident)
        mine.put(ident, [row, 1 if entry is None else entry[1] + 1, self.now])
        self._set_count(side, mine_total + 1)
        self._touch()

    def _retract(self, side: int, ident: bytes, out: list) -> None:
        mine = self.sides[side]
        entry = mine.get(ident)
        if entry is None:
            self.dropped_retractions += 1
            if self.dropped_retractions & (self.dropped_retractions - 1) == 0:  # 1, 2, 4, ...
                log.warning("%s: dropped a retraction of a row the join state does not hold "
                            "(never seen, or dropped by state_ttl); %d so far",
                            self.where[side], self.dropped_retractions)
            return
        row, n = entry[0], entry[1]
        if n > 1:
            mine.put(ident, [row, n - 1, self.now])
        else:
            mine.remove(ident)
        mine_left = self._count(side) - 1
        self._set_count(side, mine_left)
        self._touch()
        others = self._others(side)
        if not others:
            if self.outer[side]:
                out.append(self._pair(side, row, None, DELETE))
            return
        pair, append = self._pair, out.append
        for other, k in others:
            retract = pair(side, row, other, DELETE)
            for _ in range(k):
                append(retract)
        if self.outer[1 - side] and mine_left == 0:
            for other, k in others:  # they stand alone again
                alone = pair(1 - side, other, None, INSERT)
                for _ in range(k):
                    append(alone)

    # -- state TTL ------------------------------------------------------------------------
    def next_processing_timer(self):
        return self.timers.next_processing_time()

    def on_processing_time(self, now_ms: int) -> list:
        if self.ttl is None:
            return []
        ttl, res = self.ttl, _ttl_resolution(self.ttl)
        for _ in self.timers.due(PROCESSING_TIME, now_ms):
            oldest = None
            for side, state in enumerate(self.sides):
                removed = 0
                for ident, entry in state.items():
                    if ident == COUNT_KEY:
                        continue
                    if now_ms - entry[2] >= ttl:
                        state.remove(ident)
                        removed += entry[1]
                    elif oldest is None or entry[2] < oldest:
                        oldest = entry[2]
                if removed:
                    self.expired_rows += removed
                    self._set_count(side, self._count(side) - removed)
            if oldest is not None:
                self.timers.register_processing_time_timer(-(-(oldest + ttl) // res) * res)
        return []

    # -- introspection --------------------------------------------------------------------
    def state_rows(self) -> tuple[int, int]:
        """(left rows, right rows) held (with their duplicates; every key of this subtask)."""
        backend, counts = self.backend, []
        for name, state in zip(STATES, self.sides, strict=True):
            n = 0
            for key in list(backend.keys(name)):
                backend.set_current_key(key)
                n += state.get(COUNT_KEY, 0)
            counts.append(n)
        return counts[0], counts[1]

    def metrics(self) -> dict[str, Any]:
        return {"dropped_retractions": self.dropped_retractions,
                "expired_rows": self.expired_rows}
