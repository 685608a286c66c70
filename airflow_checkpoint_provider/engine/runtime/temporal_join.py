"""The event-time temporal join (the DSL and its semantics are :mod:`..temporal`).

State, all keyed (heap or RocksDB; in every checkpoint and savepoint; moves with its key
group on rescale), per key:

* ``temporal-join.probes``: probe timestamp -> the probe rows waiting at it, each with an
  event-time timer at its timestamp;
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

from collections.abc import Iterator
from typing import cast

from ..changelog import OP_FIELD, RETRACT, row_kind
from ..eventtime import MIN_WATERMARK
from ..state.keygroups import key_group_for
from ..state.vectorized import key_groups_of
from ..temporal import TemporalJoinSpec
from ..timers import EVENT_TIME
from .joins import _JoinOperator

PROBE_STATE, VERSION_STATE = "temporal-join.probes", "temporal-join.versions"


class TemporalJoinOperator(_JoinOperator):
    """``probe.temporal_join(table, how=...).process(fn)``."""

    STATES = (PROBE_STATE, VERSION_STATE)

    def open(self, restored_operator_state):
        super().open(restored_operator_state)
        self.left = cast(TemporalJoinSpec, self.node.payload).how == "left"
        self.where = f"temporal join {self.uid!r}, table input"

    def _keyed_table(self, records: list[dict]) -> Iterator[dict]:
        """Each table record, the backend's current key set to its key."""
        spec = cast(TemporalJoinSpec, self.node.payload)
        sel, check = spec.key_selectors[1], self.keys.check
        keys = [check(sel(r)) for r in records]
        m = self.backend.max_parallelism
        groups = key_groups_of(keys, m)
        if groups is None:
            groups = [key_group_for(k, m) for k in keys]
        set_key = self.backend.set_current_key_in_group
        for r, key, group in zip(records, keys, groups, strict=True):
            set_key(key, group)
            yield r

    def process_input(self, input: int, records: list[dict]) -> list:
        register = self.timers.register_event_time_timer
        probes, versions = self.buffers
        if input == 1:
            for r, ts in self._keyed(records, 0):
                if ts <= self.watermark:  # its version may be gone already
                    self.dropped_late += 1
                    continue
                probes.put(ts, [*probes.get(ts, ()), r])
                register(ts)
            return []
        stamp = cast(TemporalJoinSpec, self.node.payload).timestamps[1]
        uid = self.uid or self.node.name
        for r in self._keyed_table(records):
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
        probes = self.buffers[0]
        left, emit = self.left, self._emit
        out: list = []
        for t in self.timers.due(EVENT_TIME, wm):
            latest = self._clean(t)
            rows = probes.get(t)
            if rows is None:
                continue
            probes.remove(t)
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
                n += sum(len(rows) if name == PROBE_STATE else 1 for _, rows in state.items())
            counts.append(n)
        return counts[0], counts[1]
