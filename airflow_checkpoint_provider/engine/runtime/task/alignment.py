"""Barrier alignment (Chandy-Lamport asynchronous barrier snapshots, as in Flink).

:class:`BarrierHandler` is pure decision logic, driven by the task thread, so it is tested
without sockets. It answers each in-band event with a list of actions (an
:data:`AlignmentAction`, matched with ``match`` by the task's checkpointing):

* :class:`Block`: hold the channel back (its reader stops reading after the barrier);
* :class:`Release`: let held-back channels continue;
* :class:`Snapshot`: every open channel delivered the barrier: snapshot now and forward the
  barrier;
* :class:`Cancel`: the checkpoint is abandoned at this task: forward a cancel marker
  downstream (and decline it when ``reason`` is not ``None``);
* :class:`SnapshotUnaligned`: snapshot now, forward the barrier as unaligned and start
  capturing the in-flight records (see :mod:`.mailbox`);
* :class:`Captured`: every open channel delivered barrier N: the captured records are
  complete, write them as channel state and ack;
* :class:`DropCapture`: the capture of an unaligned checkpoint ends without completing (and
  the checkpoint is declined when ``reason`` is not ``None``).

Exactly-once: a channel that delivered barrier N is blocked until barrier N arrived on every
open channel (closed channels count as arrived). At-least-once: nothing is blocked; the
snapshot is taken when the last barrier N arrives (records of fast channels may then be
replayed after a restore, hence "at least once").

Unaligned: the first barrier N (taken ahead of the queued records, :meth:`on_unaligned_barrier`)
snapshots at once; nothing is blocked; the checkpoint's channel state is complete when
barrier N arrived on every open channel. A checkpoint that is being aligned turns unaligned
on :meth:`on_unalign` (its aligned timeout passed): blocked channels are released, the
snapshot is taken then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Block:
    """Hold ``channel`` back: its reader stops after the barrier it delivered."""

    channel: int


@dataclass(frozen=True, slots=True)
class Release:
    """Let the held-back ``channels`` continue (their held items go first)."""

    channels: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every open channel delivered barrier ``checkpoint_id``: snapshot and forward it."""

    checkpoint_id: int
    alignment_ms: float


@dataclass(frozen=True, slots=True)
class SnapshotUnaligned:
    """Snapshot ``checkpoint_id`` now, forward its barrier as unaligned, start capturing."""

    checkpoint_id: int
    alignment_ms: float


@dataclass(frozen=True, slots=True)
class Captured:
    """The in-flight records of unaligned checkpoint ``checkpoint_id`` are all captured."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class DropCapture:
    """The capture of ``checkpoint_id`` ends incomplete; declined when ``reason`` is set."""

    checkpoint_id: int
    reason: str | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """``checkpoint_id`` is abandoned here: a cancel marker goes downstream; declined when
    ``reason`` is set."""

    checkpoint_id: int
    reason: str | None


AlignmentAction = Block | Release | Snapshot | SnapshotUnaligned | Captured | DropCapture | Cancel


class BarrierHandler:
    def __init__(self, num_channels: int, exactly_once: bool = True) -> None:
        self.open_channels: set[int] = set(range(num_channels))
        self.exactly_once = exactly_once
        self.current: int = 0          # checkpoint being aligned, 0 = none
        self.arrived: set[int] = set()
        self.blocked: set[int] = set()
        self.last_done: int = 0        # highest checkpoint completed or abandoned here
        self._align_start = 0.0
        self.capturing: int = 0        # unaligned checkpoint whose channel state is open
        self.captured_from: set[int] = set()

    def _reset(self) -> list[AlignmentAction]:
        actions: list[AlignmentAction] = []
        if self.blocked:
            actions.append(Release(tuple(sorted(self.blocked))))
        self.blocked = set()
        self.arrived = set()
        self.current = 0
        return actions

    def _complete_if_aligned(self) -> list[AlignmentAction]:
        if self.current and self.arrived >= self.open_channels:
            chk = self.current
            alignment_ms = (time.monotonic() - self._align_start) * 1000.0
            self.last_done = chk
            return [Snapshot(chk, alignment_ms), *self._reset()]
        return []

    def on_barrier(self, channel: int, checkpoint_id: int) -> list[AlignmentAction]:
        if checkpoint_id <= self.last_done:
            return [Release((channel,))]  # a late barrier of an abandoned checkpoint
        actions = self._arrive(channel, checkpoint_id)
        if self.exactly_once:
            self.blocked.add(channel)
            actions.append(Block(channel))
        else:
            actions.append(Release((channel,)))
        return actions + self._complete_if_aligned()

    def on_cancel(self, channel: int, checkpoint_id: int) -> list[AlignmentAction]:
        if self.capturing and checkpoint_id >= self.capturing:
            # declined upstream: the coordinator aborts it
            self.last_done = max(self.last_done, checkpoint_id)
            return [DropCapture(self._end_capture(), None)]
        if checkpoint_id <= self.last_done:
            return []
        actions: list[AlignmentAction] = []
        if self.current and self.current < checkpoint_id:
            old = self.current
            actions.append(Cancel(old, None))
        actions += self._reset()
        self.last_done = checkpoint_id
        actions.append(Cancel(checkpoint_id, None))
        return actions

    def on_channel_closed(self, channel: int) -> list[AlignmentAction]:
        self.open_channels.discard(channel)
        self.blocked.discard(channel)
        return self._complete_if_aligned() + self._complete_capture()

    # -- unaligned -------------------------------------------------------------------------
    def on_unaligned_barrier(self, channel: int, checkpoint_id: int) -> list[AlignmentAction]:
        """Barrier ``checkpoint_id`` overtook the records queued on ``channel``."""
        if checkpoint_id == self.capturing:
            self.captured_from.add(channel)
            return self._complete_capture()
        if checkpoint_id <= self.last_done:
            return []  # of a checkpoint abandoned here
        return self._arrive(channel, checkpoint_id) + self._start_capture()

    def _arrive(self, channel: int, checkpoint_id: int) -> list[AlignmentAction]:
        """Barrier ``checkpoint_id`` (newer than ``last_done``) arrived on ``channel``: an
        open capture or alignment of an older checkpoint is abandoned, this one starts if it
        had not, and the channel counts as arrived."""
        actions: list[AlignmentAction] = self._drop_capture(checkpoint_id)
        if self.current and checkpoint_id > self.current:
            # A newer barrier overtook an alignment that can no longer finish.
            old = self.current
            self.last_done = old
            actions += self._reset()
            actions.append(Cancel(old, f"checkpoint {old} subsumed by barrier {checkpoint_id}"))
        if not self.current:
            self.current = checkpoint_id
            self._align_start = time.monotonic()
        self.arrived.add(channel)
        return actions

    def on_unalign(self, checkpoint_id: int) -> list[AlignmentAction]:
        """Checkpoint ``checkpoint_id`` turned unaligned while this task may be aligning it."""
        if self.current != checkpoint_id:
            return []  # not started here yet (its barriers will overtake) or already done
        return self._start_capture()

    def _start_capture(self) -> list[AlignmentAction]:
        chk = self.current
        alignment_ms = (time.monotonic() - self._align_start) * 1000.0
        self.capturing, self.captured_from = chk, set(self.arrived)
        self.last_done = chk
        return [SnapshotUnaligned(chk, alignment_ms), *self._reset(), *self._complete_capture()]

    def _complete_capture(self) -> list[AlignmentAction]:
        if self.capturing and self.captured_from >= self.open_channels:
            return [Captured(self._end_capture())]
        return []

    def _end_capture(self) -> int:
        """Close the open capture; its checkpoint id."""
        chk, self.capturing, self.captured_from = self.capturing, 0, set()
        return chk

    def _drop_capture(self, newer: int) -> list[AlignmentAction]:
        """A newer barrier or a cancel marker: the open capture can no longer complete."""
        if not self.capturing or newer <= self.capturing:
            return []
        chk = self._end_capture()
        return [DropCapture(chk, f"checkpoint {chk} abandoned before its in-flight records "
                                 "were all captured")]

    def on_abort(self, checkpoint_id: int) -> list[AlignmentAction]:
        """The coordinator aborted the checkpoint: an open capture or alignment for it ends,
        and its barriers arriving later are ignored (they would start one that can never
        complete: some inputs may never deliver them)."""
        actions: list[AlignmentAction] = []
        if self.capturing and self.capturing <= checkpoint_id:
            actions.append(DropCapture(self._end_capture(), None))
        if self.current and self.current <= checkpoint_id:
            actions += self._reset()
        self.last_done = max(self.last_done, checkpoint_id)
        return actions
