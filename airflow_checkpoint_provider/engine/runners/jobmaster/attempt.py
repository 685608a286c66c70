"""One attempt of a job, driven by the job master: launch the slots, answer their messages,
run the coordinator's timers, end with an :class:`AttemptOutcome`.

Messages from slots (typed, :mod:`...protocol.messages`) are dispatched through one table
(:attr:`AttemptRun.handlers`, message class -> handler); each handler returns an outcome when the message ends the attempt, else
``None``. The per-tick work (timeouts, control requests, periodic and final checkpoints,
launcher health, heartbeat) is :meth:`AttemptRun.tick`.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ...catalog import MetadataStore
from ...catalog.models import JobStatus
from ...checkpoint.coordinator import CheckpointCoordinator
from ...checkpoint.outcomes import TaskAck
from ...errors import CorruptCheckpointError, EngineError, SparkProcessLostError
from ...plan.graph import ExecutionGraph
from ...plan.job import JobConfig
from ...protocol import messages as M
from .control_plane import ControlPlane
from .progress import ProgressReporter
from .slot_events import SlotEvent, SlotInvalid, SlotLost, SlotMessage

if TYPE_CHECKING:
    from .promote import Promoter

log = logging.getLogger(__name__)

#: how often the job row's heartbeat is written
HEARTBEAT_SECONDS = 1.0
#: an attempt whose slots are not all running after this long fails over
STARTUP_TIMEOUT_SECONDS = 120.0


#: how often a PROMOTE whose snapshot's job is still ending is checked again
PROMOTE_RETRY_SECONDS = 0.1
#: the promoted attempt's first checkpoint comes this long after it runs (a two-phase-commit
#: sink publishes the promoted job's first output with it), not one interval later
PROMOTED_FIRST_CHECKPOINT_SECONDS = 0.2
#: how long a PROMOTE waits for the recycled slots to register as the next attempt (their
#: fenced tasks ended) before it stops them and starts new ones instead
RECYCLE_WAIT_SECONDS = 20.0

#: the remote traceback kept in a failure reason: its last lines (the frames that matter)
TRACEBACK_LINES = 80


@dataclass
class AttemptOutcome:
    status: str  # FINISHED, STOPPED, CANCELED, FAILED
    #: one line: what failed, where (operator, uid, subtask, phase) and the exception
    failure: str | None = None
    #: a failure no restart can fix (e.g. the restored state does not fit): skip restarts
    fatal: bool = False
    #: the remote traceback of a task failure (``Remote traceback (...):`` and its lines)
    detail: str | None = None
    #: a task failure's (operator uid, phase, exception type and message): what
    #: :class:`.failover.RepeatedFailureGuard` compares
    signature: tuple[str, str, str] | None = None
    #: the typed error a FAILED job raises (default JobFailedError)
    error: type[Exception] | None = None
    #: the attempt stopped for a checked PROMOTE (:class:`.promote.Promotion`): the attempt
    #: loop restores its snapshot next, in the same application
    promotion: Any = None
    #: the number of the attempt that runs next when not the next one: slots told to
    #: ``recycle`` that did not all come back may still send as the next attempt
    next_attempt: int | None = None

    @property
    def full_failure(self) -> str | None:
        """The failure reason the metadata DB keeps: the line, then the remote traceback."""
        if self.failure is None or not self.detail:
            return self.failure
        return f"{self.failure}\n{self.detail}"


def describe_task_failure(msg: M.TaskFailed) -> tuple[str, str | None]:
    """``(summary line, remote traceback section)`` of a task's failure message::

        task 3.1 failed in phase restore of process 'winning-bids' (WinningBid),
        uid 'winning-bids', subtask 2/2, slot 1: TypeError: unhashable type: 'list'
    """
    where = ""
    if msg.operator or msg.phase:
        n = f"/{msg.parallelism}" if msg.parallelism else ""
        where = (f" in phase {msg.phase or '?'} of {msg.operator or '?'}, uid {msg.uid!r}, "
                 f"subtask {msg.subtask + 1}{n}, slot {msg.slot}")
    summary = f"task {msg.vertex}.{msg.subtask} failed{where}: {msg.error}"
    lines = msg.traceback.rstrip().splitlines()
    if not lines:
        return summary, None
    if len(lines) > TRACEBACK_LINES + 1:  # the first line is kept too
        lines = [lines[0], f"  ... ({len(lines) - 1 - TRACEBACK_LINES} lines left out)",
                 *lines[-TRACEBACK_LINES:]]
    return summary, (f"Remote traceback (task {msg.vertex}.{msg.subtask}, slot {msg.slot}):\n"
                     + "\n".join(lines))


Handler = Callable[[Any, Any, float], "AttemptOutcome | None"]


class AttemptHost(Protocol):
    """What an attempt needs from the job master that runs it (:class:`.master.JobMaster`
    is the one implementation). A protocol rather than an import: the job master imports
    this module, never the other way round."""

    job_id: str
    config: JobConfig
    graph: ExecutionGraph
    coordinator: CheckpointCoordinator
    control: ControlPlane
    launcher: Any  # a .master.Launcher (start, poll, stop, recycle)
    server: Any
    secret: bytes
    progress: ProgressReporter | None
    conns: dict[int, Any]
    task_counts: dict
    task_watermarks: dict
    task_late: dict
    task_counters: dict
    progress_watch: Any
    startup_seconds: list[float]
    peak_rss_mb: dict[int, float]
    #: seconds the last ended attempt took to stop (its launcher.stop), for the next one's phases
    stop_seconds: float
    #: a PROMOTE recycles the running slot processes (:meth:`AttemptRun.recycle`)
    warm_slots: bool

    def _broadcast(self, msg: M.Message, slots: Any = None) -> None: ...

    def _payload(self, attempt: int, slot: int, assignments: dict) -> bytes: ...

    def _on_task_counts(self, *args: Any, **kwargs: Any) -> Any: ...

    def watch_progress(self, now: float, ended: Any = frozenset()) -> None: ...

    def discard_orphaned_staging(self) -> None: ...

    promoter: Promoter


class AttemptRun:
    """The message loop of attempt ``attempt`` of ``master``'s job."""

    def __init__(self, master: AttemptHost, attempt: int, assignments: dict) -> None:
        self.master, self.attempt, self.assignments = master, attempt, assignments
        self.coord = master.coordinator
        self.control = master.control
        self.num_slots = master.graph.num_slots
        self.all_tasks = set(master.graph.tasks())
        self.addresses: dict[int, list] = {}
        self.placement: dict[int, dict] = {}  # slot -> where it runs (job_attempts.placement)
        self.running: set[int] = set()
        self.eoi: set[tuple[int, int]] = set()
        self.finished_slots: set[int] = set()
        self.finished_tasks: set[tuple[int, int]] = set()
        self.finish_sent = False
        self.started = 0.0
        #: seconds launcher.start took (a Spark launcher waits for the previous stage's cores)
        self.launch_seconds = 0.0
        #: slot -> seconds from the launch to its registration (process start on a cluster)
        self.registered_after: dict[int, float] = {}
        self.last_heartbeat = 0.0
        self.promote_next = 0.0  # when a PROMOTE that must wait is checked again
        self.recycle_sent = False  # a PROMOTE told the slots to recycle
        self.handlers: dict[type[M.FromSlot], Handler] = {
            M.Register: self.on_register,
            M.Address: self.on_address,
            M.Running: self.on_running,
            M.Ack: self.on_ack,
            M.Decline: self.on_decline,
            M.TaskMetrics: self.on_metrics,
            M.EndOfInput: self.on_end_of_input,
            M.TaskFinished: self.on_task_finished,
            M.TaskFailed: self.on_task_failed,
            M.SlotFinished: self.on_slot_finished,
        }

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> AttemptOutcome:
        m = self.master
        m.conns = {}
        self.coord.set_tasks_running(set())
        m.task_counts = {}  # counters restart with the attempt's tasks
        m.task_watermarks = {}
        m.task_late = {}
        m.task_counters = {}
        if m.progress_watch is not None:
            m.progress_watch.reset(time.monotonic())
        launched = time.monotonic()
        try:
            m.launcher.start(self.attempt, m.server.address, self.num_slots, secret=m.secret)
        except EngineError as exc:
            m.launcher.stop()
            # the engine the slots run on is gone (a dead Spark driver JVM): no restart helps
            lost = isinstance(exc, SparkProcessLostError)
            return AttemptOutcome(JobStatus.FAILED,
                                  f"cannot start the job's slots: {type(exc).__name__}: {exc}"
                                  if lost else f"cannot start the job's slots: {exc}",
                                  fatal=lost, error=SparkProcessLostError if lost else None)
        self.started = time.monotonic()
        self.launch_seconds = round(self.started - launched, 3)
        events = m.server.events
        while True:
            event: SlotEvent | None
            try:
                event = events.get(timeout=0.02)
            except queue.Empty:
                event = None
            now = time.monotonic()
            outcome = None if event is None else self.on_event(event, now)
            if outcome is None:
                outcome = self.tick(now)
            if outcome is not None:
                return outcome

    def on_event(self, event: SlotEvent, now: float) -> AttemptOutcome | None:
        """Dispatch one event of the coordinator server: a lost or invalid connection, or a
        slot's message to its handler (a message of an older attempt is dropped)."""
        match event:
            case SlotLost(conn):
                return self.on_lost(conn)
            case SlotInvalid(conn, reason):
                return self.on_invalid(conn, reason)
            case SlotMessage(conn, M.FromSlot() as msg) if msg.attempt == self.attempt:
                handler = self.handlers.get(type(msg))
                if handler is None:
                    log.warning("Ignoring a %r message from a slot of job %s", msg.TYPE,
                                self.master.job_id)
                    return None
                return handler(conn, msg, now)
        return None

    def fail(self, reason: str) -> AttemptOutcome:
        """Abort in-flight checkpoints, stop the slots, drop their connections."""
        m = self.master
        self.coord.abort_all(f"job failover: {reason}", time.monotonic())
        self.coord.set_tasks_running(set())
        t0 = time.monotonic()
        m.launcher.stop()
        m.stop_seconds = round(time.monotonic() - t0, 3)
        for c in m.conns.values():
            c.close()
        m.conns = {}
        _drain(m.server.events)
        return AttemptOutcome(JobStatus.FAILED, reason)

    # -- message handlers --------------------------------------------------------------------

    def on_lost(self, conn: Any) -> AttemptOutcome | None:
        slot = next((s for s, c in self.master.conns.items() if c is conn), None)
        if slot is not None and slot not in self.finished_slots:
            # a dead process closes its connection first: give the launcher a moment to see
            # the exit, so the reason carries the exit code or signal
            deadline = time.monotonic() + 1.0
            problem = self.master.launcher.poll()
            while problem is None and time.monotonic() < deadline:
                time.sleep(0.05)
                problem = self.master.launcher.poll()
            return self.fail(f"slot {slot} lost its connection to the coordinator"
                             + (f" ({problem})" if problem else ""))
        return None

    def on_invalid(self, conn: Any, error: str) -> AttemptOutcome | None:
        """A peer that passed authentication sent a malformed message: a bug or a slot of
        another version of this package."""
        slot = next((s for s, c in self.master.conns.items() if c is conn), None)
        return self.fail(f"slot {slot if slot is not None else '?'} sent an invalid message: "
                         f"{error}")

    def on_register(self, conn: Any, msg: M.Register, now: float) -> AttemptOutcome | None:
        slot = msg.slot
        self.master.conns[slot] = conn
        if msg.version != M.PROTOCOL_VERSION:
            outcome = self.fail(
                f"slot {slot} on {msg.host} speaks protocol version {msg.version}, this driver "
                f"{M.PROTOCOL_VERSION}: the executors run another version of "
                "airflow-checkpoint-provider (ship the code with ship_code=True, or install "
                "the same version on every worker)")
            outcome.fatal = True
            return outcome
        self.placement[slot] = {"slot": slot, "host": msg.host, "pid": msg.pid, **msg.placement}
        self.registered_after[slot] = round(now - self.started, 3)
        conn.send(M.JobDescription(payload=self.master._payload(self.attempt, slot,
                                                                self.assignments)))
        return None

    def on_address(self, conn: Any, msg: M.Address, now: float) -> None:
        self.addresses[msg.slot] = msg.address
        if len(self.addresses) == self.num_slots:
            self.master._broadcast(M.Peers(peers={str(k): v for k, v in self.addresses.items()}))

    def on_running(self, conn: Any, msg: M.Running, now: float) -> None:
        m = self.master
        self.running.add(msg.slot)
        if msg.slot in self.placement:  # where the start-up went (launch, slot's own steps)
            self.placement[msg.slot]["phases"] = {
                "stop_previous": m.stop_seconds, "launch": self.launch_seconds,
                "registered": self.registered_after.get(msg.slot),
                **(msg.phases or {}), "running": round(now - self.started, 3)}
        if len(self.running) < self.num_slots:
            return
        self.coord.set_tasks_running(self.all_tasks)
        self.coord.db.write(MetadataStore.set_attempt_placement, m.job_id, self.attempt,
                            [self.placement[s] for s in sorted(self.placement)])
        self.coord.db.write(MetadataStore.set_job_status, m.job_id, JobStatus.RUNNING)
        if m.progress:
            m.progress.update(status=JobStatus.RUNNING, restarts=self.attempt)
        log.info("Job %s (%s) attempt %d is running (%.2f s to start, %.2f s to launch; "
                 "per slot: %s)", m.config.name, m.job_id, self.attempt, now - self.started,
                 self.launch_seconds, {s: p.get("phases") for s, p in
                                       sorted(self.placement.items())})
        if m.promoter.request is not None and self.coord.next_periodic is not None:
            # the promoted job's first output commits with its first checkpoint: take it
            # as soon as the restored tasks have processed a little
            self.coord.next_periodic = min(self.coord.next_periodic,
                                           now + PROMOTED_FIRST_CHECKPOINT_SECONDS)
        m.promoter.finish(self.attempt)
        if self.attempt == 0 or self.attempt == m.promoter.attempt:
            try:
                m.discard_orphaned_staging()
            except Exception as exc:  # noqa: BLE001 - a clean-up must not fail the job
                log.warning("Could not remove staged files left by the restored job: %s", exc)
        m.startup_seconds.append(round(now - self.started, 3))

    def on_ack(self, conn: Any, msg: M.Ack, now: float) -> None:
        # the wire's mappings become the coordinator's typed ack here; a malformed one (a
        # handle naming a path outside its directory, a negative size) declines its
        # checkpoint like a failed snapshot
        pending = self.coord.pending.get(msg.checkpoint_id)
        try:
            ack = TaskAck.from_wire(msg.operators, msg.metrics, location=(
                pending.location if pending else f"checkpoint {msg.checkpoint_id}"))
        except CorruptCheckpointError as exc:
            self.coord.receive_decline(msg.checkpoint_id, msg.task,
                                       f"malformed acknowledgement: {exc}", now)
            return
        self.coord.receive_ack(msg.checkpoint_id, msg.task, ack, now)
        watch = self.master.progress_watch
        if watch is not None:  # the counts at the barrier
            watch.on_ack(msg.task, now)
            if msg.metrics:
                watch.on_counts(msg.task, ack.metrics.records, ack.metrics.watermark)

    def on_decline(self, conn: Any, msg: M.Decline, now: float) -> None:
        self.coord.receive_decline(msg.checkpoint_id, msg.task, msg.reason, now)

    def on_metrics(self, conn: Any, msg: M.TaskMetrics, now: float) -> None:
        self.master._on_task_counts(msg.task, msg.counts, msg.watermark, msg.late,
                                    msg.counters)
        if self.master.progress_watch is not None:
            self.master.progress_watch.on_counts(msg.task, msg.counts, msg.watermark)

    def on_end_of_input(self, conn: Any, msg: M.EndOfInput, now: float) -> None:
        self.eoi.add(msg.task)

    def on_task_finished(self, conn: Any, msg: M.TaskFinished, now: float) -> None:
        """A task ended its work (after the final checkpoint was committed)."""
        self.finished_tasks.add(msg.task)
        log.debug("Task %s.%s of job %s finished", msg.vertex, msg.subtask, self.master.job_id)

    def on_task_failed(self, conn: Any, msg: M.TaskFailed, now: float) -> AttemptOutcome:
        summary, detail = describe_task_failure(msg)
        log.error("Job %s (%s) attempt %d: %s%s", self.master.config.name, self.master.job_id,
                  self.attempt, summary, f"\n{detail}" if detail else "")
        outcome = self.fail(summary)
        outcome.fatal = msg.fatal
        outcome.detail = detail
        if msg.uid or msg.phase:
            outcome.signature = (msg.uid, msg.phase, msg.error)
        return outcome

    def on_slot_finished(self, conn: Any, msg: M.SlotFinished, now: float) -> AttemptOutcome | None:
        self.finished_slots.add(msg.slot)
        if msg.peak_rss_mb is not None:
            peaks = self.master.peak_rss_mb
            peaks[msg.slot] = max(peaks.get(msg.slot, 0.0), msg.peak_rss_mb)
        if len(self.finished_slots) == self.num_slots:
            return AttemptOutcome(JobStatus.STOPPED if self.control.stop_completed else JobStatus.FINISHED)
        return None

    def promote(self, req: Any, now: float) -> AttemptOutcome | None:
        """A claimed PROMOTE request: refused (the request FAILED, the job runs on as it
        was), not yet (asked again in ``PROMOTE_RETRY_SECONDS``), or this attempt stops and
        the attempt loop restores the snapshot in place."""
        m, control = self.master, self.control
        control.promote_request = None
        try:
            promotion = m.promoter.check(req)
            if promotion is None:
                control.promote_request = req
                self.promote_next = now + PROMOTE_RETRY_SECONDS
                return None
        except Exception as exc:  # noqa: BLE001 - any refusal leaves the job running
            error = f"PROMOTE refused: {type(exc).__name__}: {exc}"
            log.warning("Job %s (%s): %s", m.config.name, m.job_id, error)
            control.fail_request(req.request_id, error)
            return None
        reason = f"restoring {promotion.snapshot.directory} in place (PROMOTE)"
        self.recycle_sent = False
        outcome = self.recycle(reason)
        if outcome is None:
            outcome = self.fail(reason)
            if self.recycle_sent:  # a late registration of a recycled slot is ignored
                outcome.next_attempt = self.attempt + 2
        outcome.promotion = promotion
        return outcome

    def recycle(self, reason: str) -> AttemptOutcome | None:
        """End this attempt and keep its slot processes warm for the next one (a PROMOTE
        needs no new placement): every slot is told to ``recycle``, ends its tasks and
        registers again as the next attempt in the same process. Returns once every slot
        has (their registrations wait in the event queue for the next attempt, whose
        launcher start adopts the running slots), so nothing of this attempt runs when
        the promotion discards what it staged; ``None`` when the launcher cannot keep its
        slots or a slot did not come back within ``RECYCLE_WAIT_SECONDS`` (it is then
        stopped as on a failover)."""
        m = self.master
        if not m.warm_slots:
            return None
        t0 = time.monotonic()
        nxt = self.attempt + 1
        self.coord.abort_all(f"job failover: {reason}", t0)
        self.coord.set_tasks_running(set())
        events = m.server.events
        _drain(events)  # this attempt's messages: nothing reads them any more
        self.recycle_sent = True
        try:
            for c in m.conns.values():
                c.send(M.Recycle(attempt=nxt))
        except OSError as exc:
            log.warning("Job %s (%s): cannot recycle the slots (%s); starting new ones",
                        m.config.name, m.job_id, exc)
            return None
        # the slots close these once their tasks ended (a task's last messages, of this
        # attempt, are ignored): closed here only after every slot registered again
        old, m.conns = list(m.conns.values()), {}
        held: list[SlotMessage] = []
        registered: set[int] = set()
        problem = None
        while len(registered) < self.num_slots:
            problem = m.launcher.poll()
            if problem is None and time.monotonic() - t0 > RECYCLE_WAIT_SECONDS:
                problem = (f"only {len(registered)} of {self.num_slots} slots registered "
                           f"within {RECYCLE_WAIT_SECONDS:.0f} s")
            if problem is not None:
                break
            try:
                event = events.get(timeout=0.02)
            except queue.Empty:
                continue
            match event:
                case SlotMessage(_, M.Register() as msg) if msg.attempt == nxt:
                    held.append(event)
                    registered.add(msg.slot)
                case SlotLost(conn) | SlotInvalid(conn) if any(e.conn is conn for e in held):
                    ended = "lost" if isinstance(event, SlotLost) else "invalid"
                    problem = f"a recycled slot's connection ended ({ended})"
                    break
        if problem is not None:
            log.warning("Job %s (%s): recycling the slots for attempt %d failed (%s); "
                        "starting new ones", m.config.name, m.job_id, nxt, problem)
            for conn in (*old, *(e.conn for e in held)):
                conn.close()
            return None
        for c in old:
            c.close()
        m.launcher.recycle(nxt)
        for event in held:  # the next attempt answers them (after the promotion applied)
            events.put(event)
        m.stop_seconds = round(time.monotonic() - t0, 3)
        log.info("Job %s (%s): attempt %d ended, its %d slots host attempt %d (%.2f s)",
                 m.config.name, m.job_id, self.attempt, self.num_slots, nxt, m.stop_seconds)
        return AttemptOutcome(JobStatus.FAILED, reason)

    # -- timers --------------------------------------------------------------------------------

    def tick(self, now: float) -> AttemptOutcome | None:
        """Everything that happens on time rather than on a message, in this order:
        1. checkpoint timeouts and the failure manager's verdict;
        2. control requests (savepoint, stop, cancel) and periodic checkpoints;
        3. the final checkpoint once every task reached the end of its input, and ``finish``
           after a stop or the final checkpoint completed;
        4. slot health (the launcher, the start-up deadline);
        5. the job row's heartbeat;
        6. the progress watchdog's verdict (with the heartbeat)."""
        coord, control, m = self.coord, self.control, self.master
        # 1. timeouts, too many failed checkpoints
        coord.check_timeouts(now)
        if coord.job_failure:
            reason, coord.job_failure = coord.job_failure, None
            return self.fail(reason)
        # 2. control requests, periodic checkpoints
        control.poll(now, len(self.running) == self.num_slots)
        if not control.has_queued and control.stop_checkpoint is None:
            # after a stop savepoint was triggered nothing more is checkpointed: the job
            # ends with it (or resumes periodic checkpoints if it fails)
            coord.maybe_trigger_periodic(now)
        if control.cancel_request:
            self.fail("cancelled on request")
            control.finish_cancel()
            return AttemptOutcome(JobStatus.CANCELED)
        if control.promote_request is not None and now >= self.promote_next:
            promoted = self.promote(control.promote_request, now)
            if promoted is not None:
                return promoted
        # 3. the end: final checkpoint, finish
        if control.stop_completed and not self.finish_sent:
            m._broadcast(M.Finish())
            self.finish_sent = True
        coord.maybe_trigger_final(now, inputs_ended=self.eoi == self.all_tasks
                                  and control.stop_checkpoint is None)
        if coord.final_completed and not self.finish_sent:
            m._broadcast(M.Finish())
            self.finish_sent = True
        # 4. slot health
        problem = m.launcher.poll()
        if problem and len(self.finished_slots) < self.num_slots:
            return self.fail(problem)
        if len(self.running) < self.num_slots and now - self.started > STARTUP_TIMEOUT_SECONDS:
            return self.fail(f"only {len(self.running)} of {self.num_slots} slots started "
                             f"within {STARTUP_TIMEOUT_SECONDS:.0f} s")
        # 5. heartbeat
        # (off this loop: at most one heartbeat is in flight, run after the queued writes;
        # a verdict that comes late is read at a later tick)
        if now - self.last_heartbeat >= HEARTBEAT_SECONDS:
            self.last_heartbeat = now
            m.watch_progress(now, self.eoi | self.finished_tasks)  # 6. the progress watchdog
            if coord.db.read(MetadataStore.heartbeat, m.job_id) == JobStatus.LOST:
                # declared dead while the DB was out of reach: another job of this name
                # may run now, so this one must not go on writing output
                outcome = self.fail("the job was declared LOST (no heartbeat within the "
                                    "heartbeat timeout) and may have been superseded")
                outcome.fatal = True
                return outcome
        return None


def _drain(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return
