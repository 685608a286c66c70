"""Prometheus metrics of a running job, served by the driver (the job master).

Off by default: nothing listens until :meth:`JobMetrics.start` is called, which the job
master does only when a port is configured (``metrics_port=`` or ``$CKPT_METRICS_PORT``,
see :func:`metrics_port_from_env`). Every :class:`JobMetrics` has its own
``CollectorRegistry`` instead of prometheus-client's process-global one, so several jobs
in one process (tests, an embedded runner) never share or double-register series, and a
stopped job leaves nothing behind. Every series carries ``job_name`` and ``job_id``.

Exposed series (names get the ``ckpt_`` namespace, as Flink's get ``flink_``):

=============================================  =======  ====================================
``ckpt_last_checkpoint_duration_ms``           gauge    end-to-end duration of the newest
                                                        completed checkpoint
``ckpt_last_checkpoint_size_bytes``            gauge    its full state size
``ckpt_last_checkpoint_checkpointed_size_bytes`` gauge  bytes uploaded for it
``ckpt_last_completed_checkpoint_id``          gauge    its id
``ckpt_checkpoints_completed_total``           counter  completed checkpoints and savepoints
``ckpt_checkpoints_failed_total``              counter  failed (declined, expired, aborted)
``ckpt_restarts_total``                        counter  restarts of the job
``ckpt_records_in_total{operator}``            counter  records read by an operator
``ckpt_records_out_total{operator}``           counter  records emitted by an operator
``ckpt_watermark_ms{operator}``                gauge    an operator's input watermark (epoch
                                                        ms, lowest subtask; event-time jobs)
``ckpt_late_records_dropped_total{operator}``  counter  records a window dropped as too late
``ckpt_operator_counter_total{operator,counter}`` counter an operator's own count of events:
                                                        a regular join's
                                                        ``dropped_retractions`` (of rows it
                                                        did not hold) and ``expired_rows``
                                                        (state TTL), an upsert
                                                        materializer's ``dropped_retractions``
``ckpt_replication_lag_bytes{operator}``       gauge    a CDC source's lag behind the server's
                                                        WAL, at the newest completed checkpoint
``ckpt_replication_lag_seconds{operator}``     gauge    now - commit time of the last change
                                                        it emitted (0 when caught up)
``ckpt_replication_connected{operator}``       gauge    1 when every split reader of a CDC source
                                                        is connected, 0 when one is not (its
                                                        lag gauges are NaN then: unknown)
``ckpt_kafka_consumer_lag_records``            gauge    a Kafka source's lag in one partition
``{operator,topic,partition}``                          (end offset - checkpointed position)
                                                        at the newest completed checkpoint
                                                        (NaN: unknown)
``ckpt_stalled``                               gauge    1 while the progress watchdog reports
                                                        the job stalled, else 0
``ckpt_stalled_seconds{operator,kind}``        gauge    seconds since records (``kind``
                                                        ``records``) or the watermark
                                                        (``watermark``) stopped at that
                                                        operator; the series exists while
                                                        the stall lasts
=============================================  =======  ====================================

The update hooks are cheap, thread-safe and may be called whether or not the endpoint was
started (they then only update the registry, which :meth:`JobMetrics.exposition` renders).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import start_http_server

from ...settings import METRICS_PORT

log = logging.getLogger(__name__)

#: Environment variable holding the metrics port of ``ckpt run`` and the runners.
METRICS_PORT_ENV = METRICS_PORT.name
#: Prefix of every series.
NAMESPACE = "ckpt"
#: Labels of every series.
JOB_LABELS = ("job_name", "job_id")


def metrics_port_from_env(environ: dict[str, str] | None = None) -> int | None:
    """The metrics port from ``$CKPT_METRICS_PORT``; ``None`` (metrics off) when unset or
    empty. ``0`` asks for any free port.

    :raises ConfigurationError: the value is not a port number.
    """
    return METRICS_PORT.get(environ)


class JobMetrics:
    """The Prometheus series of one job and, once started, the HTTP endpoint serving them.

    :param job_name: the job's name (label ``job_name``).
    :param job_id: the job's id (label ``job_id``).
    """

    def __init__(self, *, job_name: str, job_id: str) -> None:
        self.job_name = job_name
        self.job_id = job_id
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.host: str | None = None
        self.port: int | None = None
        labels = {"job_name": job_name, "job_id": job_id}

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, JOB_LABELS, namespace=NAMESPACE,
                         registry=self.registry).labels(**labels)

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, JOB_LABELS, namespace=NAMESPACE,
                           registry=self.registry).labels(**labels)

        self.last_checkpoint_duration_ms = gauge(
            "last_checkpoint_duration_ms",
            "End-to-end duration of the newest completed checkpoint, in milliseconds.")
        self.last_checkpoint_size_bytes = gauge(
            "last_checkpoint_size_bytes", "Full state size of the newest completed checkpoint.")
        self.last_checkpoint_checkpointed_size_bytes = gauge(
            "last_checkpoint_checkpointed_size_bytes",
            "Bytes uploaded for the newest completed checkpoint (less than its full size "
            "with incremental checkpoints).")
        self.last_completed_checkpoint_id = gauge(
            "last_completed_checkpoint_id", "Id of the newest completed checkpoint.")
        self.checkpoints_completed = counter(
            "checkpoints_completed", "Completed checkpoints and savepoints.")
        self.checkpoints_failed = counter(
            "checkpoints_failed", "Failed checkpoints (declined, expired or aborted).")
        self.restarts = counter("restarts", "Restarts of the job.")
        self.checkpoints_switched_unaligned = counter(
            "checkpoints_switched_unaligned",
            "Checkpoints that started aligned and turned unaligned after aligned_timeout_ms.")
        self.checkpoints_unaligned = counter(
            "checkpoints_unaligned", "Completed checkpoints that were unaligned (from the "
            "start or switched), storing in-flight records as channel state.")
        self.last_checkpoint_alignment_ms = gauge(
            "last_checkpoint_alignment_ms",
            "Longest barrier alignment of a task in the newest completed checkpoint.")
        self.last_checkpoint_inflight_bytes = gauge(
            "last_checkpoint_inflight_bytes",
            "In-flight records (channel state) the newest completed checkpoint stored.")
        self._records_in = Counter("records_in", "Records read by an operator.",
                                   (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                                   registry=self.registry)
        self._records_out = Counter("records_out", "Records emitted by an operator.",
                                    (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                                    registry=self.registry)
        self._late = Counter("late_records_dropped", "Records a window dropped as too late.",
                             (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                             registry=self.registry)
        self._operator_counter = Counter(
            "operator_counter", "An operator's own count of events (see the counter label).",
            (*JOB_LABELS, "operator", "counter"), namespace=NAMESPACE, registry=self.registry)
        self._lag_bytes = Gauge("replication_lag_bytes",
                                "A CDC source's lag behind the server's WAL, in bytes.",
                                (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                                registry=self.registry)
        self._lag_seconds = Gauge("replication_lag_seconds",
                                  "Seconds since the commit of the last change a CDC source "
                                  "emitted (0 when caught up).",
                                  (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                                  registry=self.registry)
        self._connected = Gauge("replication_connected",
                                 "1 when a CDC source is connected to its slot, 0 when not "
                                 "(then its lag is unknown: NaN).",
                                 (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                                 registry=self.registry)
        self._kafka_lag = Gauge("kafka_consumer_lag_records",
                                "A Kafka source's lag in one partition: its end offset minus "
                                "the checkpointed position, at the newest completed checkpoint "
                                "(NaN: unknown).",
                                (*JOB_LABELS, "operator", "topic", "partition"),
                                namespace=NAMESPACE, registry=self.registry)
        self._watermark = Gauge("watermark_ms", "Input watermark of an operator (epoch ms).",
                                (*JOB_LABELS, "operator"), namespace=NAMESPACE,
                                registry=self.registry)

        self.stalled = gauge("stalled", "1 while the job is stalled (progress watchdog), else 0.")
        self._stalled_seconds = Gauge(
            "stalled_seconds", "Seconds since records or the watermark stopped at an operator "
            "(progress watchdog; the series exists while the stall lasts).",
            (*JOB_LABELS, "operator", "kind"), namespace=NAMESPACE, registry=self.registry)
        self._stalled_at: tuple[str, str] | None = None

    def __repr__(self) -> str:
        where = f"http://{self.host}:{self.port}/metrics" if self.running else "not serving"
        return f"JobMetrics({self.job_name}, {self.job_id}, {where})"

    # -- endpoint --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str | None:
        """``http://host:port/metrics`` while serving, else ``None``."""
        return f"http://{self.host}:{self.port}/metrics" if self.running else None

    def start(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread. Returns the bound port
        (the one the OS picked when ``port`` is 0).

        Binds to the loopback address by default; pass ``host="0.0.0.0"`` for a Prometheus
        server on another machine.

        :raises RuntimeError: already started.
        :raises OSError: the port cannot be bound (in use, no permission).
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError(f"metrics of job {self.job_id} already served on "
                                   f"{self.host}:{self.port}")
            server, thread = start_http_server(port, addr=host, registry=self.registry)
            self._server, self._thread = server, thread
            self.host, self.port = host, int(server.server_port)
        log.info("Serving metrics of job %s (%s) on http://%s:%d/metrics", self.job_name,
                 self.job_id, host, self.port)
        return self.port

    def stop(self) -> None:
        """Stop serving (idempotent). The series keep their values."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5.0)
        log.info("Stopped serving metrics of job %s (%s)", self.job_name, self.job_id)

    def __enter__(self) -> JobMetrics:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def exposition(self) -> bytes:
        """The series in the Prometheus text format, as the endpoint serves them."""
        return generate_latest(self.registry)

    # -- update hooks ----------------------------------------------------------------------

    def on_checkpoint_completed(self, checkpoint_id: int, duration_ms: float, state_size: int,
                                checkpointed_size: int | None = None) -> None:
        """A checkpoint or savepoint completed (call once per completion)."""
        self.checkpoints_completed.inc()
        self.last_checkpoint_duration_ms.set(duration_ms)
        self.last_checkpoint_size_bytes.set(state_size)
        self.last_checkpoint_checkpointed_size_bytes.set(
            state_size if checkpointed_size is None else checkpointed_size)
        self.last_completed_checkpoint_id.set(checkpoint_id)

    def checkpoint_listener(self, checkpoint_id: int, completed: Any,
                            failure_reason: str | None) -> None:
        """A listener for ``CheckpointCoordinator.listeners``, called as
        ``(checkpoint_id, CompletedCheckpoint or None, failure_reason or None)``:
        ``coordinator.listeners.append(metrics.checkpoint_listener)``."""
        if completed is None:
            self.on_checkpoint_failed(checkpoint_id)
        else:
            self.on_checkpoint_completed(checkpoint_id, completed.duration_ms,
                                         completed.state_size, completed.checkpointed_size)
            stats = getattr(completed, "task_stats", None) or []
            self.on_source_lag(stats)
            self.on_alignment(getattr(completed, "alignment", "aligned"), stats)

    def on_alignment(self, alignment: str, task_stats: list) -> None:
        """How a completed checkpoint aligned: ``aligned``, ``unaligned`` or ``switched``
        (turned unaligned by the aligned timeout), and the tasks' alignment and in-flight
        bytes."""
        if alignment != "aligned":
            self.checkpoints_unaligned.inc()
        if alignment == "switched":
            self.checkpoints_switched_unaligned.inc()
        self.last_checkpoint_alignment_ms.set(
            max((float(t.get("alignment_ms") or 0) for t in task_stats), default=0.0))
        self.last_checkpoint_inflight_bytes.set(
            sum(int(t.get("inflight_bytes") or 0) for t in task_stats))

    def on_checkpoint_failed(self, checkpoint_id: int) -> None:
        """A checkpoint failed (declined, expired or aborted on failover)."""
        self.checkpoints_failed.inc()
        log.debug("Metrics: checkpoint %d of job %s failed", checkpoint_id, self.job_id)

    def on_restart(self) -> None:
        """The job restarts after a failure."""
        self.restarts.inc()

    def on_records(self, operator_uid: str, records_in: int, records_out: int) -> None:
        """Add records an operator read and emitted since the previous call (increments,
        not running totals; negative values are refused)."""
        if records_in < 0 or records_out < 0:
            raise ValueError(f"record counts are increments and cannot be negative, got "
                             f"in={records_in} out={records_out} for {operator_uid!r}")
        labels = {"job_name": self.job_name, "job_id": self.job_id, "operator": operator_uid}
        if records_in:
            self._records_in.labels(**labels).inc(records_in)
        else:  # make the series visible at 0
            self._records_in.labels(**labels)
        if records_out:
            self._records_out.labels(**labels).inc(records_out)
        else:
            self._records_out.labels(**labels)

    def on_late_records(self, operator_uid: str, dropped: int) -> None:
        """Records a window operator dropped as too late since the previous call."""
        self._late.labels(job_name=self.job_name, job_id=self.job_id,
                          operator=operator_uid).inc(dropped)

    def on_operator_counter(self, operator_uid: str, counter: str, increment: int) -> None:
        """An operator counted ``increment`` more events of kind ``counter`` since the
        previous call (the series appears at 0)."""
        self._operator_counter.labels(job_name=self.job_name, job_id=self.job_id,
                                      operator=operator_uid, counter=counter).inc(increment)

    def on_source_lag(self, task_stats: list) -> None:
        """The replication lag the source tasks reported with a checkpoint (the largest over
        an operator's subtasks)."""
        worst: dict[str, dict] = {}
        for task in task_stats:
            for uid, lag in (task.get("source_lag") or {}).items():
                if "lag_bytes" not in lag:  # a Kafka source's: per partition, below
                    self._on_kafka_lag(uid, lag)
                    continue
                w = worst.setdefault(uid, {"lag_bytes": 0, "lag_seconds": 0.0})
                if lag["lag_bytes"] is None or w["lag_bytes"] is None:  # unknown wins
                    w["lag_bytes"] = w["lag_seconds"] = None
                    continue
                w["lag_bytes"] = max(w["lag_bytes"], lag["lag_bytes"])
                w["lag_seconds"] = max(w["lag_seconds"], lag["lag_seconds"])
        for uid, lag in worst.items():
            labels = {"job_name": self.job_name, "job_id": self.job_id, "operator": uid}
            known = lag["lag_bytes"] is not None
            self._connected.labels(**labels).set(1 if known else 0)
            self._lag_bytes.labels(**labels).set(lag["lag_bytes"] if known else float("nan"))
            self._lag_seconds.labels(**labels).set(lag["lag_seconds"] if known else float("nan"))

    def _on_kafka_lag(self, operator_uid: str, lag: dict) -> None:
        """A Kafka source's consumer lag per partition (NaN: unknown, no fetch response yet)."""
        for split, measured in (lag.get("partitions") or {}).items():
            topic, _, partition = split.rpartition(":")
            value = measured.get("lag") if isinstance(measured, dict) else None
            self._kafka_lag.labels(job_name=self.job_name, job_id=self.job_id,
                                   operator=operator_uid, topic=topic, partition=partition).set(
                float("nan") if value is None else value)

    def on_stall(self, operator_uid: str | None, kind: str | None = None,
                 seconds: float = 0.0) -> None:
        """The progress watchdog's verdict: stalled at ``operator_uid`` (``kind`` records or
        watermark) for ``seconds``, or not stalled (``None``: the series goes away)."""
        at = None if operator_uid is None else (operator_uid, kind or "records")
        with self._lock:
            if self._stalled_at is not None and self._stalled_at != at:
                self._stalled_seconds.remove(self.job_name, self.job_id, *self._stalled_at)
            self._stalled_at = at
        self.stalled.set(0 if at is None else 1)
        if at is not None:
            self._stalled_seconds.labels(job_name=self.job_name, job_id=self.job_id,
                                         operator=at[0], kind=at[1]).set(round(seconds, 3))

    def on_watermark(self, operator_uid: str, watermark_ms: int) -> None:
        """An operator's input watermark (the lowest over its subtasks)."""
        self._watermark.labels(job_name=self.job_name, job_id=self.job_id,
                               operator=operator_uid).set(watermark_ms)


__all__ = ["JOB_LABELS", "METRICS_PORT_ENV", "NAMESPACE", "JobMetrics", "metrics_port_from_env"]
