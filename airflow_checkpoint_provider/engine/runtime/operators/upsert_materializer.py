"""The upsert materializer (the DSL and why: :mod:`..upsert_materializer`).

State, keyed by the sink's key (heap or RocksDB; in every checkpoint and savepoint; moves
with its key group on rescale): one entry map state ``upsert-materializer.rows``
(:data:`~..state.descriptors.ENTRY_MAP`) per key:

* user key = the row's identity (msgpack of its ``(field, value)`` pairs sorted by field,
  ``_op`` excluded) -> ``[row, count, seq]``: ``count`` equal rows are alive, the newest added
  as the key's ``seq``-th row;
* user key ``b""`` -> ``[next seq, identity of the last alive row]``.

The last alive row is the entry with the highest ``seq``. A record reads its own entry and
the ``b""`` entry and writes them back (Flink's first ``SinkUpsertMaterializer`` rewrote the
key's whole list per record); only the removal of the last alive row scans the key's
entries (one prefix scan in RocksDB) to find the new last one. Removing one of several equal
rows keeps the newest's ``seq`` (Flink removes the first equal row of its list).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import msgspec

from ...changelog import DELETE, OP_FIELD, RETRACT, UPDATE_AFTER, row_kind
from ...state.descriptors import EntryMapStateDescriptor
from ...state.key_hashing import key_groups_for
from .base import KeyedOperator

log = logging.getLogger(__name__)

STATE = "upsert-materializer.rows"
#: the user key of the key's ``[next seq, last alive identity]``
META_KEY = b""

_encode = msgspec.msgpack.Encoder().encode


def identity(row: dict) -> bytes:
    """The identity of ``row`` (without ``_op``): equal rows, equal bytes."""
    return _encode(sorted(row.items()))


class UpsertMaterializerOperator(KeyedOperator):
    """``stream.materialize_upserts(key=[...], uid=...)``: per key, the alive rows; emits
    the last one as ``+U`` whenever it changes, ``-D`` when none is left."""

    def open(self, restored_operator_state):
        self.rows = self.backend.get_state(EntryMapStateDescriptor(STATE))
        self.where = f"upsert materializer {self.uid or self.node.name!r}"
        #: retractions of a row the key did not hold (dropped, or a delete of an empty key)
        self.dropped_retractions = 0

    def process(self, records: list[dict]) -> list[dict]:
        sel, check = cast(Callable[[dict], object], self.selector), self.keys.check
        keys = [check(sel(r)) for r in records]
        m: int = cast(Any, self.backend).max_parallelism
        groups = key_groups_for(keys, m)
        set_key, where = self.backend.set_current_key_in_group, self.where
        out: list[dict] = []
        for r, key, group in zip(records, keys, groups, strict=True):
            set_key(key, group)
            kind = row_kind(r, where)
            row = r if OP_FIELD not in r else {k: v for k, v in r.items() if k != OP_FIELD}
            if kind in RETRACT:
                self._retract(row, out)
            else:
                self._add(row, out)
        return out

    def _add(self, row: dict, out: list) -> None:
        rows, ident = self.rows, identity(row)
        meta = rows.get(META_KEY)
        seq = 0 if meta is None else meta[0]
        entry = rows.get(ident)
        rows.put(ident, [row, 1 if entry is None else entry[1] + 1, seq])
        rows.put(META_KEY, [seq + 1, ident])
        out.append({**row, OP_FIELD: UPDATE_AFTER})

    def _retract(self, row: dict, out: list) -> None:
        rows, ident = self.rows, identity(row)
        entry = rows.get(ident)
        if entry is None:
            self.dropped_retractions += 1
            if self.dropped_retractions & (self.dropped_retractions - 1) == 0:  # 1, 2, 4, ...
                log.warning("%s: a retraction of a row the key does not hold (never seen, or "
                            "state from before the materializer); %d so far",
                            self.where, self.dropped_retractions)
            if rows.get(META_KEY) is None:  # nothing alive: the key's row is gone anyway
                out.append({**row, OP_FIELD: DELETE})
            return
        if entry[1] > 1:
            rows.put(ident, [entry[0], entry[1] - 1, entry[2]])
            return
        rows.remove(ident)
        meta = rows.get(META_KEY)
        if meta[1] != ident:
            return  # a hidden row went: the last alive row is unchanged
        last = None
        for uk, e in rows.items():
            if uk != META_KEY and (last is None or e[2] > last[1][2]):
                last = (uk, e)
        if last is None:
            rows.remove(META_KEY)
            out.append({**entry[0], OP_FIELD: DELETE})
        else:
            rows.put(META_KEY, [meta[0], last[0]])
            out.append({**last[1][0], OP_FIELD: UPDATE_AFTER})

    # -- introspection --------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        return {"dropped_retractions": self.dropped_retractions}
