"""The job master: runs a job's attempts, hosts the checkpoint coordinator, fails over.

Runner-agnostic: a *launcher* starts the slots of one attempt (OS processes for the local
runner, a Spark barrier stage for the Spark runner) and stops them; everything else — the
coordinator's TCP server, checkpoint triggers, failover under the restart strategy, the job
row and heartbeat in the metadata DB — lives here.
"""

from __future__ import annotations

import logging
import queue
import socket
import time
import uuid
from collections.abc import Callable
from typing import Protocol, cast

import cloudpickle

from ...catalog import MetadataStore
from ...catalog.models import JobStatus
from ...checkpoint.coordinator import CheckpointCoordinator, CompletedCheckpoint
from ...checkpoint.progress_watch import ProgressWatchdog
from ...checkpoint.restore import assign_restore, operator_kind
from ...checkpoint.trust import SnapshotTrust
from ...config import CheckpointingMode, max_frame_bytes
from ...connectors.base import Source
from ...connectors.capabilities import SupportsFencing
from ...errors import ConfigurationError, JobFailedError
from ...eventtime import format_watermark
from ...fs.storage import absolute_location, default_savepoint_root, job_directory
from ...names import ensure_under, validate_job_id, validate_job_name
from ...plan.graph import ExecutionGraph
from ...plan.job import EMPTY_STATE, JobConfig, JobResult, Restore, RestoreKind
from ...protocol import ProtocolError
from ...protocol import frames as P
from ...protocol import messages as M
from ...runtime.host.auth import MAX_PENDING_HANDSHAKES, new_secret, serve_authenticated
from ...snapshot.codec import LoadedSnapshot
from . import fencing, standby
from .control_plane import ControlPlane
from .failover import Failover, JobEnd
from .fencing import check_job_start, claim_before_restore, discard_held
from .metrics import JobMetrics, metrics_port_from_env
from .progress import ProgressReporter
from .promote import Promoter
from .restore_plan import RestorePlanner
from .slot_events import SlotEvent, SlotInvalid, SlotLost, SlotMessage

log = logging.getLogger(__name__)

FINAL_WRITE_SECONDS = 60.0


class Launcher(Protocol):
    def start(self, attempt: int, coordinator: tuple[str, int], num_slots: int,
              secret: bytes | None = None) -> None: ...
    def poll(self) -> str | None: ...
    def stop(self) -> None: ...
    def recycle(self, attempt: int) -> None:
        """The running slot processes host ``attempt`` next (they registered as it, after a
        PROMOTE told them to recycle): its :meth:`start` adopts them. A launcher that cannot
        keep its slots runs with ``JobMaster(warm_slots=False)``."""


class CoordinatorServer:
    """Accepts slot control connections and turns their messages into events.

    Bound to ``host`` (127.0.0.1 with the local runner; the driver host with Spark). Every
    connection is authenticated in its own thread before anything it sends is read
    (``runtime/host/auth.py``: mutual HMAC handshake, 1 KiB frames and an overall deadline until
    then, at most ``max_pending`` handshakes at once); after that its frames are bounded by
    ``$CKPT_MAX_FRAME_BYTES``, which the handshake also hands to the slot."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 secret: bytes | None = None, max_pending: int = MAX_PENDING_HANDSHAKES) -> None:
        self.events: queue.Queue[SlotEvent] = queue.Queue()
        self.secret = secret  # peers must prove they hold it (runtime/host/auth.py)
        self.frame_limit = max_frame_bytes()  # a bad $CKPT_MAX_FRAME_BYTES fails here
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(256)
        self.address = self.sock.getsockname()[:2]
        self._closed = False
        serve_authenticated(self.sock, secret, "control", self._read, name="coordinator-accept",
                            capacity=max_pending, limit=lambda: self.frame_limit)

    def _read(self, conn: socket.socket) -> None:
        """An authenticated control connection: its messages, until it ends."""
        if self._closed:
            conn.close()
            return
        cc = P.ControlConnection(conn, limit=self.frame_limit)
        try:
            while True:
                self.events.put(SlotMessage(cc, cc.recv()))
        except ProtocolError as exc:
            self.events.put(SlotInvalid(cc, str(exc)))
            cc.close()
        except (P.ConnectionClosed, OSError):
            self.events.put(SlotLost(cc))

    def close(self) -> None:
        self._closed = True
        self.sock.close()


class JobMaster:
    """One job: its row in the metadata DB, the coordinator's server, the checkpoint
    coordinator and the control plane, composed with three collaborators: the
    :class:`~.restore_plan.RestorePlanner` (which snapshot to start from, its checks), the
    :class:`~.failover.Failover` (the attempt loop under the restart strategy) and the
    :class:`~.promote.Promoter` (restore in place)."""

    # set by _run/_start, before anything reads them
    job_id: str
    job_dir: str
    store: MetadataStore
    trust: SnapshotTrust
    restorer: RestorePlanner
    secret: bytes
    server: CoordinatorServer
    coordinator: CheckpointCoordinator
    control: ControlPlane

    def __init__(self, graph: ExecutionGraph, config: JobConfig, launcher: Launcher, *, coordinator_host: str = "127.0.0.1",
                 coordinator_port: int = 0, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", show_progress: bool = False,
                 warm_slots: bool = True) -> None:
        self.metrics_port, self.metrics_host = metrics_port, metrics_host
        #: a PROMOTE keeps the slot processes and restores into them (warm slots); off: it
        #: stops them and starts new ones, as a failover does
        self.warm_slots = warm_slots
        self.show_progress = show_progress
        self.metrics: JobMetrics | None = None
        self.progress: ProgressReporter | None = None
        #: set by the Spark runner before run(): recorded in the job row
        self.spark_app_id: str | None = None
        # cumulative records in/out per (vertex, subtask) -> {operator: [in, out]}, this attempt
        self.task_counts: dict[tuple[int, int], dict[str, list[int]]] = {}
        #: input watermark of every task that reported one (event-time jobs)
        self.task_watermarks: dict[tuple[int, int], int] = {}
        #: late records each window task dropped (cumulative, this attempt)
        self.task_late: dict[tuple[int, int], dict[str, int]] = {}
        #: the operators' own counters per task (cumulative, this attempt)
        self.task_counters: dict[tuple[int, int], dict[str, dict[str, int]]] = {}
        #: the progress watchdog (``checkpoint.stall_timeout_ms``; None: off) and the
        #: (operator, kind) of the stall last recorded in the job row
        self.progress_watch: ProgressWatchdog | None = None
        self._stall_recorded: tuple[str, str] | None = None
        self.graph = graph
        self.config = config
        self.launcher = launcher
        self.coordinator_host = coordinator_host
        self.coordinator_port = coordinator_port
        # the options of run()
        self.allow_non_restored_state = False
        self.trust_snapshot = False
        self.claim_mode = "NO_CLAIM"
        #: the job whose snapshot ``restore`` must be (a standby's hand-over); None: any
        self.restore_owner: str | None = None
        #: the snapshot the job started from (a PROMOTE replaces it)
        self.initial: LoadedSnapshot | None = None
        self.startup_seconds: list[float] = []   # per attempt: launch -> every slot running
        #: seconds the last ended attempt took to stop its slots (launcher.stop)
        self.stop_seconds = 0.0
        self.peak_rss_mb: dict[int, float] = {}  # slot -> peak resident memory of its process
        #: source uid -> its splits, taken once per job (every subtask and attempt sees them)
        self.source_splits: dict[str | None, list] = {}
        self.conns: dict[int, P.ControlConnection] = {}  # slot -> its control connection
        #: what _start opened, closed again when the start fails
        self._opened: list[Callable[[], None]] = []
        self.failover = Failover(self)
        self.promoter = Promoter(self)

    # -- public ---------------------------------------------------------------------------
    def run(self, *, restore: Restore = EMPTY_STATE, allow_non_restored_state: bool = False,
            job_id: str | None = None, claim_mode: str = "NO_CLAIM",
            trust_snapshot: bool = False) -> JobResult:
        p, graph = self.config, self.graph
        self.allow_non_restored_state = allow_non_restored_state
        self.trust_snapshot = trust_snapshot
        if claim_mode not in ("NO_CLAIM", "CLAIM"):
            raise ConfigurationError(f"claim_mode {claim_mode!r} is unknown; use NO_CLAIM or CLAIM")
        self.claim_mode = claim_mode
        store = MetadataStore(p.metadata_url)
        self.restore_owner = None
        try:
            match restore.kind:
                case RestoreKind.STANDBY:  # the application is up: wait for the hand-over
                    # its id now: the standby's READY row (what Airflow waits for) is under it
                    job_id = validate_job_id(job_id or uuid.uuid4().hex)
                    location, self.restore_owner = standby.wait_for_handover(
                        store, restore, job_id=job_id, job_name=p.name)
                    restore = Restore(RestoreKind.PATH, location)
                case RestoreKind.NONE | RestoreKind.LATEST | RestoreKind.PATH:
                    pass
            return self._run(graph, store, restore, job_id)
        finally:
            store.close()

    # -- internals ------------------------------------------------------------------------
    def discard_orphaned_staging(self) -> None:
        """Once the first attempt runs (every sink has recovered the restored transactions),
        staged files the job we restored from left behind are orphans -- if that job has
        ended: its uncommitted records are replayed by this job. A predecessor that still
        runs (blue-green) keeps its staged files."""
        initial = self.initial
        pred = initial.metadata.job_id if initial is not None else None
        if not pred or pred == self.job_id:
            return
        rec = self.store.get_job(pred)
        if rec is None or not rec.is_terminal:
            return
        for v in self.graph.vertices:
            for n in v.nodes:
                if n.kind == "sink" and n.uid and isinstance(n.payload, SupportsFencing):
                    n.payload.discard_staged_of_job(n.uid, pred)

    def _run(self, graph: ExecutionGraph, store: MetadataStore, restore: Restore,
             job_id: str | None) -> JobResult:
        p = self.config
        job_id = validate_job_id(job_id or uuid.uuid4().hex)
        job_dir = ensure_under(absolute_location(p.checkpoint.directory),
                               job_directory(p.checkpoint.directory, validate_job_name(p.name),
                                             job_id), "job checkpoint directory")
        # The name first: one live job per name (a database guarantee). Nothing below may
        # touch the name's checkpoints or its sinks' output before this job owns the name.
        store.create_job(job_id=job_id, job_name=p.name, parallelism=graph.num_slots,
                         version=p.version, restored_from=None,
                         spark_app_id=self.spark_app_id,
                         exclusive_name=True)
        self.job_id, self.job_dir, self.store = job_id, job_dir, store
        try:
            initial = self._start(graph, store, restore)
        except BaseException as exc:
            self._fail_start(store, exc)
            raise
        return self._finish(initial)

    def _fail_start(self, store: MetadataStore, exc: BaseException) -> None:
        """A start-up failure after the job row exists ends the row FAILED with the reason
        (a row left CREATED would hold the name until the heartbeat timeout)."""
        reason = f"start-up failed: {type(exc).__name__}: {exc}"
        log.error("Job %s (%s) %s", self.config.name, self.job_id, reason)
        for close in reversed(self._opened):
            try:
                close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        try:
            store.set_job_status(self.job_id, JobStatus.FAILED, failure_reason=reason)
        except Exception as db_exc:  # noqa: BLE001 - the original error matters more
            log.error("Could not record the start-up failure of job %s in the metadata DB: "
                      "%s", self.job_id, db_exc)

    def _start(self, graph: ExecutionGraph, store: MetadataStore,
               restore: Restore) -> LoadedSnapshot | None:
        """Everything between the job row and the first attempt; returns the snapshot the
        job starts from."""
        p, job_id, job_dir = self.config, self.job_id, self.job_dir
        # signs this job's snapshots, decides which ones it restores (checkpoint/trust.py)
        self.trust = SnapshotTrust(store, trust_snapshot=self.trust_snapshot)
        self.restorer = RestorePlanner(graph, self.trust)
        claim_before_restore(graph, store, p.name, job_id)  # another job's CDC slot: refused
        initial = self.restorer.resolve(store, restore, p, owner=self.restore_owner)
        self.initial = initial
        check_job_start(graph, store, p, job_id, initial)  # fencing, sources' shared state (CDC slots)
        # what drivers that died (LOST) prepared for checkpoints that never completed
        fencing.discard_uncommitted_of_lost(graph, store, p.name, job_id)
        if initial is not None:
            assign_restore(initial, graph, allow_non_restored_state=self.allow_non_restored_state)
            store.set_job_restored_from(job_id, initial.directory)
        self.source_splits = {n.uid: list(cast(Source, n.payload).splits()) for v in graph.vertices
                              for n in v.nodes if n.kind == "source"}
        operator_info = {}
        for v in graph.vertices:
            for n in v.nodes:
                if n.uid:
                    operator_info[n.uid] = {"kind": operator_kind(n.kind), "parallelism": v.parallelism,
                                            "max_parallelism": graph.max_parallelism}
            # a stateless chain's in-flight records (unaligned checkpoints) under its derived id
            operator_info[v.auto_uid] = {"kind": "operator", "parallelism": v.parallelism,
                                         "max_parallelism": graph.max_parallelism}
        self.secret = new_secret()  # per job; handed to the slots by the launcher only
        server = CoordinatorServer(self.coordinator_host, self.coordinator_port,
                                   secret=self.secret,
                                   max_pending=max(MAX_PENDING_HANDSHAKES, 2 * graph.num_slots))
        self.server = server
        self._opened.append(server.close)
        first_id = max(initial.checkpoint_id if initial else 0, store.max_checkpoint_id(job_id)) + 1
        self.coordinator = CheckpointCoordinator(
            job_id=job_id, job_name=p.name, job_dir=job_dir, config=p.checkpoint,
            tasks=graph.tasks(), operator_info=operator_info,
            send_trigger=self._send_trigger, send_notify=self._send_notify,
            send_abort=self._send_abort, send_unalign=self._send_unalign, store=store, next_checkpoint_id=first_id,
            now=time.monotonic(), hmac_key=self.trust.key)
        self._opened.append(self.coordinator.cleaner.close)
        if initial is not None and self.claim_mode == "CLAIM":
            # The new job owns the restored snapshot: it is retained, then subsumed and
            # deleted like the job's own checkpoints. (NO_CLAIM never deletes it.)
            self.coordinator.add_completed(CompletedCheckpoint(
                initial.checkpoint_id, initial.metadata.kind, initial.directory,
                0, 0, 0, claimed=True, job_id=initial.metadata.job_id))
        self.control = ControlPlane(
            store=store, job_id=job_id, coordinator=self.coordinator,
            savepoint_root=p.checkpoint.savepoint_directory
            or default_savepoint_root(p.checkpoint.directory),
            allowed_roots=(p.checkpoint.directory, *p.checkpoint.allowed_savepoint_roots))
        if p.checkpoint.stall_timeout_ms is not None:
            self.progress_watch = ProgressWatchdog.from_graph(
                graph, p.checkpoint.stall_timeout_ms / 1000.0)
            self.progress_watch.reset(time.monotonic())
        self._start_reporting(job_id)
        log.info("Starting job %s (%s) with %d slots%s", p.name, job_id, graph.num_slots,
                 f", restoring {initial.directory}" if initial else "")
        return initial

    def _finish(self, initial: LoadedSnapshot | None) -> JobResult:
        """Run the attempts, record how the job ended, return its result."""
        p, job_id, server, store = self.config, self.job_id, self.server, self.store
        end = JobEnd(JobStatus.FAILED.value)
        try:
            end = self.failover.run_attempts(initial)
        finally:
            server.close()
            self.launcher.stop()
            self.coordinator.cleaner.close()
            if self.metrics:
                self.metrics.stop()
            if self.progress:
                self.progress.update(status=end.status)
                self.progress.close()
            if self.config.fence_sinks:  # every task ended: nothing it staged is ever published
                discard_held(self.graph, job_id)  # (self.config: a PROMOTE may have unfenced it)
        status, failure, restarts = end.status, end.failure, end.restarts
        db = self.coordinator.db
        db.write(MetadataStore.set_job_status, job_id, status, failure_reason=failure)
        db.write(MetadataStore.abort_control_requests, job_id, f"job ended with status {status}")
        if not db.flush(timeout=FINAL_WRITE_SECONDS):  # the final status must still land
            log.error("Could not record the end of job %s (%s) in the metadata DB: %d writes lost",
                      p.name, job_id, len(db.backlog))
        elif not self.config.fence_sinks:  # what it prepared for checkpoints that never completed
            fencing.discard_uncommitted(self.graph, store, job_id)
        db.close()
        latest = self.coordinator.completed[-1] if self.coordinator.completed else None
        start = self.initial or initial  # a PROMOTE replaced the initial snapshot
        result = JobResult(job_id=job_id, job_name=p.name, status=str(status),
                           checkpoints_completed=self.coordinator.num_completed,
                           checkpoints_failed=self.coordinator.num_failed, restarts=restarts,
                           latest_checkpoint=latest.location if latest else None,
                           restored_from=start.directory if start else None,
                           failure_reason=failure, metadata_url=store.safe_url,
                           extra={"startup_seconds": self.startup_seconds,
                                  "peak_rss_mb": dict(sorted(self.peak_rss_mb.items()))})
        log.info("Job %s (%s) %s after %d restarts, %d checkpoints", p.name, job_id,
                 status.lower(), restarts, result.checkpoints_completed)
        if status == JobStatus.FAILED:
            error = end.error if end.error and issubclass(end.error, JobFailedError) else JobFailedError
            err = error(f"job {p.name} ({job_id}) failed: {failure}")
            err.result = result  # type: ignore[attr-defined]
            raise err
        return result

    def _payload(self, attempt: int, slot: int, assignments: dict) -> bytes:
        g = self.graph
        restore = {t: assignments[t] for t in g.tasks_in_slot(slot) if t in assignments}
        return cloudpickle.dumps({
            "job_id": self.job_id, "job_name": self.config.name, "graph": g,
            "job_dir": self.job_dir, "batch_size": self.config.batch_size,
            "arrow_batch_size": self.config.effective_arrow_batch_size(),
            "exactly_once": self.config.checkpoint.mode == CheckpointingMode.EXACTLY_ONCE,
            "restore": restore, "source_splits": self.source_splits,
            "fence_sinks": self.config.fence_sinks,
            "debloat_target_ms": self.config.checkpoint.buffer_debloat_target_ms,
            "state_backend": {"kind": self.config.state_backend,
                              "incremental": self.config.incremental,
                              "heap_incremental": self.config.heap_incremental}})

    # -- metrics and progress ---------------------------------------------------------------
    def operator_watermarks(self) -> dict[str, int]:
        """Operator -> its input watermark: the lowest of its subtasks (all must have one)."""
        out = {}
        for v in self.graph.vertices:
            marks = [self.task_watermarks.get((v.id, i)) for i in range(v.parallelism)]
            known = [m for m in marks if m is not None]
            if v.is_source or len(known) < len(marks):
                continue
            for n in v.nodes:
                out[n.uid or n.name] = min(known)
        return out

    def _on_task_counts(self, task: tuple[int, int], counts: dict[str, list[int]],
                        watermark: int | None = None, late: dict | None = None,
                        counters: dict | None = None) -> None:
        previous = self.task_counts.get(task, {})
        self.task_counts[task] = counts
        if counters:
            seen = self.task_counters.get(task, {})
            self.task_counters[task] = counters
            if self.metrics:
                for op, values in counters.items():
                    was = seen.get(op, {})
                    for name, n in values.items():
                        self.metrics.on_operator_counter(op, name, max(0, n - was.get(name, 0)))
        if late:
            before = self.task_late.get(task, {})
            self.task_late[task] = late
            if self.metrics:
                for op, n in late.items():
                    self.metrics.on_late_records(op, max(0, n - before.get(op, 0)))
        if watermark is not None:
            self.task_watermarks[task] = watermark
            if self.metrics:
                for op, wm in self.operator_watermarks().items():
                    self.metrics.on_watermark(op, wm)
        if self.metrics:
            for op, (n_in, n_out) in counts.items():
                p_in, p_out = previous.get(op, (0, 0))
                self.metrics.on_records(op, max(0, n_in - p_in), max(0, n_out - p_out))
        if self.progress:
            first = {v.nodes[0].uid or v.nodes[0].name for v in self.graph.vertices if v.is_source}
            last = {v.nodes[-1].uid or v.nodes[-1].name for v in self.graph.vertices if not v.outputs}
            total_in = sum(c[1] for t in self.task_counts.values() for op, c in t.items() if op in first)
            total_out = sum(c[0] for t in self.task_counts.values() for op, c in t.items() if op in last)
            self.progress.update(records_in=total_in, records_out=total_out)
            sinks = [wm for op, wm in self.operator_watermarks().items() if op in last]
            if sinks:
                self.progress.update(watermark=format_watermark(min(sinks)))

    def watch_progress(self, now: float, ended: set[tuple[int, int]] | frozenset = frozenset()
                       ) -> None:
        """Ask the progress watchdog whether the job is stalled (about once a second): the
        metrics follow every verdict, the job row (``jobs.progress_stall``, which ``ckpt
        jobs`` and the report show) and the log each change. Reported only, never acted on.
        ``ended``: the tasks whose input ended."""
        watch = self.progress_watch
        if watch is None:
            return
        awaited = {t for p in self.coordinator.pending.values() for t in p.not_yet_acked}
        stall = watch.check(now, awaited, ended)
        if self.metrics:
            if stall is None:
                self.metrics.on_stall(None)
            else:
                self.metrics.on_stall(stall.operator, stall.kind, stall.seconds(now))
        at = None if stall is None else (stall.operator, stall.kind)
        if at == self._stall_recorded:
            return
        self._stall_recorded = at
        doc = None if stall is None else stall.to_json(now, watch.threshold_s)
        self.coordinator.db.write(MetadataStore.set_job_progress_stall, self.job_id, doc)
        if stall is not None:
            log.warning("Job %s (%s) is stalled at operator %r: %s", self.config.name,
                        self.job_id, stall.operator, stall.detail)
        else:
            log.info("Job %s (%s) progresses again", self.config.name, self.job_id)
        if self.progress is not None:
            self.progress.update(stalled=None if stall is None else stall.operator)

    def _progress_listener(self, chk: int, completed, reason: str | None) -> None:
        coord = self.coordinator
        fields = {"checkpoints_completed": coord.num_completed,
                  "checkpoints_failed": coord.num_failed}
        if completed is not None:
            fields.update(last_checkpoint_id=chk, last_checkpoint_duration_ms=completed.duration_ms)
        if self.progress is not None:
            self.progress.update(**fields)

    # -- messages to slots ----------------------------------------------------------------
    def _broadcast(self, msg: M.Message, slots=None) -> None:
        for slot, conn in list(self.conns.items()):
            if slots is not None and slot not in slots:
                continue
            try:
                conn.send(msg)
            except OSError:
                pass  # the lost connection is reported by its reader

    def _send_trigger(self, chk: int, ts: int, kind: str, location: str,
                      unaligned: bool = False) -> None:
        slots = {sub for v in self.graph.vertices if v.is_source for sub in range(v.parallelism)}
        self._broadcast(M.Trigger(checkpoint_id=chk, timestamp=ts, kind=kind, location=location,
                                  unaligned=unaligned), slots)
        if unaligned:
            self._send_unalign(chk)

    def _send_unalign(self, chk: int) -> None:
        self._broadcast(M.Unalign(checkpoint_id=chk))

    def _send_notify(self, chk: int) -> None:
        self._broadcast(M.Notify(checkpoint_id=chk))

    def _send_abort(self, chk: int) -> None:
        self._broadcast(M.Abort(checkpoint_id=chk))

    # -- one attempt ----------------------------------------------------------------------
    def _start_reporting(self, job_id: str) -> None:
        """Prometheus metrics (when a port is configured) and the progress line."""
        p = self.config
        port = self.metrics_port if self.metrics_port is not None else metrics_port_from_env()
        if port is not None:
            self.metrics = JobMetrics(job_name=p.name, job_id=job_id)
            self.metrics.start(port, host=self.metrics_host)
            self._opened.append(self.metrics.stop)
            self.coordinator.listeners.append(self.metrics.checkpoint_listener)
            log.info("Prometheus metrics of job %s on http://%s:%d/metrics", p.name,
                     self.metrics_host, self.metrics.port)
        if self.show_progress:
            self.progress = ProgressReporter(p.name)
            self._opened.append(self.progress.close)
            self.coordinator.listeners.append(self._progress_listener)

__all__ = ["JobMaster", "CompletedCheckpoint"]
