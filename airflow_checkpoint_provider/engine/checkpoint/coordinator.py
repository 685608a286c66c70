"""The checkpoint coordinator: triggers checkpoints, collects acks, completes, subsumes.

It runs in the driver, inside the job master's event loop (one thread: no locks). Time is
passed in (``now``, monotonic seconds) so the trigger rules are tested without sleeping.

Lifecycle (Flink's vocabulary): a trigger creates a :class:`PendingCheckpoint`; when every
task acked it becomes a :class:`CompletedCheckpoint`; a pending checkpoint that is declined
or expires is aborted and counted by the :class:`CheckpointFailureManager`.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..catalog import MetadataStore
from ..catalog.models import CheckpointStatus
from ..config import CheckpointConfig
from ..errors import (
    CheckpointDeclined,
    CheckpointStorageError,
)
from ..fs.storage import (
    METADATA_FILE,
    checkpoint_directory,
    filesystem_for,
    join,
)
from ..protocol import BarrierKind
from ..snapshot.codec import encode_metadata
from ..snapshot.handles import (
    HeapChangelogHandle,
    OperatorState,
    RocksDBHandle,
    SnapshotMetadata,
    SubtaskState,
)
from .db_writer import MetadataUnavailable, MetadataWriter
from .deleter import CheckpointCleaner
from .held import HeldCheckpoints, own_shared_file
from .outcomes import AckResult, CheckpointFailure, CheckpointFailureReason, TaskAck

log = logging.getLogger(__name__)
#: every how many checkpoint ids old rows of the ``checkpoints`` table are pruned
PRUNE_EVERY = 100

CHECKPOINT, SAVEPOINT = BarrierKind.CHECKPOINT, BarrierKind.SAVEPOINT


def record_kind(kind: str) -> str:
    """The ``checkpoints.kind`` column value of a barrier kind."""
    return SAVEPOINT.value if BarrierKind(kind).is_savepoint else CHECKPOINT.value


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    kind: str
    trigger_time: float           # monotonic
    trigger_wall: datetime
    timestamp_ms: int
    location: str
    not_yet_acked: set[tuple[int, int]]
    acks: dict[tuple[int, int], TaskAck] = field(default_factory=dict)
    final: bool = False
    unaligned: bool = False
    #: started aligned, turned unaligned this long after its trigger (aligned timeout)
    switched_after_ms: int | None = None

    def acknowledge(self, task: tuple[int, int], ack: TaskAck) -> AckResult:
        """Record ``task``'s acknowledgement; :attr:`AckResult.LAST` when it was the last
        one awaited."""
        if task in self.acks:
            return AckResult.DUPLICATE
        if task not in self.not_yet_acked:
            return AckResult.NOT_AWAITED
        self.not_yet_acked.discard(task)
        self.acks[task] = ack
        return AckResult.SUCCESS if self.not_yet_acked else AckResult.LAST


@dataclass
class CompletedCheckpoint:
    checkpoint_id: int
    kind: str
    location: str
    state_size: int
    checkpointed_size: int
    duration_ms: int
    claimed: bool = False   # restored with claim mode CLAIM: this job owns (and deletes) it
    #: per-task stats of the acks (what the metadata DB records), for listeners
    task_stats: list | None = None
    #: ``aligned``, ``unaligned`` (from the start) or ``switched`` (aligned timeout)
    alignment: str = "aligned"
    #: a switched checkpoint: ms from its trigger to the switch
    switched_after_ms: int | None = None
    #: the job its ``_metadata`` names (a claimed snapshot's); ``None``: this job. Its files
    #: are deleted, and it is restored on failover, only as that job's (issue 50)
    job_id: str | None = None


#: the adaptive aligned timeout: after this many consecutive checkpoints that had to be
#: switched to unaligned, the next ones start unaligned at once (no timeout wait) ...
SWITCHES_BEFORE_UNALIGNED_START = 3
#: ... for this many checkpoints; then one starts aligned again (a probe: the backpressure
#: may be gone)
UNALIGNED_STARTS = 5


class AdaptiveAlignment:
    """Whether a checkpoint starts aligned when ``aligned_timeout_ms`` is set. A job under
    lasting backpressure switches every checkpoint after the timeout: waiting for it each
    time only delays the checkpoint. After :data:`SWITCHES_BEFORE_UNALIGNED_START` switches
    in a row the next :data:`UNALIGNED_STARTS` checkpoints start unaligned; then one starts
    aligned again, and a checkpoint that completes aligned resets the count."""

    def __init__(self) -> None:
        self.switched_in_a_row = 0
        self.unaligned_starts_left = 0

    def start_unaligned(self) -> bool:
        if self.unaligned_starts_left:
            self.unaligned_starts_left -= 1
            return True
        return False

    def on_completed(self, alignment: str) -> None:
        if alignment == "aligned":
            self.switched_in_a_row = 0
        elif alignment == "switched":
            self.switched_in_a_row += 1
            if self.switched_in_a_row >= SWITCHES_BEFORE_UNALIGNED_START:
                self.switched_in_a_row = 0
                self.unaligned_starts_left = UNALIGNED_STARTS


class CheckpointFailureManager:
    """Counts consecutive checkpoint failures; too many fail the job."""

    def __init__(self, tolerable: int | None) -> None:
        self.tolerable = tolerable
        self.consecutive = 0

    def on_success(self) -> None:
        self.consecutive = 0

    def on_failure(self) -> bool:
        """Return True when the job must fail."""
        self.consecutive += 1
        return self.tolerable is not None and self.consecutive > self.tolerable


class CheckpointCoordinator:
    """Decides when to trigger and turns acks into completed checkpoints.

    :param tasks: every (vertex, subtask) that must ack a checkpoint.
    :param send_trigger: ``(checkpoint_id, timestamp_ms, kind, location, unaligned)`` ->
        inject at the sources (an unaligned one also turns every task's inputs unaligned).
    :param send_unalign: ``(checkpoint_id)`` -> a pending checkpoint turns unaligned (its
        aligned timeout passed).
    :param send_notify: ``(checkpoint_id)`` -> notify every task of completion.
    :param send_abort: ``(checkpoint_id)`` -> tell tasks a checkpoint was aborted.
    :param store: the metadata DB (``MetadataStore``) or ``None``.
    :param hmac_key: the key every ``_metadata`` is signed with (the job master passes
        ``$CKPT_SNAPSHOT_HMAC_KEY`` or the metadata DB's key, see :mod:`.trust`).
    """

    def __init__(self, *, job_id: str, job_name: str, job_dir: str, config: CheckpointConfig,
                 tasks: list[tuple[int, int]], operator_info: dict[str, dict],
                 send_trigger: Callable, send_notify: Callable, send_abort: Callable,
                 send_unalign: Callable = lambda chk: None, store=None, next_checkpoint_id: int = 1, now: float = 0.0,
                 rng: random.Random | None = None, hmac_key: bytes | None = None) -> None:
        self.job_id = job_id
        #: signs every ``_metadata`` (``None``: ``$CKPT_SNAPSHOT_HMAC_KEY``, if set)
        self.hmac_key = hmac_key
        self.job_name = job_name
        self.job_dir = job_dir
        self.config = config
        self.tasks = set(tasks)
        self.operator_info = operator_info
        self.send_trigger = send_trigger
        self.send_notify = send_notify
        self.send_abort = send_abort
        self.send_unalign = send_unalign
        self.store = store
        self.db = MetadataWriter(store)
        #: deletes subsumed/aborted checkpoints in the background; closed at the job's end
        self.cleaner = CheckpointCleaner(job_name)
        self.next_id = next_checkpoint_id
        self.pending: dict[int, PendingCheckpoint] = {}
        self.completed: collections.deque[CompletedCheckpoint] = collections.deque()
        #: subsumed checkpoints whose files a pin keeps, this job's and those of ended jobs
        #: of the name (adopted now, see :mod:`.held`)
        self.holding = HeldCheckpoints(job_id=job_id, job_name=job_name, job_dir=job_dir,
                                       checkpoint_root=config.directory, store=store,
                                       db=self.db, cleaner=self.cleaner)
        if self.holding.adopt():
            self.holding.sweep()
        self.failure_manager = CheckpointFailureManager(config.tolerable_failures)
        #: how many acknowledgements ended each way, and aborts for each reason
        self.ack_results: collections.Counter[AckResult] = collections.Counter()
        self.failure_reasons: collections.Counter[CheckpointFailureReason] = collections.Counter()
        self.adaptive_alignment = AdaptiveAlignment()
        #: checkpoints that started aligned and turned unaligned (aligned timeout)
        self.num_switched = 0
        self.running_tasks: set[tuple[int, int]] = set()
        self.last_end = float("-inf")   # end of the last checkpoint (completed or aborted)
        self.num_completed = 0
        self.num_failed = 0
        self.job_failure: str | None = None
        self.final_completed = False
        #: the final checkpoint of this attempt, once triggered (periodic ones stop then)
        self.final_id: int | None = None
        #: every input ended: the final checkpoint waits for the pending ones, and no
        #: periodic checkpoint starts meanwhile (checkpoints slower than the interval would
        #: otherwise keep one pending forever and the job would never finish)
        self.final_due = False
        #: savepoint requests (ids) waiting for the pending checkpoints to end: no periodic
        #: checkpoint starts meanwhile, so a savepoint is never starved (see
        #: :meth:`savepoint_blocked_by`)
        self.queued_savepoints: set[str] = set()
        # shared files (incremental RocksDB SSTs) registered by completed checkpoints
        self.registered_shared: set[str] = set()
        # called as listener(checkpoint_id, completed_or_None, failure_reason_or_None)
        self.listeners: list[Callable] = []
        rng = rng or random.Random()
        if config.interval_ms is None:
            self.next_periodic = None
        else:
            delay = (config.initial_delay_ms if config.initial_delay_ms is not None
                     else rng.uniform(config.min_pause_ms, config.interval_ms))
            self.next_periodic = now + delay / 1000.0

    # -- triggering -----------------------------------------------------------------------
    def set_tasks_running(self, running: set[tuple[int, int]]) -> None:
        self.running_tasks = set(running)

    def maybe_trigger_periodic(self, now: float) -> int | None:
        if (self.next_periodic is None or self.config.interval_ms is None
                or now < self.next_periodic or self.final_id is not None
                or self.final_due or self.queued_savepoints):
            return None
        if len(self.pending) >= self.config.max_concurrent:
            return None
        if now - self.last_end < self.config.min_pause_ms / 1000.0:
            return None
        self.next_periodic = now + self.config.interval_ms / 1000.0
        try:
            return self.trigger(now, CHECKPOINT)
        except CheckpointDeclined as exc:
            log.debug("Checkpoint trigger for job %s declined: %s", self.job_name, exc)
            return None

    def savepoint_blocked_by(self) -> list[int]:
        """The pending checkpoints a savepoint must wait for (empty: trigger it now).

        A savepoint is triggered only once no checkpoint is pending. A two-phase-commit
        sink prepares each checkpoint's transaction at its barrier and commits it on the
        checkpoint's notification; a savepoint barrier that overtook that notification would
        make the sink's next epoch change rows the prepared transaction still holds (the
        PostgreSQL upsert sink then fails over with ``SinkTransactionConflictError``). The
        wait is bounded: a pending checkpoint completes or is aborted within ``timeout_ms``,
        and while a savepoint waits (:attr:`queued_savepoints`) no periodic checkpoint
        starts."""
        return sorted(self.pending)

    def trigger(self, now: float, kind: str = CHECKPOINT, *, final: bool = False,
                location: str | None = None) -> int:
        """Start a checkpoint now. Raises :class:`CheckpointDeclined` with the reason if the
        job cannot take one."""
        missing = self.tasks - self.running_tasks
        if missing:
            raise CheckpointDeclined(f"{len(missing)} of {len(self.tasks)} tasks are not running")
        chk = self.next_id
        self.next_id += 1
        wall = datetime.now(UTC)
        loc = location or checkpoint_directory(self.job_dir, chk)
        cfg = self.config
        # savepoints are always aligned; with an aligned timeout a checkpoint starts aligned,
        # unless the last ones all had to switch (AdaptiveAlignment)
        unaligned = bool(cfg.unaligned and kind == CHECKPOINT
                         and (not cfg.aligned_timeout_ms
                              or self.adaptive_alignment.start_unaligned()))
        self.pending[chk] = PendingCheckpoint(chk, kind, now, wall, int(wall.timestamp() * 1000),
                                              loc, set(self.tasks), final=final,
                                              unaligned=unaligned)
        try:
            self.db.must(MetadataStore.add_pending_checkpoint, self.job_id, chk, kind=record_kind(kind),
                         trigger_time=wall, location=loc, is_final=final)
        except MetadataUnavailable as exc:
            del self.pending[chk]
            raise CheckpointDeclined(str(exc)) from exc
        log.info("Triggering %s %d for job %s", record_kind(kind).lower(), chk, self.job_name)
        self.send_trigger(chk, self.pending[chk].timestamp_ms, kind, loc, unaligned)
        return chk

    # -- acks and declines ----------------------------------------------------------------
    def receive_ack(self, chk: int, task: tuple[int, int], ack: TaskAck,
                    now: float) -> CompletedCheckpoint | None:
        """Record ``task``'s acknowledgement of checkpoint ``chk``; the completed checkpoint
        when it was the last one awaited (None otherwise, and when completing failed)."""
        p = self.pending.get(chk)
        result = AckResult.UNKNOWN if p is None else p.acknowledge(task, ack)
        self.ack_results[result] += 1
        match result:
            case AckResult.LAST:
                assert p is not None
                return self._complete(p, now)
            case AckResult.SUCCESS:
                return None
            case AckResult.UNKNOWN | AckResult.DUPLICATE | AckResult.NOT_AWAITED:
                log.debug("Ack of checkpoint %d by task %d.%d of job %s dropped: %s", chk,
                          task[0], task[1], self.job_name, result.value)
                return None

    def receive_decline(self, chk: int, task: tuple[int, int], reason: str, now: float) -> None:
        if chk in self.pending:
            self.abort(chk, CheckpointFailure(CheckpointFailureReason.DECLINED,
                                              f"declined by task {task[0]}.{task[1]}: {reason}"),
                       now)

    def check_timeouts(self, now: float) -> None:
        limit = self.config.timeout_ms / 1000.0
        for chk, p in list(self.pending.items()):
            if now - p.trigger_time > limit:
                self.abort(chk, CheckpointFailure(
                    CheckpointFailureReason.EXPIRED,
                    f"expired before completing (timeout {self.config.timeout_ms} ms)"), now)
        align_ms = self.config.aligned_timeout_ms if self.config.unaligned else None
        if align_ms:
            for chk, p in self.pending.items():
                if (not p.unaligned and p.kind == CHECKPOINT
                        and now - p.trigger_time > align_ms / 1000.0):
                    p.unaligned = True
                    p.switched_after_ms = round((now - p.trigger_time) * 1000)
                    self.num_switched += 1
                    log.info("Checkpoint %d of job %s turns unaligned (aligned for over %d ms)",
                             chk, self.job_name, align_ms)
                    self.send_unalign(chk)

    def abort(self, chk: int, failure: CheckpointFailure, now: float) -> None:
        """Abort pending checkpoint ``chk``: its row FAILED with the failure's message, its
        files deleted, the tasks told; counted against ``tolerable_failures`` when its
        reason counts (:attr:`CheckpointFailureReason.counts_as_failure`)."""
        p = self.pending.pop(chk, None)
        if p is None:
            return
        reason = str(failure)
        self.failure_reasons[failure.reason] += 1
        self.last_end = now
        self.num_failed += 1
        log.warning("%s %d of job %s aborted: %s", record_kind(p.kind).capitalize(), chk,
                    self.job_name, reason)
        self.db.write(MetadataStore.fail_checkpoint, self.job_id, chk, reason=reason)
        self.cleaner.remove_tree(p.location, owner=self.job_id)  # never another job's files
        for key in _shared_keys(p) - self.registered_shared:
            self.cleaner.remove_file(join(self.job_dir, key))  # uploaded for it only
        self.send_abort(chk)
        for listener in self.listeners:
            listener(chk, None, reason)
        if (failure.reason.counts_as_failure and p.kind == CHECKPOINT
                and self.failure_manager.on_failure()):
            self.job_failure = (
                f"exceeded the tolerable number of failed checkpoints "
                f"({self.config.tolerable_failures}); last: checkpoint {chk} {reason}"
            )

    def abort_all(self, reason: str, now: float) -> None:
        """On failover: pending checkpoints cannot complete; they do not count as failures.
        The next attempt starts without a final checkpoint, even when this one had completed
        its final checkpoint (a task failed after it): the next attempt takes its own, so its
        sinks commit and its tasks finish."""
        failure = CheckpointFailure(CheckpointFailureReason.JOB_FAILOVER, reason)
        for chk in list(self.pending):
            self.abort(chk, failure, now)
        self.final_id = None
        self.final_completed = False
        self.final_due = False

    def maybe_trigger_final(self, now: float, *, inputs_ended: bool) -> int | None:
        """The final checkpoint (Flink's checkpoint after end of input, which lets sinks
        commit their last records): once ``inputs_ended`` (every task reported end of input,
        and no stop-with-savepoint is under way), with no checkpoint pending, after the
        minimum pause. Retried if it fails; periodic checkpoints stop once it is due."""
        self.final_due = inputs_ended and not self.final_completed
        if (not inputs_ended or self.final_completed
                or (self.final_id is not None and self.final_id in self.pending)):
            return None
        if self.pending or now - self.last_end < self.config.min_pause_ms / 1000.0:
            return None
        try:
            self.final_id = self.trigger(now, final=True)
        except CheckpointDeclined as exc:
            log.debug("final checkpoint not triggered: %s", exc)
            return None
        return self.final_id

    # -- completion -----------------------------------------------------------------------
    def _complete(self, p: PendingCheckpoint, now: float) -> CompletedCheckpoint | None:
        """Turn a fully acked pending checkpoint into a completed one.

        1. merge the task acks into the ``_metadata`` document (operators by uid);
        2. write ``_metadata`` last, atomically: from now on the checkpoint is restorable;
        3. record it COMPLETED in the metadata DB with its statistics;
        4. subsume older pending checkpoints and completed ones beyond the retained count
           (their files are deleted, their rows marked SUBSUMED);
        5. notify every task, so two-phase-commit sinks commit.

        Returns ``None`` (the checkpoint is aborted) when ``_metadata`` cannot be written.
        """
        # 1. merge acks
        doc, state_size, uploaded, task_stats = self._metadata_document(p)
        # 2. _metadata written last; if the storage is unavailable (an S3 outage), the
        #    checkpoint fails like a declined one and the job keeps running
        fs = filesystem_for(p.location)
        try:
            fs.write_bytes(join(p.location, METADATA_FILE),
                           encode_metadata(doc.to_dict(), hmac_key=self.hmac_key), atomic=True)
        except CheckpointStorageError as exc:
            self.abort(p.checkpoint_id, CheckpointFailure(
                CheckpointFailureReason.METADATA_FILE_UNWRITABLE,
                f"cannot write {METADATA_FILE}: {exc}"), now)
            return None
        duration_ms = int((now - p.trigger_time) * 1000)
        # 3. metadata DB (and the shared-state registry: created_by / last_used); a DB
        #    outage fails this checkpoint only
        shared = _shared_keys(p) if p.kind == CHECKPOINT else set()
        try:
            if shared:
                self.db.must(MetadataStore.register_shared_state, self.job_id, p.checkpoint_id, sorted(shared))
            self.registered_shared |= shared
            self.db.must(MetadataStore.complete_checkpoint, self.job_id, p.checkpoint_id,
                         complete_time=datetime.now(UTC), duration_ms=duration_ms,
                         state_size=state_size, checkpointed_size=uploaded, task_stats=task_stats,
                         operator_sizes=operator_state_sizes(doc))
        except MetadataUnavailable as exc:
            self.abort(p.checkpoint_id, CheckpointFailure(
                CheckpointFailureReason.METADATA_DB_UNAVAILABLE,
                f"cannot record the checkpoint: {exc}"), now)
            return None
        del self.pending[p.checkpoint_id]
        alignment = ("switched" if p.switched_after_ms is not None
                     else "unaligned" if p.unaligned else "aligned")
        completed = CompletedCheckpoint(p.checkpoint_id, record_kind(p.kind), p.location,
                                        state_size, uploaded, duration_ms, task_stats=task_stats,
                                        alignment=alignment,
                                        switched_after_ms=p.switched_after_ms)
        if p.kind == CHECKPOINT and self.config.aligned_timeout_ms:
            self.adaptive_alignment.on_completed(alignment)
        self.num_completed += 1
        self.last_end = now
        self.failure_manager.on_success()
        log.info("Completed %s %d for job %s (%s in %d ms%s)", completed.kind.lower(),
                 p.checkpoint_id, self.job_name, _human_bytes(state_size), duration_ms,
                 "" if alignment == "aligned" else
                 f", unaligned after {p.switched_after_ms} ms" if alignment == "switched"
                 else ", unaligned")
        # 4. subsume
        for older in [c for c in self.pending if c < p.checkpoint_id
                      and self.pending[c].kind == CHECKPOINT]:
            self.abort(older, CheckpointFailure(CheckpointFailureReason.SUBSUMED,
                                                f"subsumed by checkpoint {p.checkpoint_id}"), now)
        if p.kind == CHECKPOINT:
            self.add_completed(completed)
        if p.final:
            self.final_completed = True
        # 5. notify
        self.send_notify(p.checkpoint_id)
        for listener in self.listeners:
            listener(p.checkpoint_id, completed, None)
        return completed

    def add_completed(self, completed: CompletedCheckpoint) -> None:
        """Add to the retained checkpoints and subsume the oldest beyond ``retained``.

        A subsumed checkpoint with an unexpired pin (``savepoint_pins``: e.g. a last-state
        hand-over that a new job is about to restore) keeps its files, and the shared files
        it references, until the pin is released or expires: it is *held*. Its row is marked
        SUBSUMED before the pins are read (one ordered queue), and the pinner re-reads the
        status after pinning (:func:`~..lifecycle.savepoints.pin_checkpoint`): either the
        coordinator sees the pin, or the pinner sees SUBSUMED and takes a newer checkpoint.
        What a job holds survives its driver: the next job of the name adopts it
        (:mod:`.held`).
        """
        self.completed.append(completed)
        subsumed = []
        while len(self.completed) > self.config.retained:
            old = self.completed.popleft()
            self.db.write(MetadataStore.set_checkpoint_status, self.job_id, [old.checkpoint_id], CheckpointStatus.SUBSUMED)
            subsumed.append(old)
            log.debug("Subsumed checkpoint %d of job %s", old.checkpoint_id, self.job_name)
        self.holding.sweep(subsumed)  # reads the pins once, after the SUBSUMED writes
        self._discard_unreferenced_shared_state()
        if completed.checkpoint_id % PRUNE_EVERY == 0:  # bound the checkpoints table
            self.db.write(MetadataStore.prune_checkpoint_history, self.job_id, self.config.history)

    def _discard_unreferenced_shared_state(self) -> None:
        """Delete shared files that no retained checkpoint references any more."""
        if self.store is None or not self.registered_shared:
            return
        own = [*(c.checkpoint_id for c in self.completed if not c.claimed),
               *self.holding.own_ids()]
        if not own:
            return
        doomed = self.db.read(MetadataStore.unreferenced_shared_state, self.job_id,
                              min(own)) or []
        for key in doomed:
            # a key read back from the DB is untrusted: only shared/<name> inside this job's
            # directory is ever deleted (a row saying '/abs/path' or '../../x' is dropped)
            path = own_shared_file(self.job_dir, key)
            if path is None:
                log.warning("Ignoring shared-state row %r of job %s: not a file in %s/shared",
                            key, self.job_name, self.job_dir)
                continue
            self.cleaner.remove_file(path)
        if doomed:
            self.db.write(MetadataStore.delete_shared_state, self.job_id, doomed)
            self.registered_shared -= set(doomed)
            log.debug("Deleted %d unreferenced shared files of job %s", len(doomed), self.job_name)

    def _metadata_document(self, p: PendingCheckpoint
                           ) -> tuple[SnapshotMetadata, int, int, list[dict]]:
        """The ``_metadata`` document of a fully acked checkpoint (operators by uid, their
        subtasks by index), its state size, the bytes uploaded for it and the per-task
        statistics the metadata DB records."""
        states: dict[str, dict] = {}
        subtasks: dict[str, list[SubtaskState]] = {}
        state_size = uploaded = 0
        task_stats = []
        for (vid, sub), ack in sorted(p.acks.items()):
            m = ack.metrics
            state_size += m.state_size
            uploaded += m.checkpointed_size
            task_stats.append({"vertex": vid, "subtask": sub, **m.reported})
            for uid, entry in ack.operators.items():
                states.setdefault(uid, {}).update(entry.states)
                subtasks.setdefault(uid, []).append(SubtaskState(
                    index=sub, key_group_range=entry.key_group_range, keyed=entry.keyed,
                    operator_state=entry.operator_state, channel_state=entry.channel_state,
                    finished=m.finished))  # past its end of input (FLIP-147)
        operators = {}
        for uid, subs in subtasks.items():
            info = self.operator_info[uid]
            operators[uid] = OperatorState(
                uid=uid, kind=info["kind"], parallelism=info["parallelism"],
                max_parallelism=info["max_parallelism"], states=states[uid],
                subtasks=tuple(sorted(subs, key=lambda s: s.index)))
        doc = SnapshotMetadata(job_id=self.job_id, job_name=self.job_name,
                               checkpoint_id=p.checkpoint_id, kind=record_kind(p.kind),
                               timestamp_ms=p.timestamp_ms, operators=operators)
        return doc, state_size, uploaded, task_stats


def _shared_keys(p: PendingCheckpoint) -> set[str]:
    """Shared file keys (``shared/<name>``, relative to the job directory) referenced by a
    checkpoint's acks (validated when the acks were decoded: nothing outside
    ``shared/``)."""
    keys = set()
    for ack in p.acks.values():
        for entry in ack.operators.values():
            if isinstance(entry.keyed, RocksDBHandle | HeapChangelogHandle):
                for f in entry.keyed.files:
                    if f.shared:
                        keys.add(f.shared)
    return keys


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def operator_state_sizes(doc: SnapshotMetadata) -> list[dict]:
    """Keyed state bytes per operator uid of a ``_metadata`` document (its handles' file
    sizes; a RocksDB handle's files include the shared SSTs it references, an incremental heap
    handle's its chain)."""
    out = []
    for uid, op in sorted(doc.operators.items()):
        handles = [s.keyed for s in op.subtasks if s.keyed is not None]
        if not handles:
            continue
        size = sum(sum(f.size for f in h.files) if isinstance(h, RocksDBHandle | HeapChangelogHandle)
                   else h.size for h in handles)
        out.append({"operator_uid": uid, "states": ",".join(sorted(op.states)),
                    "state_bytes": size, "subtasks": len(handles)})
    return out
