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
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import cloudpickle

from ..api import JobResult, Pipeline
from ..checkpoint.coordinator import CheckpointCoordinator, CompletedCheckpoint
from ..checkpoint.metadata import LoadedSnapshot, load_snapshot
from ..checkpoint.restore import assign_restore, operator_kind
from ..checkpoint.storage import default_savepoint_root, job_directory
from ..checkpoint.store import MetadataStore
from ..config import CheckpointingMode
from ..errors import (
    CheckpointDeclined,
    ConfigurationError,
    EngineError,
    JobFailedError,
    RestoreError,
)
from ..graph import ExecutionGraph
from ..metrics import JobMetrics, metrics_port_from_env
from ..progress import ProgressReporter
from ..runtime import protocol as P
from .control import ControlPlane

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0
FINAL_WRITE_SECONDS = 60.0
STARTUP_TIMEOUT_SECONDS = 120.0


class Launcher(Protocol):
    def start(self, attempt: int, coordinator: tuple[str, int], num_slots: int) -> None: ...
    def poll(self) -> str | None: ...
    def stop(self) -> None: ...


class CoordinatorServer:
    """Accepts slot control connections and turns their messages into events."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.events: queue.Queue = queue.Queue()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(256)
        self.address = self.sock.getsockname()[:2]
        self._closed = False
        threading.Thread(target=self._accept, name="coordinator-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            cc = P.ControlConnection(conn)
            threading.Thread(target=self._read, args=(cc,), daemon=True).start()

    def _read(self, cc: P.ControlConnection) -> None:
        try:
            while True:
                self.events.put(("msg", cc, cc.recv()))
        except (P.ConnectionClosed, OSError):
            self.events.put(("lost", cc, None))

    def close(self) -> None:
        self._closed = True
        self.sock.close()


@dataclass
class AttemptOutcome:
    status: str            # FINISHED | STOPPED | CANCELED | FAILED
    failure: str | None = None
    fatal: bool = False    # no restart can help (e.g. the snapshot to restore is corrupt)


class JobMaster:
    def __init__(self, pipeline: Pipeline, launcher: Launcher, *, coordinator_host: str = "127.0.0.1",
                 coordinator_port: int = 0, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", show_progress: bool = False) -> None:
        self.metrics_port, self.metrics_host = metrics_port, metrics_host
        self.show_progress = show_progress
        self.metrics: JobMetrics | None = None
        self.progress: ProgressReporter | None = None
        # cumulative records in/out per (vertex, subtask) -> {operator: [in, out]}, this attempt
        self.task_counts: dict[tuple[int, int], dict[str, list[int]]] = {}
        self.pipeline = pipeline
        self.launcher = launcher
        self.coordinator_host = coordinator_host
        self.coordinator_port = coordinator_port

    # -- public ---------------------------------------------------------------------------
    def run(self, *, restore: str | None = None, allow_non_restored_state: bool = False,
            job_id: str | None = None, claim_mode: str = "NO_CLAIM") -> JobResult:
        p = self.pipeline
        graph = p.execution_graph()
        self.graph = graph
        self.allow_non_restored_state = allow_non_restored_state
        if claim_mode not in ("NO_CLAIM", "CLAIM"):
            raise ConfigurationError(f"claim_mode {claim_mode!r} is unknown; use NO_CLAIM or CLAIM")
        self.claim_mode = claim_mode
        store = MetadataStore(p.metadata_url)
        try:
            return self._run(graph, store, restore, job_id)
        finally:
            store.close()

    # -- internals ------------------------------------------------------------------------
    def _resolve_restore(self, store: MetadataStore, restore: str | None) -> LoadedSnapshot | None:
        if restore is None:
            return None
        if restore == "latest":
            rec = store.latest_completed_checkpoint(job_name=self.pipeline.name)
            if rec is None:
                log.info("No completed checkpoint of job %s to restore: starting with empty state",
                         self.pipeline.name)
                return None
            return load_snapshot(rec.location)
        return load_snapshot(restore)

    def _run(self, graph: ExecutionGraph, store: MetadataStore, restore: str | None,
             job_id: str | None) -> JobResult:
        p = self.pipeline
        initial = self._resolve_restore(store, restore)
        if initial is not None:  # validate before anything is created
            assign_restore(initial, graph, allow_non_restored_state=self.allow_non_restored_state)
        job_id = job_id or uuid.uuid4().hex
        job_dir = job_directory(p.checkpoint.directory, p.name, job_id)
        store.create_job(job_id=job_id, job_name=p.name, parallelism=graph.num_slots,
                         version=p.version,
                         restored_from=initial.directory if initial is not None else None,
                         spark_app_id=getattr(self, "spark_app_id", None))
        self.job_id, self.job_dir, self.store = job_id, job_dir, store
        self.startup_seconds: list[float] = []   # per attempt: launch -> every slot running
        self.peak_rss_mb: dict[int, float] = {}  # slot -> peak resident memory of its process
        # Split lists are taken once per job: every subtask and attempt sees the same list.
        self.source_splits = {n.uid: list(n.payload.splits()) for v in graph.vertices
                              for n in v.nodes if n.kind == "source"}
        operator_info = {}
        for v in graph.vertices:
            for n in v.nodes:
                if n.uid:
                    operator_info[n.uid] = {"kind": operator_kind(n.kind), "parallelism": v.parallelism,
                                            "max_parallelism": graph.max_parallelism}
        server = CoordinatorServer(self.coordinator_host, self.coordinator_port)
        self.server = server
        self.conns: dict[int, P.ControlConnection] = {}
        first_id = max(initial.checkpoint_id if initial else 0, store.max_checkpoint_id(job_id)) + 1
        self.coordinator = CheckpointCoordinator(
            job_id=job_id, job_name=p.name, job_dir=job_dir, config=p.checkpoint,
            tasks=graph.tasks(), operator_info=operator_info,
            send_trigger=self._send_trigger, send_notify=self._send_notify,
            send_abort=self._send_abort, store=store, next_checkpoint_id=first_id,
            now=time.monotonic())
        if initial is not None and self.claim_mode == "CLAIM":
            # The new job owns the restored snapshot: it is retained, then subsumed and
            # deleted like the job's own checkpoints. (NO_CLAIM never deletes it.)
            self.coordinator.add_completed(CompletedCheckpoint(
                initial.checkpoint_id, initial.doc.get("kind", "CHECKPOINT"), initial.directory,
                0, 0, 0, claimed=True))
        self.control = ControlPlane(
            store=store, job_id=job_id, coordinator=self.coordinator,
            savepoint_root=p.checkpoint.savepoint_directory
            or default_savepoint_root(p.checkpoint.directory),
            allowed_roots=(p.checkpoint.directory, *p.checkpoint.allowed_savepoint_roots))
        port = self.metrics_port if self.metrics_port is not None else metrics_port_from_env()
        if port is not None:
            self.metrics = JobMetrics(job_name=p.name, job_id=job_id)
            self.metrics.start(port, host=self.metrics_host)
            self.coordinator.listeners.append(self.metrics.checkpoint_listener)
            log.info("Prometheus metrics of job %s on http://%s:%d/metrics", p.name,
                     self.metrics_host, self.metrics.port)
        if self.show_progress:
            self.progress = ProgressReporter(p.name)
            self.coordinator.listeners.append(self._progress_listener)
        log.info("Starting job %s (%s) with %d slots%s", p.name, job_id, graph.num_slots,
                 f", restoring {initial.directory}" if initial else "")
        restarts = 0
        attempt = 0
        snapshot = initial
        status, failure = "FAILED", None
        try:
            while True:
                self.coordinator.db.write("start_attempt", job_id, attempt,
                                    restored_checkpoint_id=snapshot.checkpoint_id if snapshot else None,
                                    restored_from=snapshot.directory if snapshot else None)
                outcome = self._run_attempt(attempt, snapshot)
                self.coordinator.db.write("end_attempt", job_id, attempt,
                                          failure_reason=outcome.failure)
                if outcome.status in ("FINISHED", "STOPPED", "CANCELED"):
                    status, failure = outcome.status, None
                    break
                failure = outcome.failure
                strategy = p.restart_strategy
                if outcome.fatal or not strategy.can_restart(restarts):
                    log.error("Job %s failed and will not restart (%d restarts, strategy %s): %s",
                              p.name, restarts, strategy.kind, failure)
                    status = "FAILED"
                    break
                restarts += 1
                if self.metrics:
                    self.metrics.on_restart()
                if self.progress:
                    self.progress.update(status="RESTARTING", restarts=restarts)
                delay = strategy.delay_for(restarts)
                self.coordinator.db.write("set_job_status", job_id, "RESTARTING",
                                          failure_reason=failure)
                log.warning("Job %s failed (%s); restart %d/%d in %.1f s", p.name, failure,
                            restarts, strategy.attempts, delay)
                time.sleep(delay)
                attempt += 1
                latest = self.coordinator.completed[-1] if self.coordinator.completed else None
                snapshot = load_snapshot(latest.location) if latest else initial
        finally:
            server.close()
            self.launcher.stop()
            if self.metrics:
                self.metrics.stop()
            if self.progress:
                self.progress.update(status=status)
                self.progress.close()
        db = self.coordinator.db
        db.write("set_job_status", job_id, status, failure_reason=failure)
        db.write("abort_control_requests", job_id, f"job ended with status {status}")
        deadline = time.monotonic() + FINAL_WRITE_SECONDS
        while not db.flush() and time.monotonic() < deadline:
            time.sleep(1.0)  # the metadata DB is down: the final status must still land
        if db.backlog:
            log.error("Could not record the end of job %s (%s) in the metadata DB: %d writes lost",
                      p.name, job_id, len(db.backlog))
        latest = self.coordinator.completed[-1] if self.coordinator.completed else None
        result = JobResult(job_id=job_id, job_name=p.name, status=status,
                           checkpoints_completed=self.coordinator.num_completed,
                           checkpoints_failed=self.coordinator.num_failed, restarts=restarts,
                           latest_checkpoint=latest.location if latest else None,
                           restored_from=initial.directory if initial else None,
                           failure_reason=failure, metadata_url=store.safe_url,
                           extra={"startup_seconds": self.startup_seconds,
                                  "peak_rss_mb": dict(sorted(self.peak_rss_mb.items()))})
        log.info("Job %s (%s) %s after %d restarts, %d checkpoints", p.name, job_id,
                 status.lower(), restarts, result.checkpoints_completed)
        if status == "FAILED" and getattr(self.pipeline, "_raise_on_failure", True):
            err = JobFailedError(f"job {p.name} ({job_id}) failed: {failure}")
            err.result = result  # type: ignore[attr-defined]
            raise err
        return result

    def _payload(self, attempt: int, slot: int, assignments: dict) -> bytes:
        g = self.graph
        restore = {t: assignments[t] for t in g.tasks_in_slot(slot) if t in assignments}
        return cloudpickle.dumps({
            "job_id": self.job_id, "job_name": self.pipeline.name, "graph": g,
            "job_dir": self.job_dir, "batch_size": self.pipeline.batch_size,
            "exactly_once": self.pipeline.checkpoint.mode == CheckpointingMode.EXACTLY_ONCE,
            "restore": restore, "source_splits": self.source_splits,
            "state_backend": {"kind": self.pipeline.state_backend,
                              "incremental": self.pipeline.incremental}})

    # -- metrics and progress ---------------------------------------------------------------
    def _on_task_counts(self, task: tuple[int, int], counts: dict[str, list[int]]) -> None:
        previous = self.task_counts.get(task, {})
        self.task_counts[task] = counts
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

    def _progress_listener(self, chk: int, completed, reason: str | None) -> None:
        coord = self.coordinator
        fields = {"checkpoints_completed": coord.num_completed,
                  "checkpoints_failed": coord.num_failed}
        if completed is not None:
            fields.update(last_checkpoint_id=chk, last_checkpoint_duration_ms=completed.duration_ms)
        self.progress.update(**fields)

    # -- messages to slots ----------------------------------------------------------------
    def _broadcast(self, msg: dict, slots=None) -> None:
        for slot, conn in list(self.conns.items()):
            if slots is not None and slot not in slots:
                continue
            try:
                conn.send(msg)
            except OSError:
                pass  # the lost connection is reported by its reader

    def _send_trigger(self, chk: int, ts: int, kind: str, location: str) -> None:
        slots = {sub for v in self.graph.vertices if v.is_source for sub in range(v.parallelism)}
        self._broadcast({"type": "trigger", "checkpoint_id": chk, "timestamp": ts, "kind": kind,
                         "location": location}, slots)

    def _send_notify(self, chk: int) -> None:
        self._broadcast({"type": "notify", "checkpoint_id": chk})

    def _send_abort(self, chk: int) -> None:
        self._broadcast({"type": "abort", "checkpoint_id": chk})

    # -- one attempt ----------------------------------------------------------------------
    def _run_attempt(self, attempt: int, snapshot: LoadedSnapshot | None) -> AttemptOutcome:
        g, coord = self.graph, self.coordinator
        try:
            assignments = (assign_restore(snapshot, g, allow_non_restored_state=self.allow_non_restored_state)
                           if snapshot else {})
        except RestoreError as exc:
            return AttemptOutcome("FAILED", str(exc), fatal=True)
        num_slots = g.num_slots
        all_tasks = set(g.tasks())
        self.conns = {}
        addresses: dict[int, list] = {}
        running: set[int] = set()
        eoi: set[tuple[int, int]] = set()
        finished_slots: set[int] = set()
        final_id: int | None = None
        finish_sent = False
        control = self.control
        coord.set_tasks_running(set())
        self.task_counts = {}  # counters restart with the attempt's tasks
        try:
            self.launcher.start(attempt, self.server.address, num_slots)
        except EngineError as exc:
            self.launcher.stop()
            return AttemptOutcome("FAILED", f"cannot start the job's slots: {exc}")
        started = time.monotonic()
        last_heartbeat = 0.0
        events = self.server.events

        def fail(reason: str) -> AttemptOutcome:
            coord.abort_all(f"job failover: {reason}", time.monotonic())
            coord.set_tasks_running(set())
            self.launcher.stop()
            for c in self.conns.values():
                c.close()
            self.conns = {}
            _drain(events)
            return AttemptOutcome("FAILED", reason)

        while True:
            try:
                kind, conn, msg = events.get(timeout=0.02)
            except queue.Empty:
                kind = None
            now = time.monotonic()
            if kind == "lost":
                slot = next((s for s, c in self.conns.items() if c is conn), None)
                if slot is not None and slot not in finished_slots:
                    return fail(f"slot {slot} lost its connection to the coordinator")
            elif kind == "msg":
                if msg.get("attempt") != attempt:
                    pass  # a message from a previous attempt's slot
                elif msg["type"] == "register":
                    self.conns[msg["slot"]] = conn
                    conn.send({"type": "job", "payload": self._payload(attempt, msg["slot"], assignments)})
                elif msg["type"] == "address":
                    addresses[msg["slot"]] = msg["address"]
                    if len(addresses) == num_slots:
                        self._broadcast({"type": "peers", "peers": {str(k): v for k, v in addresses.items()}})
                elif msg["type"] == "running":
                    running.add(msg["slot"])
                    if len(running) == num_slots:
                        coord.set_tasks_running(all_tasks)
                        coord.db.write("set_job_status", self.job_id, "RUNNING")
                        if self.progress:
                            self.progress.update(status="RUNNING", restarts=attempt)
                        log.info("Job %s (%s) attempt %d is running (%.2f s to start)",
                                 self.pipeline.name, self.job_id, attempt, now - started)
                        self.startup_seconds.append(round(now - started, 3))
                elif msg["type"] == "ack":
                    coord.receive_ack(msg["checkpoint_id"], (msg["vertex"], msg["subtask"]), msg, now)
                elif msg["type"] == "decline":
                    coord.receive_decline(msg["checkpoint_id"], (msg["vertex"], msg["subtask"]),
                                          msg["reason"], now)
                elif msg["type"] == "metrics":
                    self._on_task_counts((msg["vertex"], msg["subtask"]), msg["counts"])
                elif msg["type"] == "end_of_input":
                    eoi.add((msg["vertex"], msg["subtask"]))
                elif msg["type"] == "task_failed":
                    log.debug("Remote traceback:\n%s", msg.get("traceback", ""))
                    outcome = fail(f"task {msg['vertex']}.{msg['subtask']} failed: {msg['error']}")
                    outcome.fatal = bool(msg.get("fatal"))
                    return outcome
                elif msg["type"] == "slot_finished":
                    finished_slots.add(msg["slot"])
                    if msg.get("peak_rss_mb") is not None:
                        slot_id = msg["slot"]
                        self.peak_rss_mb[slot_id] = max(self.peak_rss_mb.get(slot_id, 0.0),
                                                        msg["peak_rss_mb"])
                    if len(finished_slots) == num_slots:
                        return AttemptOutcome("STOPPED" if control.stop_completed else "FINISHED")
            # timers
            coord.check_timeouts(now)
            if coord.job_failure:
                reason, coord.job_failure = coord.job_failure, None
                return fail(reason)
            control.poll(now, len(running) == num_slots)
            if final_id is None and not control.has_queued:
                coord.maybe_trigger_periodic(now)
            if control.cancel_request:
                fail("cancelled on request")
                control.finish_cancel()
                return AttemptOutcome("CANCELED")
            if control.stop_completed and not finish_sent:
                self._broadcast({"type": "finish"})
                finish_sent = True
            if control.stop_checkpoint is None and eoi == all_tasks and not coord.final_completed and (
                    final_id is None or (final_id not in coord.pending)):
                if not coord.pending and now - coord.last_end >= coord.config.min_pause_ms / 1000.0:
                    try:
                        final_id = coord.trigger(now, final=True)
                    except CheckpointDeclined as exc:
                        log.debug("final checkpoint not triggered: %s", exc)
            if coord.final_completed and not finish_sent:
                self._broadcast({"type": "finish"})
                finish_sent = True
            problem = self.launcher.poll()
            if problem and len(finished_slots) < num_slots:
                return fail(problem)
            if len(running) < num_slots and now - started > STARTUP_TIMEOUT_SECONDS:
                return fail(f"only {len(running)} of {num_slots} slots started within "
                            f"{STARTUP_TIMEOUT_SECONDS:.0f} s")
            if now - last_heartbeat >= HEARTBEAT_SECONDS:
                if coord.db.flush():  # replay queued writes first; heartbeats are not queued
                    coord.db.read("heartbeat", self.job_id)
                last_heartbeat = now


def _drain(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


__all__ = ["JobMaster", "CompletedCheckpoint"]
