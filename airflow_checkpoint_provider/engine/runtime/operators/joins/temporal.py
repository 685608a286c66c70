"""The event-time temporal join (the DSL and its semantics are :mod:`..temporal`).

State, all keyed (heap or RocksDB; in every checkpoint and savepoint; moves with its key
group on rescale), per key:

* ``temporal-join.probe-rows``: the probe rows waiting, one entry each, at user key
  ``ts * 2**20 + seq`` (``seq`` numbers the key's probes at ``ts``), and
  ``temporal-join.probe-counts``: ``ts`` -> how many wait at it, with an event-time timer at
  ``ts``. Adding a probe writes its entry and the count: O(1) on the heap backend however
  many probes share a timestamp (the layout before, ``temporal-join.probes``: ``ts`` -> the
  list of probes, rebuilt on every add, was quadratic). Snapshots of that layout are
  converted when the operator opens (:meth:`TemporalJoinOperator._convert_legacy_probes`).
  RocksDB map state is still one value per key, read and rewritten on every change (an
  add costs what it did before, firing a timestamp's probes one read and one write);
* ``temporal-join.versions``: version timestamp -> ``[row]`` (an upsert) or ``[]`` (the row
  was deleted then), each with an event-time timer at its timestamp too (a table without
  time keeps one version per key, at the minimum timestamp).

When the watermark reaches a timer ``t`` of a key, the key's probes at ``t`` join the latest
version at or before ``t`` and leave the state; then the versions at or before ``t`` but the
latest leave it too (no probe to come is at or before ``t``: the probes still waiting are
later, every new one is later than the watermark), and that latest one as well if it is a
delete. So a key holds one version (its current row) plus the versions ahead of the
watermark, and the probes ahead of it. The watermark itself is operator state, as in the
other joins (:class:`~.windowing._CheckpointedWatermark`); rows of either input at or behind
it are late, dropped and counted (``dropped_late``).
"""

from __future__ import annotations

import logging
from typing import cast

from ....changelog import OP_FIELD, RETRACT, row_kind
from ....errors import BadRecordError
from ....eventtime import MIN_WATERMARK
from ....plan.specs import TemporalJoinSpec
from ..timers import EVENT_TIME
from .per_record import _JoinOperator
from .state import with_current_keys

log = logging.getLogger(__name__)

PROBE_STATE, VERSION_STATE = "temporal-join.probe-rows", "temporal-join.versions"
PROBE_COUNT_STATE = "temporal-join.probe-counts"
#: the probe state of snapshots before per-probe entries (ts -> [probe rows]): converted
LEGACY_PROBE_STATE = "temporal-join.probes"
SEQ_BITS = 20
#: probes of one key at one timestamp the state can number
MAX_PROBES_PER_TIME = (1 << SEQ_BITS) - 1
#: probe timestamps (ms) must lie within +-2**42 (about 139 years around 1970): the entry
#: key ``ts * 2**20 + seq`` is a 64-bit integer
TIME_LIMIT = 1 << 42


class TemporalJoinOperator(_JoinOperator):
    """``probe.temporal_join(table, how=...).process(fn)``."""

    STATES = (PROBE_STATE, VERSION_STATE)

    def open(self, restored_operator_state):
        super().open(restored_operator_state)
        self.left = cast(TemporalJoinSpec, self.node.payload).how == "left"
        self.where = f"temporal join {self.uid!r}, table input"
        self.probe_counts = self.ctx.map_state(PROBE_COUNT_STATE)
        if LEGACY_PROBE_STATE in self.backend.restored_meta:
            self._convert_legacy_probes()

    def _add_probe(self, ts: int, row: dict) -> None:
        """Buffer a probe of the current key at ``ts``: its entry and the count of ``ts``."""
        if not -TIME_LIMIT <= ts < TIME_LIMIT:
            raise BadRecordError(
                f"temporal join {self.uid!r}: probe time {ts} ms is outside +-2**42 ms (about "
                "139 years around 1970), which the join state can hold; check the timestamp "
                "field's unit (milliseconds since the epoch)")
        counts = self.probe_counts
        n = counts.get(ts, 0)
        if n >= MAX_PROBES_PER_TIME:
            raise BadRecordError(
                f"temporal join {self.uid!r}: more than {MAX_PROBES_PER_TIME:,} probes of one "
                f"key wait at time {ts}; use a finer key")
        self.buffers[0].put((ts << SEQ_BITS) + n, row)
        counts.put(ts, n + 1)

    def _pop_probes(self, ts: int) -> list | None:
        """Remove the current key's probes at ``ts`` and return them in arrival order
        (None if none wait there)."""
        counts, rows = self.probe_counts, self.buffers[0]
        n = counts.get(ts)
        if n is None:
            return None
        base = ts << SEQ_BITS
        counts.remove(ts)
        # one read and one write of the key's map in RocksDB, n removes on the heap
        return rows.pop_all([base + i for i in range(n)])

    def _convert_legacy_probes(self) -> None:
        """Move the probes of a snapshot of the layout before per-probe entries (map state
        ``temporal-join.probes``: ``ts`` -> list of rows, per key) into the current states,
        keeping their order; their timers were restored with the timer service."""
        backend = self.backend
        old = self.ctx.map_state(LEGACY_PROBE_STATE)
        moved = 0
        for key in list(backend.keys(LEGACY_PROBE_STATE)):
            backend.set_current_key(key)
            for ts, rows in sorted(old.items()):
                for row in rows:
                    self._add_probe(ts, row)
                    moved += 1
            old.clear()
        log.info("temporal join %r: moved %d waiting probes of state %r (the layout before "
                 "per-probe entries) into %r", self.uid, moved, LEGACY_PROBE_STATE, PROBE_STATE)

    def process_input(self, input: int, records: list[dict]) -> list:
        register = self.timers.register_event_time_timer
        versions = self.buffers[1]
        if input == 1:
            for r, ts in self._keyed(records, 0):
                if ts <= self.watermark:  # its version may be gone already
                    self.dropped_late += 1
                    continue
                self._add_probe(ts, r)
                register(ts)
            return []
        stamp = cast(TemporalJoinSpec, self.node.payload).timestamps[1]
        uid = self.uid or self.node.name
        spec = cast(TemporalJoinSpec, self.node.payload)
        for r in with_current_keys(self.backend, records, spec.key_selectors[1],
                                   self.keys.check):
            kind = row_kind(r, self.where)
            version = [] if kind in RETRACT else [
                r if OP_FIELD not in r else {k: v for k, v in r.items() if k != OP_FIELD}]
            if stamp is None:  # a table without time: the last record of a key wins
                versions.put(MIN_WATERMARK, version)
                self._clean(MIN_WATERMARK)
                continue
            ts = stamp.of_record(r, uid)
            if ts <= self.watermark:
                # late: the versions it would precede may be cleaned already (a delete
                # after it, say), so it could wrongly become the key's current row
                self.dropped_late += 1
                continue
            versions.put(ts, version)  # a later record of the same time replaces it
            register(ts)
        return []

    def _clean(self, upto: int) -> list | None:
        """Drop the current key's versions at or before ``upto`` but the latest (and that
        one too if it is a delete); return that latest version (None if there is none)."""
        versions = self.buffers[1]
        old = sorted(ts for ts in versions.keys() if ts <= upto)
        if not old:
            return None
        for ts in old[:-1]:
            versions.remove(ts)
        latest = versions.get(old[-1])
        if not latest:
            versions.remove(old[-1])
        return latest

    def on_watermark(self, watermark):
        wm = self.timers.watermark = self._advance(watermark)
        left, emit = self.left, self._emit
        out: list = []
        for t in self.timers.due(EVENT_TIME, wm):
            latest = self._clean(t)
            rows = self._pop_probes(t)
            if rows is None:
                continue
            row = latest[0] if latest else None
            if row is None and not left:
                continue
            for probe in rows:
                emit(probe, row, t, out)
        return [out] if out else []

    def state_rows(self) -> tuple[int, int]:
        """(probe rows, versions) held in the join's state (every key of this subtask)."""
        backend, counts = self.backend, []
        for name, state in zip(self.STATES, self.buffers, strict=True):
            n = 0
            for key in list(backend.keys(name)):
                backend.set_current_key(key)
                n += len(state.keys())
            counts.append(n)
        return counts[0], counts[1]
