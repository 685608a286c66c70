"""The operators at a job's edges: :class:`SourceOperator` (split readers, their positions as
operator state, watermarks) and :class:`SinkOperator` (a two-phase-commit writer driven by
checkpoints). The other operators are in :mod:`.operators`."""

from __future__ import annotations

import time
import zlib
from typing import Any, cast

import pyarrow as pa

from ...connectors.base import ConnectorContext, SourceContext
from ...connectors.capabilities import SupportsDiscardHeld
from ...errors import CorruptCheckpointError, RestoreError
from ...eventtime import WatermarkStrategy
from ...state.operator_state import OperatorStateStore
from ..batches import Batch
from .base import Operator, OperatorSnapshot
from .watermarks import SourceWatermarks, Status

#: the union list state of a source's split positions
SPLITS_STATE = "splits"
#: continuous sources: the modification time at or below which every split was read
FLOOR_STATE = "discovered_floor"


def _split_entries(uid: str | None, entries: list) -> list[dict]:
    """Restored split entries ``{split, position, finished, max_timestamp?}`` (untrusted
    input: from a ``_metadata`` file)."""
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("split"), str):
            raise CorruptCheckpointError(
                f"source {uid!r}: split entry {e!r:.200} in the snapshot is malformed")
    return entries


def _restored_timestamp(entry: dict, uid: str | None) -> int | None:
    """A split's largest timestamp from a snapshot (untrusted input)."""
    ts = entry.get("max_timestamp")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
        raise CorruptCheckpointError(
            f"source {uid!r}: split {entry.get('split')!r} has max_timestamp {ts!r} in the "
            "snapshot, not an integer")
    return ts


class SourceOperator(Operator):
    """Reads the splits assigned to this subtask (split j runs on subtask j % parallelism).

    ``splits`` is the job's split list, taken once by the job master so every subtask and
    every attempt sees the same list.
    """

    splits: list[str] | None = None

    def open(self, restored_operator_state):
        src = self.node.payload
        # Split positions are union list state (Flink's legacy sources keep theirs the same
        # way): every subtask gets every old subtask's splits and picks its own, so a
        # restore at any parallelism finds each split's position.
        self.state = OperatorStateStore(self.uid or self.node.name, self.ctx.subtask_index,
                                        self.ctx.parallelism, restored_operator_state)
        self.split_state = self.state.get_union_list_state(SPLITS_STATE)
        restored = _split_entries(self.uid, [
            *self.split_state.get(),
            # snapshots before the operator-state API held bare split entries
            *(e for e in restored_operator_state or [] if isinstance(e, dict) and "split" in e)])
        positions = {e["split"]: e.get("position") for e in restored}
        self.finished_splits: set[str] = {e["split"] for e in restored if e.get("finished")}
        sctx = SourceContext(self.ctx.job_id, self.ctx.job_name, self.uid,
                             self.ctx.subtask_index, self.ctx.parallelism, self.ctx.attempt,
                             fenced=bool(self.ctx.fence_sinks))
        self.sctx = sctx
        # A continuous source (monitor_interval set) discovers splits while it runs: each
        # subtask lists the source and takes the new splits it owns by hash; finished ones
        # older than the source's retention are folded into a modification-time floor.
        self.monitor_interval: float | None = getattr(src, "monitor_interval", None)
        self.floor_state = self.state.get_union_list_state(FLOOR_STATE)
        self.floor = max((f for f in self.floor_state.get() if isinstance(f, int | float)),
                         default=float("-inf"))
        self._next_discovery = time.monotonic() + (self.monitor_interval or 0.0)
        splits = list(self.splits if self.splits is not None else src.splits())
        if self.monitor_interval is not None:  # every split ever seen counts as offered
            splits += sorted(self.finished_splits - set(splits))
            # and so does a split discovered after the job's split list was taken and not
            # finished at the checkpoint, if the source still offers it: it resumes at its
            # recorded position
            unfinished = set(positions) - set(splits)
            if unfinished:
                splits += sorted(unfinished & set(src.splits()))
        vanished = sorted(set(positions) - set(splits) - self.finished_splits)
        if vanished:
            raise RestoreError(
                f"source {self.uid!r}: split(s) {', '.join(vanished)} recorded in the restored "
                "snapshot are no longer offered by the source (a file was removed?)"
            )
        self.assigned = [s for j, s in enumerate(splits) if self._owns(s, j)]
        self.readers = {}
        self.positions = {}
        self._checkpointed: list[tuple[int, dict]] = []  # (checkpoint id, split positions)
        for s in self.assigned:
            self.positions[s] = positions.get(s)
            if s not in self.finished_splits:
                self.readers[s] = src.open_split(s, positions.get(s), sctx)
        self._order = [s for s in self.assigned if s in self.readers]
        self._next = 0
        strategy = self.node.watermarks
        self.watermarks: SourceWatermarks | None = None
        if strategy is not None:
            self.watermarks = SourceWatermarks(
                strategy, self._order,
                {e["split"]: _restored_timestamp(e, self.uid) for e in restored},
                time.monotonic())

    def _owns(self, split: str, index: int) -> bool:
        """Bounded sources: split j runs on subtask j % parallelism. Continuous ones: by a
        hash of the split id, so a split discovered later has the same owner everywhere."""
        n = self.ctx.parallelism
        if self.monitor_interval is None:
            return index % n == self.ctx.subtask_index
        return zlib.crc32(split.encode()) % n == self.ctx.subtask_index

    def _discover(self) -> None:
        src: Any = self.node.payload
        known = set(self.positions)
        for split in src.splits():
            if split in known or not self._owns(split, -1):
                continue
            if src.modified_time(split) <= self.floor:
                continue  # older than the retained seen-set: read before
            self.assigned.append(split)
            self.positions[split] = None
            self.readers[split] = src.open_split(split, None, self.sctx)
            self._order.append(split)
            if self.watermarks is not None:
                self.watermarks.add_split(split, time.monotonic())

    def read_batch(self, max_records: int) -> list[dict] | None:
        """Round-robin over the splits; ``None`` when every split is exhausted (never for a
        continuous source, which looks for new splits every ``monitor_interval``)."""
        if self.monitor_interval is not None:
            now = time.monotonic()
            if now >= self._next_discovery:
                self._next_discovery = now + self.monitor_interval
                self._discover()
            if not self._order:
                return []
        for _ in range(len(self._order)):
            split = self._order[self._next % len(self._order)]
            self._next += 1
            batch = self.readers[split].read_batch(max_records)
            if batch is None:
                self.positions[split] = self.readers[split].position()
                self.readers.pop(split).close()
                self.finished_splits.add(split)
                self._order.remove(split)
                if self.watermarks is not None:
                    self.watermarks.on_split_finished(split)
                return [] if self._order or self.monitor_interval is not None else None
            self.positions[split] = self.readers[split].position()
            if batch:
                if self.watermarks is not None:
                    self._observe(split, batch)
                return batch
        return None if not self._order and self.monitor_interval is None else []

    def _observe(self, split: str, batch: Batch) -> None:
        # only called when the source has a watermark strategy (and so self.watermarks)
        stamp = cast(WatermarkStrategy, self.node.watermarks).timestamp
        uid = self.uid or self.node.name
        ts = (stamp.of_batch(batch, uid) if isinstance(batch, pa.RecordBatch)
              else stamp.of_rows(batch, uid))
        cast(SourceWatermarks, self.watermarks).on_records(split, int(ts.max()), time.monotonic())

    def poll_watermark(self, *, force: bool = False) -> Status | None:
        """The watermark (or idle status) to send downstream now, if any."""
        if self.watermarks is None:
            return None
        return self.watermarks.poll(time.monotonic(), force=force)

    def snapshot(self, checkpoint_id):
        self._compact()
        wm = self.watermarks
        self.split_state.update([
            {"split": s, "position": self.positions.get(s), "finished": s in self.finished_splits,
             **({"max_timestamp": wm.state(s)} if wm is not None else {})}
            for s in self.assigned])
        self._checkpointed.append((checkpoint_id, {s: self.positions.get(s) for s in self.readers}))
        return OperatorSnapshot(operator_state=self.state.snapshot())

    def notify_complete(self, checkpoint_id):
        """Hand each open reader the position checkpoint ``checkpoint_id`` (or the newest one
        before it this subtask took) holds for its split: readers that acknowledge upstream
        (a replication slot) do it only for what a completed checkpoint covers."""
        done: dict = {}
        for c, positions in self._checkpointed:
            if c <= checkpoint_id:
                done.update(positions)
        self._checkpointed = [(c, p) for c, p in self._checkpointed if c > checkpoint_id]
        for split, position in done.items():
            if split in self.readers:
                self.readers[split].notify_checkpoint_complete(checkpoint_id, position)

    def notify_abort(self, checkpoint_id):
        self._checkpointed = [(c, p) for c, p in self._checkpointed if c != checkpoint_id]

    def _compact(self) -> None:
        """Continuous sources: finished splits modified longer ago than the source's
        ``retain_seconds`` leave the state; the floor (their newest modification time)
        stands for them, so the seen-set stays bounded."""
        retain = getattr(self.node.payload, "retain_seconds", None)
        if self.monitor_interval is None or retain is None:
            return
        horizon = time.time() - retain
        src: Any = self.node.payload
        old = set()
        for split in self.finished_splits & set(self.assigned):
            try:
                mtime = src.modified_time(split)
            except FileNotFoundError:
                old.add(split)  # removed after it was read
                continue
            if mtime < horizon:
                old.add(split)
                self.floor = max(self.floor, mtime)
        if old:
            self.assigned = [s for s in self.assigned if s not in old]
            self.finished_splits -= old
            for split in old:
                self.positions.pop(split, None)
        self.floor_state.update([] if self.floor == float("-inf") else [self.floor])

    def close(self):
        for r in self.readers.values():
            r.close()


class SinkOperator(Operator):
    """Two-phase commit: pre-commit at the barrier, commit on notify-complete.

    Fenced (the job runs with ``fence_sinks``, a blue-green validation run): transactions are
    pre-committed as usual but never committed; the snapshot records a ``fenced`` marker
    instead of them, so no restore can publish them and an unfenced job refuses to restore
    the snapshot (its source positions are past output that was never published). The job
    master discards what the fenced job staged when it ends."""

    def open(self, restored_operator_state):
        self.fenced = bool(self.ctx.fence_sinks)
        sctx = ConnectorContext(self.ctx.job_id, self.ctx.job_name, self.uid,
                                self.ctx.subtask_index, self.ctx.parallelism, self.ctx.attempt,
                                fenced=self.fenced)
        entries = list(restored_operator_state or [])
        if not self.fenced and any(isinstance(e, dict) and e.get("fenced") for e in entries):
            raise RestoreError(
                f"sink {self.uid!r}: the snapshot was taken by a job with fenced sinks (a "
                "blue-green validation run); its output was never published, so restoring it "
                "unfenced would lose records. Restore the blue job's savepoint instead")
        self.writer = self.node.payload.create_writer(sctx)
        self.vectorized = bool(self.writer.accepts_arrow)
        self.takes_rows = self.vectorized and bool(self.writer.accepts_rows)
        restored = [t for e in entries for t in e["transactions"]]
        self.writer.recover(restored)
        self.pending: list[tuple[int, list]] = []

    def process(self, records):
        if records:
            self.writer.write(records)
        return []

    def snapshot(self, checkpoint_id):
        txns = self.writer.pre_commit(checkpoint_id)
        if self.fenced:  # held: staged, never named in a snapshot, never committed
            if txns:
                self.pending.append((checkpoint_id, list(txns)))
            return OperatorSnapshot(operator_state=[
                {"checkpoint_id": checkpoint_id, "transactions": [], "fenced": True}])
        if txns:
            self.pending.append((checkpoint_id, list(txns)))
        state = [{"checkpoint_id": c, "transactions": t} for c, t in self.pending]
        return OperatorSnapshot(operator_state=state)

    def notify_complete(self, checkpoint_id):
        if self.fenced:  # validated: what the epochs up to it staged is never published
            self._release_fenced(lambda c: c <= checkpoint_id)
            return
        ready = [t for c, ts in self.pending if c <= checkpoint_id for t in ts]
        if ready:
            self.writer.commit(ready)
        self.pending = [(c, ts) for c, ts in self.pending if c > checkpoint_id]

    def _release_fenced(self, done) -> None:
        """A fenced sink discards each epoch's staged transactions once its checkpoint
        completed or aborted (:class:`~...connectors.capabilities.SupportsDiscardHeld`), so
        it holds a bounded number of them (prepared transactions are a server resource:
        ``max_prepared_transactions``)."""
        if not isinstance(self.writer, SupportsDiscardHeld):
            return  # held until the job ends (the job master discards them)
        txns = [t for c, ts in self.pending if done(c) for t in ts]
        if txns:
            self.writer.discard_held(txns)
        self.pending = [(c, ts) for c, ts in self.pending if not done(c)]

    def notify_abort(self, checkpoint_id):
        if self.fenced:
            self._release_fenced(lambda c: c == checkpoint_id)
            return
        txns = [t for c, ts in self.pending if c == checkpoint_id for t in ts]
        if txns and self.writer.abort(txns):  # undone, records carried into the open epoch
            self.pending = [(c, ts) for c, ts in self.pending if c != checkpoint_id]

    def close(self):
        self.writer.close()
