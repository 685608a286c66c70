"""Pipeline DSL.

    p = Pipeline("orders", checkpoint=CheckpointConfig(interval_ms=1000, directory="/data/ckpt"))
    (p.source(GeneratorSource(num_records=100_000, seed=7), uid="gen", parallelism=2)
      .key_by("key")
      .process(RunningSum(), uid="sum", parallelism=3)
      .sink(FileSink("/data/out"), uid="out"))
    result = p.run()

Records are Python dicts. Every stateful operator (source, process, reduce, sink) needs a
stable ``uid``: state in checkpoints and savepoints is matched by it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..config import CheckpointConfig, RestartStrategy
from ..connectors.base import Sink, Source
from ..errors import BadRecordError, ConfigurationError, PipelineDefinitionError
from ..eventtime import (
    TimestampSpec,
    WatermarkStrategy,
    WindowAssigner,
    duration_ms,
)
from ..execution import create_runner
from ..extras import require
from ..names import validate_job_id, validate_job_name
from ..plan.functions import KeyedProcessFunction
from ..plan.graph import BROADCAST, FORWARD, HASH, REBALANCE, Edge, ExecutionGraph, JobGraph, Node
from ..plan.graph import build_execution_graph as _build
from ..plan.job import JobConfig, JobResult, Restore
from ..settings import METADATA_URL
from ..state.descriptors import StateDescriptor
from .broadcast import BroadcastConnectedStream, BroadcastStream
from .joins import ConnectedStreams, IntervalJoin, JoinedStreams
from .temporal import TemporalJoin
from .windowed import WindowedStream, _aggregate_spec

DEFAULT_METADATA_ENV = METADATA_URL.name


def default_metadata_url(checkpoint_directory: str) -> str:
    """``$CKPT_METADATA_URL`` if set, else a SQLite file beside the checkpoints
    (``<checkpoint dir>/metadata.db``).

    A SQLite file cannot live in object storage: for a remote checkpoint directory
    (``s3://...``) the default is ``./checkpoints/metadata.db`` in the current working
    directory (made absolute). Jobs sharing that DB must run from the same directory; in
    production set ``$CKPT_METADATA_URL`` (or ``metadata_url=``) to a PostgreSQL URL.
    """
    env = METADATA_URL.get()
    if env:
        return env
    if checkpoint_directory.startswith("file://"):
        checkpoint_directory = checkpoint_directory[len("file://"):]
    elif "://" in checkpoint_directory:
        return "sqlite:///" + os.path.abspath(os.path.join("checkpoints", "metadata.db"))
    return "sqlite:///" + os.path.abspath(os.path.join(checkpoint_directory, "metadata.db"))


class Pipeline:
    """A checkpointed dataflow job.

    :param name: job name; checkpoints go to ``<checkpoint dir>/<name>/<job id>/``.
    :param max_parallelism: number of key groups; fixed for the life of the job's state.
    :param checkpoint: checkpointing options.
    :param restart_strategy: how the job restarts after a failure.
    :param metadata_url: SQLAlchemy URL of the metadata DB (default: ``$CKPT_METADATA_URL``
        or ``<checkpoint dir>/metadata.db``).
    :param state_backend: ``"heap"`` (Python dicts, full snapshots) or ``"rocksdb"``
        (RocksDB per subtask, state larger than memory).
    :param incremental: RocksDB only: upload only new SST files per checkpoint (as Flink).
    :param heap_incremental: heap only: a checkpoint writes only the keys changed since the
        last completed one, on a chain of files compacted now and then (Flink's changelog
        backend; savepoints stay full). Pays off when a small share of the keys changes
        between checkpoints; when most keys change every checkpoint, a full snapshot costs
        the same.
    """

    def __init__(
        self,
        name: str,
        *,
        max_parallelism: int = 128,
        checkpoint: CheckpointConfig | None = None,
        restart_strategy: RestartStrategy | None = None,
        metadata_url: str | None = None,
        state_backend: str = "heap",
        incremental: bool = True,
        heap_incremental: bool = False,
        version: str | None = None,
        batch_size: int = 1024,
        arrow_batch_size: int | None = None,
    ) -> None:
        validate_job_name(name, "pipeline name")
        if not 1 <= max_parallelism <= 32768:
            raise ConfigurationError(f"max_parallelism {max_parallelism} must be in 1..32768")
        if state_backend not in ("heap", "rocksdb"):
            raise ConfigurationError(
                f"state_backend {state_backend!r} is unknown; use 'heap' or 'rocksdb'")
        if state_backend == "rocksdb":
            require("rocksdb")  # say so now, not when the first task starts
        self.name = name
        self.max_parallelism = max_parallelism
        self.checkpoint = checkpoint or CheckpointConfig()
        self.restart_strategy = restart_strategy or RestartStrategy.fixed_delay()
        self.metadata_url = metadata_url or default_metadata_url(self.checkpoint.directory)
        self.state_backend = state_backend
        self.incremental = incremental
        self.heap_incremental = heap_incremental
        self.version = version
        self.batch_size = batch_size
        if arrow_batch_size is not None and arrow_batch_size < 1:
            raise ConfigurationError(f"arrow_batch_size {arrow_batch_size} must be >= 1")
        #: rows a source reads at a time once it emits Arrow batches (default:
        #: max(batch_size, 65536)); ``batch_size`` is for batches of dict records
        self.arrow_batch_size = arrow_batch_size
        self._graph = JobGraph(name, max_parallelism)

    # -- building ------------------------------------------------------------------------
    def _add(self, kind: str, name: str, uid: str | None, parallelism: int | None,
             payload: object = None, key_selector=None) -> Node:
        node = Node(len(self._graph.nodes), kind, name, uid, parallelism, payload, key_selector)
        self._graph.nodes.append(node)
        return node

    def _connect(self, upstream: Node, node: Node, partitioning: str, key_selector=None,
                 side: str | None = None, *, input: int | None = None) -> None:
        self._graph.edges.append(Edge(upstream.id, node.id, partitioning, key_selector, side,
                                      input))

    def _two_input(self, kind: str, name: str, uid: str, parallelism: int | None,
                   payload: object, inputs: tuple, partitionings: tuple = (HASH, HASH),
                   first_time_only: bool = False) -> DataStream:
        """A node with two inputs: ``inputs`` is ``((stream, key selector), (stream, key
        selector))``, partitioned into inputs 1 and 2 (hash by default; :mod:`.joins`,
        :mod:`.broadcast`). ``first_time_only``: the output keeps input 1's event time."""
        node = self._add(kind, name, uid, parallelism, payload)
        for index, ((stream, selector), how) in enumerate(zip(inputs, partitionings, strict=True), 1):
            for head in stream._heads:
                self._connect(head, node, how, selector, stream._side, input=index)
        first, second = inputs[0][0], inputs[1][0]
        # one event time downstream only if both inputs read it from the same place
        same = first_time_only or first._timestamp == second._timestamp
        return DataStream(self, [node], FORWARD, timestamp=first._timestamp if same else None)

    def source(self, src: Source, *, uid: str, parallelism: int = 1, name: str | None = None,
               watermarks: WatermarkStrategy | None = None) -> DataStream:
        """Read ``src``. ``watermarks``: event time for windows and event-time timers
        downstream (:class:`~.eventtime.WatermarkStrategy`)."""
        if not isinstance(src, Source):
            raise PipelineDefinitionError(f"source {uid!r}: {src!r} is not a Source")
        if watermarks is not None and not isinstance(watermarks, WatermarkStrategy):
            raise PipelineDefinitionError(
                f"source {uid!r}: watermarks={watermarks!r} is not a WatermarkStrategy")
        node = self._add("source", name or f"Source: {src.describe()}", uid, parallelism, src)
        node.watermarks = watermarks
        return DataStream(self, [node], FORWARD,
                          timestamp=watermarks.timestamp if watermarks is not None else None)

    def job_graph(self) -> JobGraph:
        return self._graph

    def execution_graph(self) -> ExecutionGraph:
        return _build(self._graph)

    def job_config(self) -> JobConfig:
        """The settings a runner needs (the runners never see the Pipeline)."""
        return JobConfig(
            name=self.name, max_parallelism=self.max_parallelism, checkpoint=self.checkpoint,
            restart_strategy=self.restart_strategy, metadata_url=self.metadata_url,
            state_backend=self.state_backend, incremental=self.incremental,
            heap_incremental=self.heap_incremental,
            version=self.version, batch_size=self.batch_size,
            arrow_batch_size=self.arrow_batch_size)

    # -- running -------------------------------------------------------------------------
    def run(self, runner: str = "local", *, restore: str | Restore | None = None,
            allow_non_restored_state: bool = False, job_id: str | None = None,
            claim_mode: str = "NO_CLAIM", trust_snapshot: bool = False,
            fence_sinks: bool = False, **runner_options) -> JobResult:
        """Run the job until it finishes, fails or is cancelled.

        :param runner: ``"local"`` (one OS process per slot on this machine) or ``"spark"``
            (one Spark barrier stage; options ``spark=SparkSession``, ``master="local[4]"``,
            ``coordinator_host``, ``coordinator_port``).
        :param restore: ``None`` (fresh state), ``"latest"`` (the latest completed checkpoint
            of any job with this name, if there is one), a checkpoint/savepoint path,
            ``"standby:JOB"`` (wait for job ``JOB`` to end, then restore what it left) or a
            :class:`~..plan.job.Restore`. The text form is parsed here, once; the runner and
            the job master get the :class:`~..plan.job.Restore`.
        :param allow_non_restored_state: drop state of snapshot operators whose uid is not in
            the pipeline instead of failing the restore.
        :param claim_mode: ``"NO_CLAIM"`` (default: the restored snapshot is never deleted by
            this job) or ``"CLAIM"`` (this job owns it; retention deletes it when subsumed).
        :param trust_snapshot: restore a snapshot that is not signed with this metadata DB's
            key (or ``$CKPT_SNAPSHOT_HMAC_KEY``): a savepoint of another deployment, or one
            ``ckpt state write`` wrote without a key. Without it such a snapshot is refused
            (``UntrustedSnapshotError``). The job's own checkpoints are signed either way.
        :param fence_sinks: hold every sink's commits (a blue-green validation run): the job
            runs and checkpoints, its sinks pre-commit each epoch but never publish it, and
            what they staged is discarded when the job ends. Its snapshots can only be
            restored by another fenced job. A sink that cannot hold its commits (upsert
            mode) makes the job refuse to start (``ConfigurationError``).
        """
        # the name may have been overridden after construction (ckpt run --job-name)
        validate_job_name(self.name)
        if job_id is not None:
            validate_job_id(job_id)
        config = self.job_config()
        if fence_sinks:
            config = dataclasses.replace(config, fence_sinks=True)
        return create_runner(runner, **runner_options).run(
            self.execution_graph(), config, restore=Restore.parse(restore),
            allow_non_restored_state=allow_non_restored_state,
            job_id=job_id, claim_mode=claim_mode, trust_snapshot=trust_snapshot,
        )


class FieldSelector:
    """``key_by("field")``: the key is one field of the record. Unlike an arbitrary function,
    the engine can read it from an Arrow column, so hashing and partitioning are vectorized."""

    __slots__ = ("field",)

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, record: dict) -> object:
        try:
            return record[self.field]
        except KeyError:
            fields = ", ".join(map(str, list(record)[:20])) if isinstance(record, dict) else "-"
            raise BadRecordError(f"key_by field {self.field!r} is missing from a record "
                                 f"(its fields: {fields})") from None
        except TypeError:
            raise BadRecordError(f"key_by field {self.field!r}: the record is a "
                                 f"{type(record).__name__}, not a dict") from None

    def __reduce__(self):
        return (FieldSelector, (self.field,))

    def __repr__(self) -> str:
        return f"FieldSelector({self.field!r})"


def _selector(field_or_fn: str | Callable[[dict], object]) -> Callable[[dict], object]:
    if isinstance(field_or_fn, str):
        return FieldSelector(field_or_fn)
    if callable(field_or_fn):
        return field_or_fn
    raise PipelineDefinitionError(f"key_by needs a field name or a function, got {field_or_fn!r}")


class DataStream:
    """A stream of dict records; each transformation returns a new stream."""

    def __init__(self, pipeline: Pipeline, heads: list[Node], partitioning: str,
                 key_selector=None, *, timestamp: TimestampSpec | None = None,
                 side: str | None = None) -> None:
        self._p = pipeline
        self._heads = heads
        self._partitioning = partitioning
        self._key_selector = key_selector
        self._side = side
        #: where the records' event time is (from the sources' watermark strategy)
        self._timestamp = timestamp

    def _downstream(self, node: Node, timestamp: TimestampSpec | None = None) -> DataStream:
        """The stream out of ``node`` (forward-partitioned), for the DSL modules."""
        return DataStream(self._p, [node], FORWARD, timestamp=timestamp)

    def _then(self, kind: str, name: str, uid: str | None, parallelism: int | None,
              payload=None, key_selector=None) -> Node:
        node = self._p._add(kind, name, uid, parallelism, payload, key_selector)
        node.timestamp = self._timestamp
        for head in self._heads:
            self._p._connect(head, node, self._partitioning, self._key_selector, self._side)
        return node

    def _one(self, kind: str, fn, uid, parallelism, name) -> DataStream:
        if not callable(fn):
            raise PipelineDefinitionError(f"{kind} needs a callable, got {fn!r}")
        label = name or f"{kind}({getattr(fn, '__name__', type(fn).__name__)})"
        return DataStream(self._p, [self._then(kind, label, uid, parallelism, fn)], FORWARD,
                          timestamp=self._timestamp)

    def map(self, fn: Callable[[dict], dict], *, uid: str | None = None,
            parallelism: int | None = None, name: str | None = None) -> DataStream:
        return self._one("map", fn, uid, parallelism, name)

    def flat_map(self, fn: Callable[[dict], Iterable[dict]], *, uid: str | None = None,
                 parallelism: int | None = None, name: str | None = None) -> DataStream:
        return self._one("flat_map", fn, uid, parallelism, name)

    def filter(self, fn: Callable[[dict], bool], *, uid: str | None = None,
               parallelism: int | None = None, name: str | None = None) -> DataStream:
        return self._one("filter", fn, uid, parallelism, name)

    def map_batches(self, fn, *, uid: str | None = None, parallelism: int | None = None,
                    name: str | None = None) -> DataStream:
        """``fn(pyarrow.RecordBatch) -> pyarrow.RecordBatch`` over each batch of records."""
        return self._one("map_batches", fn, uid, parallelism, name)

    def assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy) -> DataStream:
        """Give the source producing this stream a watermark strategy (the same as
        ``source(..., watermarks=strategy)``). Watermarks are generated per split, so only
        a source's own output accepts one."""
        if not isinstance(strategy, WatermarkStrategy):
            raise PipelineDefinitionError(f"{strategy!r} is not a WatermarkStrategy")
        bad = [h for h in self._heads if h.kind != "source"]
        if bad or self._side is not None:
            node = bad[0] if bad else self._heads[0]
            raise PipelineDefinitionError(
                f"a watermark strategy needs a source: operator {node.uid or node.name!r} is a "
                f"{node.kind}; pass watermarks=... to the source(s) it reads from")
        for h in self._heads:
            if h.watermarks is not None:
                raise PipelineDefinitionError(f"source {h.uid!r} already has a watermark strategy")
            h.watermarks = strategy
        return DataStream(self._p, self._heads, self._partitioning, self._key_selector,
                          timestamp=strategy.timestamp)

    def late_records(self) -> DataStream:
        """The records the window operator producing this stream found too late (after
        its allowed lateness), as a stream of their own (Flink's late-data side output),
        instead of dropping them. Records keep their form: dicts, or Arrow batches after a
        vectorized window."""
        kinds = {h.kind for h in self._heads}
        if self._side is not None or len(self._heads) != 1 or not kinds <= {"window", "window_aggregate"}:
            raise PipelineDefinitionError(
                "late_records() is available on the output of window(...).aggregate(), "
                ".reduce() or .process() only")
        return DataStream(self._p, self._heads, FORWARD, timestamp=self._heads[0].timestamp,
                          side="late")

    def to_changelog(self) -> DataStream:
        """The output of the ``aggregate()`` producing this stream as a changelog (``-U``
        old / ``+U`` new per changed key, ``+I`` new keys, ``-D`` keys whose count fell to
        0), for every consumer of that operator."""
        return self._emitting("changelog")

    def to_upsert(self) -> DataStream:
        """The output of the ``aggregate()`` producing this stream as upserts: the key and
        its latest results (``+I``/``+U``), ``-D`` when the key is gone."""
        return self._emitting("upsert")

    def _emitting(self, emit: str) -> DataStream:
        heads = self._heads
        if self._side is not None or len(heads) != 1 or heads[0].kind != "aggregate":
            raise PipelineDefinitionError(f"to_{emit}() is available on the output of "
                                          "key_by(...).aggregate(...) only")
        spec: Any = heads[0].payload
        if spec.emit not in (None, emit):
            raise PipelineDefinitionError(f"aggregate {heads[0].uid!r} already emits "
                                          f"{spec.emit!r}")
        spec.emit = emit
        return DataStream(self._p, heads, FORWARD)

    def rebalance(self) -> DataStream:
        return DataStream(self._p, self._heads, REBALANCE, timestamp=self._timestamp,
                          side=self._side)

    def broadcast(self, *states: str | StateDescriptor) -> DataStream | BroadcastStream:
        r"""Send every record to every subtask downstream. With state names (or
        ``MapStateDescriptor``\ s): a :class:`~.broadcast.BroadcastStream` to ``connect`` a
        keyed stream to, whose function keeps those broadcast states (:mod:`.broadcast`)."""
        if states:
            return BroadcastStream(self, states)
        return DataStream(self._p, self._heads, BROADCAST, timestamp=self._timestamp,
                          side=self._side)

    def union(self, *others: DataStream) -> DataStream:
        heads = list(self._heads)
        for o in (self, *others):
            if o._side is not None:
                raise PipelineDefinitionError(
                    "union: a late_records() stream cannot be unioned directly; map() it first")
        for o in others:
            if o._p is not self._p:
                raise PipelineDefinitionError("union: streams belong to different pipelines")
            heads.extend(o._heads)
        # one event time for the union only if every input reads it from the same place
        same = all(o._timestamp == self._timestamp for o in others)
        return DataStream(self._p, heads, REBALANCE, timestamp=self._timestamp if same else None)

    def connect(self, other: DataStream | BroadcastStream) -> ConnectedStreams | BroadcastConnectedStream:
        """Both streams into one two-input operator: ``a.connect(b).key_by(key_a, key_b)
        .process(KeyedCoProcessFunction, uid=...)`` (:mod:`.joins`), or a keyed stream and a
        broadcast one: ``a.key_by(k).connect(b.broadcast("rules"))
        .process(KeyedBroadcastProcessFunction, uid=...)`` (:mod:`.broadcast`)."""
        if isinstance(other, BroadcastStream):
            return BroadcastConnectedStream(self, other)
        return ConnectedStreams(self, other)

    def join(self, other: DataStream) -> JoinedStreams:
        """Window join: ``a.join(b).where(key_a).equal_to(key_b).window(assigner)
        .apply(fn, uid=...)`` (:mod:`.joins`)."""
        return JoinedStreams(self, other)

    def key_by(self, key: str | Callable[[dict], object]) -> KeyedStream:
        return KeyedStream(self._p, self._heads, _selector(key), timestamp=self._timestamp,
                           side=self._side)

    def materialize_upserts(self, *, key: str | Sequence[str], uid: str,
                            parallelism: int | None = None,
                            name: str | None = None) -> DataStream:
        """Flink's ``SinkUpsertMaterializer``: keyed by ``key`` (an upsert sink's key), keep
        the rows alive per key and emit the last one as ``+U`` (``-D`` when none is left),
        so the order between a ``-D`` and a ``+I`` of one key from different subtasks no
        longer matters. ``sink()`` adds one itself where needed (:mod:`.upsert_materializer`)."""
        from .upsert_materializer import materialize_upserts

        return materialize_upserts(self, key=key, uid=uid, parallelism=parallelism, name=name)

    def sink(self, sink: Sink, *, uid: str, parallelism: int | None = None,
             name: str | None = None, materialize_upserts: bool | None = None) -> None:
        """Write to ``sink``. An upsert sink fed by a ``regular_join`` at a parallelism above
        1 gets an upsert materializer in front (uid ``<uid>.upsert-materializer``);
        ``materialize_upserts=True``/``False`` forces it on/off (:mod:`.upsert_materializer`)."""
        if not isinstance(sink, Sink):
            raise PipelineDefinitionError(f"sink {uid!r}: {sink!r} is not a Sink")
        from .upsert_materializer import before_sink

        stream = before_sink(self, sink, uid=uid, parallelism=parallelism,
                             materialize=materialize_upserts)
        stream._then("sink", name or f"Sink: {sink.describe()}", uid, parallelism, sink)


class KeyedStream(DataStream):
    """A stream partitioned by key: records with the same key go to the same subtask."""

    def __init__(self, pipeline: Pipeline, heads: list[Node], key_selector, *,
                 timestamp: TimestampSpec | None = None, side: str | None = None) -> None:
        super().__init__(pipeline, heads, HASH, key_selector, timestamp=timestamp, side=side)

    def process(self, fn: KeyedProcessFunction, *, uid: str, parallelism: int | None = None,
                name: str | None = None) -> DataStream:
        """Run ``fn`` per record with keyed state and timers; ``ctx.timestamp`` is the
        record's event time when the sources have a watermark strategy."""
        if not isinstance(fn, KeyedProcessFunction):
            raise PipelineDefinitionError(
                f"process {uid!r}: {fn!r} must be a KeyedProcessFunction instance"
            )
        node = self._then("process", name or f"Process: {type(fn).__name__}", uid, parallelism,
                          fn, self._key_selector)
        return DataStream(self._p, [node], FORWARD, timestamp=self._timestamp)

    def interval_join(self, other: KeyedStream, *, how: str = "inner") -> IntervalJoin:
        """Join with the keyed stream ``other`` on key and event time:
        ``.between(lower, upper).process(fn, uid=...)`` pairs each record ``a`` with the
        records ``b`` of its key where ``a.ts + lower <= b.ts <= a.ts + upper``. ``how``:
        ``"inner"``, ``"left"``, ``"right"`` or ``"full"`` (outer: a row that matched nothing
        is emitted alone once the watermark passes its bound) (:mod:`.joins`)."""
        if not isinstance(other, KeyedStream):
            raise PipelineDefinitionError("interval_join: key the other stream too: "
                                          "a.key_by(...).interval_join(b.key_by(...))")
        return IntervalJoin(self, other, how)

    def temporal_join(self, table: KeyedStream, *, how: str = "inner") -> TemporalJoin:
        """Join each record with the version of ``table``'s row of its key valid at the
        record's event time (Flink's ``FOR SYSTEM_TIME AS OF``): ``table`` is a changelog
        or upsert stream (:mod:`.changelog`), or a bounded source without event time (a
        static table). ``.process(fn, uid=...)``; ``how``: ``"inner"`` or ``"left"``
        (:mod:`.temporal`)."""
        if not isinstance(table, KeyedStream):
            raise PipelineDefinitionError("temporal_join: key the table stream too: "
                                          "a.key_by(...).temporal_join(table.key_by(...))")
        return TemporalJoin(self, table, how)

    def regular_join(self, other: KeyedStream, *, how: str = "inner", uid: str,
                     left_primary_key: str | Sequence[str] | None = None,
                     right_primary_key: str | Sequence[str] | None = None,
                     fn: Callable[[dict | None, dict | None], dict] | None = None,
                     state_ttl=None, parallelism: int | None = None,
                     name: str | None = None, left_fields: Sequence[str] | None = None,
                     right_fields: Sequence[str] | None = None) -> DataStream:
        """Flink SQL's regular join on the keys (no time bound): both inputs may be
        changelogs, the output is one (``+I`` per joined row added, ``-D`` per joined row
        gone). ``how``: ``"inner"``, ``"left"``, ``"right"``, ``"full"``;
        ``left_primary_key`` / ``right_primary_key``: a side's primary key (field or tuple;
        one row per key, a ``-U``/``-D`` needs only its fields); ``fn(left, right) -> dict``:
        the output fields (default: both rows' fields, a shared one refused); ``state_ttl``:
        drop rows not written for that long (timedelta or ms; results may then be
        incomplete); ``left_fields`` / ``right_fields``: without ``fn``, a row emitted alone
        gets the other side's fields as None. Semantics and state: :mod:`.regular_join`."""
        from .regular_join import regular_join

        return regular_join(self, other, how=how, uid=uid, left_primary_key=left_primary_key,
                            right_primary_key=right_primary_key, fn=fn, state_ttl=state_ttl,
                            parallelism=parallelism, name=name, left_fields=left_fields,
                            right_fields=right_fields)

    def _needs_event_time(self, what: str, uid: str) -> TimestampSpec:
        if self._timestamp is None:
            raise PipelineDefinitionError(
                f"{what} {uid!r}: windows need event time, and no watermark strategy "
                "reaches this operator: pass watermarks=WatermarkStrategy.for_bounded_out_of_"
                "orderness(...) to every source feeding it (with the same timestamp field)")
        return self._timestamp

    def window(self, assigner: WindowAssigner, *, allowed_lateness=0) -> WindowedStream:
        """Event-time windows per key: ``TumblingWindows(size)`` or ``SlidingWindows(size,
        slide)``. A window's result is emitted when the watermark passes its end; records up
        to ``allowed_lateness`` after that update it (and re-emit), later ones are dropped
        and counted. Needs a watermark strategy at the sources."""
        if not isinstance(assigner, WindowAssigner):
            raise PipelineDefinitionError(
                f"window: {assigner!r} is not a window assigner (TumblingWindows, "
                "SlidingWindows, SessionWindows)")
        lateness = duration_ms(allowed_lateness, "allowed_lateness")
        if lateness < 0:
            raise PipelineDefinitionError(f"allowed_lateness must be >= 0, got {lateness} ms")
        return WindowedStream(self, assigner, lateness)

    def aggregate(self, *, uid: str, parallelism: int | None = None, name: str | None = None,
                  ttl=None, emit: str | None = None,
                  **aggregations: str | tuple[str, str]) -> DataStream:
        """Built-in running aggregations per key, vectorized (no Python code per record).

        Each keyword names an output column: ``"count"`` counts rows; ``(function, column)``
        with function ``count`` (non-null values), ``sum``, ``min``, ``max``, ``mean`` or
        ``count_distinct`` (exact number of distinct non-null values: integer, string or
        binary columns; a column null where a condition fails gives SQL's
        ``COUNT(DISTINCT x) FILTER (WHERE ...)``)::

            stream.key_by("user").aggregate(uid="totals", events="count",
                                             spent=("sum", "amount"), avg=("mean", "amount"))

        For every input batch the operator emits one row per key the batch touched: the key
        column and that key's running results so far (Structured Streaming's update mode).
        Needs ``key_by(field name)``. State is columnar in memory with either state backend.
        ``ttl`` (timedelta or ms of processing time): a key not updated for that long starts
        over from zero and is dropped from the next checkpoint, so state stops growing.
        Changelog input (an ``_op`` field: :mod:`.changelog`) retracts ``-U``/``-D`` rows;
        ``emit`` is ``"update"``, ``"changelog"`` or ``"upsert"`` (default: ``"changelog"``
        for changelog input, else ``"update"``; :mod:`.runtime.operators.changelog_agg`).
        """
        from ..state.columnar import AggregateSpec

        if emit is not None and emit not in AggregateSpec.EMIT_MODES:
            raise PipelineDefinitionError(f"aggregate {uid!r}: emit={emit!r} is not one of "
                                          f"{', '.join(AggregateSpec.EMIT_MODES)}")
        spec = _aggregate_spec("aggregate", uid, self._key_selector, aggregations)
        spec.emit = emit
        if ttl is not None:
            spec.ttl_ms = duration_ms(ttl, f"aggregate {uid!r}: ttl")
            if spec.ttl_ms <= 0:
                raise PipelineDefinitionError(f"aggregate {uid!r}: ttl must be > 0")
            if any(fn == "count_distinct" for _, fn, _ in spec.aggregations):
                raise PipelineDefinitionError(
                    f"aggregate {uid!r}: count_distinct does not support ttl yet")
        node = self._then("aggregate", name or f"Aggregate: {', '.join(aggregations)}", uid,
                          parallelism, spec, self._key_selector)
        return DataStream(self._p, [node], FORWARD)

    def top_n(self, n: int, *, by: str, uid: str, descending: bool = True,
              rank_field: str = "rank_number", parallelism: int | None = None,
              name: str | None = None) -> DataStream:
        """The ``n`` rows with the highest ``by`` per key (lowest with ``descending=False``;
        ties: the earlier row first), vectorized. For every input batch, emits the rows
        whose rank is new or changed with their rank in ``rank_field`` (1..n): an upsert
        stream keyed by (key, rank). Needs ``key_by(field name)`` (:mod:`.state.columnar.topn_state`)."""
        from ..state.columnar.topn_state import top_n_spec

        spec = top_n_spec(uid, self._key_selector, n, by, descending, rank_field)
        node = self._then("top_n", name or f"Top {n} by {by}", uid, parallelism, spec,
                          self._key_selector)
        return DataStream(self._p, [node], FORWARD)

    def reduce(self, fn: Callable[[dict, dict], dict], *, uid: str,
               parallelism: int | None = None, name: str | None = None) -> DataStream:
        """Running reduce per key: emits ``fn(previous, record)`` for every record."""
        if not callable(fn):
            raise PipelineDefinitionError(f"reduce {uid!r} needs a callable")
        node = self._then("reduce", name or f"Reduce: {getattr(fn, '__name__', 'fn')}", uid,
                          parallelism, fn, self._key_selector)
        return DataStream(self._p, [node], FORWARD, timestamp=self._timestamp)
