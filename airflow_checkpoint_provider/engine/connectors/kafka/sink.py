"""``KafkaSink``: exactly-once output to a Kafka topic through the engine's checkpoints.

Why not Flink's design. Flink's KafkaSink opens a Kafka transaction per checkpoint epoch,
pre-commits it at the barrier and, after a crash, resumes and commits the open transaction
through internals of the Java client. librdkafka cannot resume another producer's open
transaction, so a transaction left open by a crash could only be aborted: the epoch's
records would be lost.

This design (stage in the checkpoint, publish once with a commit marker):

1. ``write`` serializes each record (key, value, timestamp) into the open epoch's buffer.
2. ``pre_commit`` (at the barrier) returns the epoch's records (msgpack, base64: the
   description is part of the checkpoint's JSON ``_metadata``) as the transaction
   description: the engine writes them into the checkpoint, so they are durable once the
   checkpoint completes, without any broker round trip on the checkpoint path.
3. ``commit`` (on notify-checkpoint-complete) publishes each epoch in ONE Kafka transaction
   with its commit marker: the transaction also commits the offset of consumer group
   ``<transactional.id>-<job id>`` on partition 0 of the marker topic to the epoch number
   (Kafka's transactional offset commit, as read-process-write jobs commit their input
   offsets): records and marker become visible together or not at all. An epoch this
   writer staged itself is published from the encoded records it kept in memory since
   ``pre_commit`` (up to :attr:`KafkaSink.in_memory_limit_bytes` of them; the others, and
   every epoch handed over in a description this writer did not produce itself, are read
   back from the description, validated and decoded once): the profile of a Kafka ->
   per-record -> Kafka job had a quarter of the task's time in decoding each epoch twice.
4. ``recover`` (on restore) gets the restored epochs (those of a completed checkpoint that
   may or may not have been published before the crash). Epochs staged by subtask ``o`` are
   handled by new subtask ``o % parallelism`` with the producer of ``transactional.id``
   ``<prefix>-<staging job's name>-<uid>-<o>``: ``init_transactions`` fences any older producer with
   that id (a zombie attempt) and aborts its open transaction (its pending offset commit
   too); the writer then fetches the marker group's committed offset (``read_committed``:
   stable offsets only) and publishes only the epochs above it, in epoch order. An epoch is
   never published twice, and never lost. (A first version kept markers as records of a
   marker topic read up to a sentinel; an open transaction of any other writer on that
   partition held every restore back.)

The Kafka transaction spans only the publish of one epoch (not the checkpoint interval).
A publisher that dies in the middle of one leaves it open, holding back ``read_committed``
consumers of its partitions (the last stable offset) and its marker; ``recover`` aborts it
at once: ``init_transactions`` with the same transactional.id (the staging job's, also when
a job of another name restores: green restoring blue's savepoint) makes the coordinator
abort the open transaction before it answers (Apache Kafka: the client retries
``CONCURRENT_TRANSACTIONS`` for the few ms the abort takes). ``transaction.timeout.ms``
(``transaction_timeout_ms``, default 60 s) only matters when no job restores the checkpoint
(an abandoned job): then the broker aborts the transaction after that time. The price of
the design: each epoch's records are stored in the checkpoint (the sink suits outputs of up
to some tens of MB per checkpoint interval) and published once the checkpoint completes
(latency = checkpoint interval, as with every 2PC sink).

A fenced job (``fence_sinks=True``, a blue-green validation run) creates no producer: it
stages and never publishes, and never fences the live job's producers. ``delivery=
"at_least_once"`` produces directly (idempotent producer), flushes at every barrier, and
may duplicate the records after the last completed checkpoint on a failure.

Broker caveats (Tansu 0.6, the test broker; ``tests/integration/engine/connectors/kafka/
tansu_transactions.py`` shows each against the broker): (1) it does not hide aborted
transactions from ``read_committed`` consumers (no aborted-transaction index in its Fetch
answers), so a crash in the middle of a publish leaves what reached the broker visible; the
marker is sent only once every record of the epoch is acknowledged, so an interrupted
publish can duplicate (the epoch is published again) but never lose records. (2) It
completes a committed transaction (records visible, offset commits applied: our marker) only
once no other transaction that wrote to the same partition is open: a ``commit_transaction``
that returned stays invisible, marker included, while another subtask's publish is open; a
restore that reads the marker then publishes the epoch again. (3) Concurrent commits of
several producers on one partition can wedge it (a race in its EndTxn handling): nothing
committed later on that partition becomes visible, and no marker is applied, until the
producer whose commit raced commits again, which never happens once it is gone (a stop with
savepoint, a restore). ``partitioner="fixed"`` avoids (2) and (3): each partition gets the
transactions of one transactional.id. Apache Kafka has none of the three.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgpack

from ...errors import CorruptCheckpointError
from ..base import ConnectorContext, Sink, SinkWriter, Transaction
from ..capabilities import SupportsDiscardHeld
from .client import (
    METADATA_TIMEOUT_S,
    base_config,
    client_config,
    ensure_topic,
    list_partitions,
    require_client,
)
from .codec import BytesOf, json_value
from .errors import KafkaConfigurationError, KafkaPublishError

log = logging.getLogger(__name__)

DEFAULT_MARKER_TOPIC = "_ckpt_sink_commits"
_VERSION = 1


class KafkaSink(Sink):
    """Write records to a Kafka topic, exactly once by default (see the module docstring).

    :param bootstrap_servers: ``"host:port,host:port"`` or a list.
    :param topic: the output topic (it must exist).
    :param key: the record field whose value is the Kafka key, or a function ``record ->
        str | bytes | None``; ``None``: no key.
    :param value_serializer: a function ``record -> bytes``; default: compact JSON.
    :param timestamp_field: a field holding the record's Kafka timestamp (epoch ms);
        default: the broker's/producer's time of the publish.
    :param delivery: ``"exactly_once"`` (default) or ``"at_least_once"``.
    :param marker_topic: the topic whose partition 0 carries the commit markers (consumer
        group offsets; no records are written to it), created with one partition if missing
        and shared by every exactly-once sink of a cluster.
    :param transactional_id_prefix: prefix of the sink's ``transactional.id``s
        (``<prefix>-<job name>-<uid>-<subtask>``).
    :param transaction_timeout_ms: ``transaction.timeout.ms`` of the producers.
    :param partitioner: ``"key"`` (default): the producer's partitioner (librdkafka's, by the
        key's hash); ``"fixed"``: the records staged by subtask ``i`` go to partition
        ``i % partitions`` (Flink's ``FlinkFixedPartitioner``): each partition then gets the
        transactions of one transactional.id at a time, never concurrent ones of several (the
        choice for brokers whose transaction coordinator mishandles those: Tansu 0.6, see
        the module docstring). A key stays in one partition while the parallelism does.
    :param producer_config: more librdkafka settings for the producers.
    """

    slot_imports = ("confluent_kafka",)
    #: librdkafka settings of the producers that ``producer_config`` may override (not given
    #: to the marker consumers: librdkafka warns about producer settings there)
    producer_defaults: Mapping[str, object] = {}
    #: the most memory (estimated: :func:`_held_size`) an exactly-once writer spends on
    #: keeping the encoded records of the epochs it staged from ``pre_commit`` to their
    #: publish; an epoch beyond it is decoded from its staged description instead
    in_memory_limit_bytes: int = 64 << 20

    def __init__(self, bootstrap_servers: str | Sequence[str], topic: str, *,
                 key: str | Callable[[dict], object] | None = None,
                 value_serializer: Callable[[dict], bytes] | None = None,
                 timestamp_field: str | None = None, delivery: str = "exactly_once",
                 marker_topic: str = DEFAULT_MARKER_TOPIC, transactional_id_prefix: str = "ckpt",
                 transaction_timeout_ms: int = 60_000, partitioner: str = "key",
                 producer_config: Mapping[str, object] | None = None) -> None:
        if partitioner not in ("key", "fixed"):
            raise KafkaConfigurationError(f"KafkaSink: partitioner={partitioner!r}: use 'key' "
                                          "or 'fixed'")
        if delivery not in ("exactly_once", "at_least_once"):
            raise KafkaConfigurationError(f"KafkaSink: delivery={delivery!r}: use 'exactly_once' "
                                          "or 'at_least_once'")
        if not topic or not isinstance(topic, str):
            raise KafkaConfigurationError(f"KafkaSink: topic={topic!r} is not a topic name")
        if marker_topic == topic:
            raise KafkaConfigurationError("KafkaSink: marker_topic must differ from the output topic")
        self.conf = base_config(bootstrap_servers, producer_config)
        self.topic = topic
        self.key = key
        self.value_serializer: Callable[[dict], bytes | None] = (
            BytesOf(value_serializer, "KafkaSink: value_serializer") if value_serializer
            else json_value)
        self.timestamp_field = timestamp_field
        self.delivery = delivery
        self.marker_topic = marker_topic
        self.transactional_id_prefix = transactional_id_prefix
        self.transaction_timeout_ms = transaction_timeout_ms
        self.partitioner = partitioner

    def create_writer(self, ctx: ConnectorContext) -> SinkWriter:
        if self.delivery == "at_least_once":
            return _AtLeastOnceWriter(self, ctx)
        return _ExactlyOnceWriter(self, ctx)

    def lineage_dataset(self) -> tuple[str, str] | None:
        return f"kafka://{self.conf['bootstrap.servers'].split(',')[0]}", self.topic

    def describe(self) -> str:
        return f"kafka({self.topic}, {self.delivery})"

    def can_hold_commits(self) -> bool:
        return self.delivery == "exactly_once"

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> None:
        """A fenced job staged its epochs in its own checkpoints only: nothing to remove."""

    def check_restored_transactions(self, transactions: Sequence[Transaction], *,
                                    location: str) -> None:
        for t in transactions:
            _check_transaction(t, location)

    # -- what both writers share ------------------------------------------------------------
    def encode(self, record: dict) -> list:
        """``[key bytes | None, value bytes, timestamp ms | None]`` of ``record``."""
        key = self.key
        k = (key(record) if callable(key) else record.get(key)) if key is not None else None
        if k is not None and not isinstance(k, bytes):
            k = str(k).encode()
        ts = record.get(self.timestamp_field) if self.timestamp_field else None
        return [k, self.value_serializer(record), int(ts) if ts is not None else None]

    def encode_batch(self, records: list[dict]) -> list[list]:
        """The encoded records of a batch the writer got (:meth:`encode` each; an upsert
        sink drops some and turns others into tombstones: :mod:`.upsert`)."""
        encode = self.encode
        return [encode(r) for r in records]

    def transactional_id(self, job_name: str, uid: str, subtask: int) -> str:
        return f"{self.transactional_id_prefix}-{job_name}-{uid}-{subtask}"

    def partition_of(self, subtask: int) -> dict[str, int]:
        """The ``produce`` arguments that place the records staged by ``subtask``: none (the
        producer's partitioner) unless ``partitioner="fixed"``."""
        if self.partitioner != "fixed":
            return {}
        partitions = list_partitions(self.conf, topics=[self.topic])[self.topic]
        return {"partition": subtask % partitions}


def stage(records: list[list]) -> str:
    """An epoch's encoded records as they go into the checkpoint: msgpack (no pickle), in
    base64 (a sink's transaction descriptions are part of the JSON ``_metadata``)."""
    return base64.b64encode(msgpack.packb(records, use_bin_type=True)).decode("ascii")


def unstage(t: dict) -> list[list]:
    return msgpack.unpackb(base64.b64decode(t["records"]), raw=False)


def _held_size(staged: str, count: int) -> int:
    """The memory an epoch's encoded records take as Python objects, estimated: the bytes
    they hold (3/4 of the base64 description) and ~150 bytes of objects per record (a
    3-item list, two ``bytes`` headers, an int)."""
    return len(staged) * 3 // 4 + 150 * count


def _job_name(t: dict) -> str | None:
    """The name of the job that staged transaction ``t`` (``None`` if not recorded)."""
    name = t.get("job_name")
    return name if isinstance(name, str) and name else None


def _check_transaction(t: object, location: str) -> dict[str, Any]:
    """A restored transaction description (untrusted input: from a ``_metadata`` file)."""
    return _checked_records(t, location)[0]


def _checked_records(t: object, location: str) -> tuple[dict[str, Any], list[list]]:
    """A restored transaction description (untrusted input: from a ``_metadata`` file) and
    its records, decoded once; :class:`CorruptCheckpointError` if either is malformed."""
    if (isinstance(t, dict) and t.get("v") == _VERSION and isinstance(t.get("job"), str)
            and isinstance(t.get("subtask"), int) and not isinstance(t["subtask"], bool)
            and t["subtask"] >= 0 and isinstance(t.get("epoch"), int)
            and isinstance(t.get("count"), int) and isinstance(t.get("records"), str)):
        try:
            records = unstage(t)
        except (ValueError, TypeError, msgpack.UnpackException):
            records = None
        if (isinstance(records, list) and len(records) == t["count"]
                and all(isinstance(r, list) and len(r) == 3
                        and (r[0] is None or isinstance(r[0], bytes))
                        and (r[1] is None or isinstance(r[1], bytes))  # None: a tombstone
                        and (r[2] is None or (isinstance(r[2], int) and not isinstance(r[2], bool)))
                        for r in records)):
            return t, records
    raise CorruptCheckpointError(
        f"Kafka sink: a staged transaction in {location} is malformed ({str(t)[:200]}); "
        "the snapshot is corrupt or was not written by this sink")


class _ExactlyOnceWriter(SinkWriter, SupportsDiscardHeld):
    def __init__(self, sink: KafkaSink, ctx: ConnectorContext) -> None:
        self.sink = sink
        self.ctx = ctx
        self.buffer: list[list] = []
        #: transactional producers by transactional.id
        self.producers: dict[str, Any] = {}
        self.marker_consumers: dict[str, Any] = {}
        self.published: set[tuple[str, int, int]] = set()  # (job, subtask, epoch) by this writer
        #: staging subtask -> its records' partition argument (``KafkaSink.partition_of``)
        self.placement: dict[int, dict[str, int]] = {}
        #: (job, subtask, epoch) -> (the staged description, its encoded records) of the
        #: epochs this writer staged and has not published yet, within
        #: ``sink.in_memory_limit_bytes`` (``held_bytes``: their :func:`_held_size`)
        self.held: dict[tuple[str, int, int], tuple[str, list[list], int]] = {}
        self.held_bytes = 0

    # 1. stage
    def write(self, records: list[dict]) -> None:
        self.buffer.extend(self.sink.encode_batch(records))

    # 2. pre-commit: the epoch's records go into the checkpoint
    def pre_commit(self, checkpoint_id: int) -> list[Transaction]:
        if not self.buffer:
            return []
        # job_name: the marker group of this epoch is the staging job's, also when another
        # job (blue-green: green restoring blue's savepoint) publishes or checks it
        staged = stage(self.buffer)
        txn: Transaction = {"v": _VERSION, "job": self.ctx.job_id, "job_name": self.ctx.job_name,
                            "subtask": self.ctx.subtask_index, "epoch": checkpoint_id,
                            "count": len(self.buffer), "records": staged}
        # kept for the publish (a fenced writer never publishes: it keeps nothing)
        size = _held_size(staged, len(self.buffer))
        if not self.ctx.fenced and self.held_bytes + size <= self.sink.in_memory_limit_bytes:
            self.held[(self.ctx.job_id, self.ctx.subtask_index, checkpoint_id)] = (
                staged, self.buffer, size)
            self.held_bytes += size
        self.buffer = []
        return [txn]

    # 3. commit: one Kafka transaction per epoch, with its marker
    def commit(self, transactions: Sequence[Transaction]) -> None:
        if self.ctx.fenced:
            return
        producer = self._producer(self.ctx.job_name, self.ctx.subtask_index)
        staged = [self._records_of(t) for t in transactions]
        for t, records in sorted(staged, key=lambda tr: (tr[0]["job"], tr[0]["epoch"])):
            self._publish(producer, t, records)

    def _records_of(self, t: object) -> tuple[dict[str, Any], list[list]]:
        """The description ``t`` of a pending epoch and its records: those this writer kept
        since ``pre_commit`` when ``t`` is the description it staged for them (the same
        records text: nothing to validate or decode), else validated and decoded once."""
        if isinstance(t, dict):
            job, subtask, epoch = t.get("job"), t.get("subtask"), t.get("epoch")
            if isinstance(job, str) and type(subtask) is int and type(epoch) is int:
                kept = self.held.pop((job, subtask, epoch), None)
                if kept is not None:
                    self.held_bytes -= kept[2]
                    if kept[0] == t.get("records") and t.get("count") == len(kept[1]):
                        return t, kept[1]
        return _checked_records(t, "the pending transactions")

    def abort(self, transactions: Sequence[Transaction]) -> bool:
        return False  # kept: published with the next checkpoint that completes

    # 4. recover: publish the restored epochs the markers do not cover
    def recover(self, transactions: Sequence[Transaction]) -> None:
        """Steps: (a) a fenced job does nothing (it must not fence the live job); (b) the
        restored epochs of each staging subtask ``o`` with ``o % parallelism`` equal to this
        subtask are this writer's, grouped by the job (name) that staged them; (c) per such
        job and ``o``, the producer of that job's transactional.id for ``o`` fences its
        zombies and aborts their open transaction at once (a restoring job of another name,
        green restoring blue's savepoint, too: with its own transactional.id it would fence
        nothing, and blue's open transaction would hold back ``read_committed`` readers and
        blue's marker until ``transaction.timeout.ms``); this job's own producer fences this
        job's zombies of this subtask; (d) the markers say which epochs are published;
        (e) the others are published in epoch order."""
        # (a)
        if self.ctx.fenced:
            return
        # (b)
        mine: dict[tuple[str, int], list[tuple[dict, list[list]]]] = {}
        for raw in transactions:
            t, records = _checked_records(raw, "the restored checkpoint")
            if t["subtask"] % self.ctx.parallelism == self.ctx.subtask_index:
                name = _job_name(t) or self.ctx.job_name
                mine.setdefault((name, t["subtask"]), []).append((t, records))
        ensure_topic(self.sink.conf, self.sink.marker_topic)
        own = (self.ctx.job_name, self.ctx.subtask_index)
        for name, origin in sorted(set(mine) | {own}):
            # (c)
            producer = self._producer(name, origin)
            staged = mine.get((name, origin))
            if staged:
                # (d)
                done = {job: self._published_epoch(origin, job, name)
                        for job in {t["job"] for t, _ in staged}}
                # (e)
                for t, records in sorted(staged, key=lambda tr: (tr[0]["job"], tr[0]["epoch"])):
                    if t["epoch"] <= done[t["job"]]:
                        log.info("Kafka sink %s: epoch %d of subtask %d (job %s) is already "
                                 "published to %s", self.ctx.operator_uid, t["epoch"], origin,
                                 t["job"], self.sink.topic)
                        continue
                    self._publish(producer, t, records)
            if (name, origin) != own:
                self.producers.pop(self.sink.transactional_id(name, self.ctx.operator_uid, origin))
                producer.flush(METADATA_TIMEOUT_S)

    def _producer(self, job_name: str, origin: int) -> Any:
        """The transactional producer of job ``job_name``'s subtask ``origin``, initialized:
        ``init_transactions`` fences every older producer of that transactional.id and
        aborts its open transaction at once (no wait for ``transaction.timeout.ms``)."""
        ck = require_client()
        tid = self.sink.transactional_id(job_name, self.ctx.operator_uid, origin)
        producer = self.producers.get(tid)
        if producer is not None:
            return producer
        producer = ck.Producer(client_config(
            {**self.sink.producer_defaults, **self.sink.conf},
            **{"transactional.id": tid,
               "transaction.timeout.ms": self.sink.transaction_timeout_ms, "linger.ms": 5}))
        try:
            producer.init_transactions(METADATA_TIMEOUT_S)
        except ck.KafkaException as exc:
            raise KafkaPublishError(
                f"Kafka sink {self.ctx.operator_uid}: init_transactions of transactional.id "
                f"{tid!r} on {self.sink.conf['bootstrap.servers']} failed: {exc.args[0].str()}") from None
        self.producers[tid] = producer
        return producer

    def _marker_group(self, origin: int, job: str, job_name: str | None = None) -> str:
        """The consumer group whose offset on the marker topic is the last epoch of job
        ``job``'s subtask ``origin`` that this sink published. Named after the job that
        staged the epoch (``job_name``; this job's name for epochs staged before the name
        was recorded), so a job restoring another job's snapshot under another name (green
        restoring blue's) finds the markers that job wrote."""
        tid = self.sink.transactional_id(job_name or self.ctx.job_name, self.ctx.operator_uid,
                                         origin)
        return f"{tid}-{job}"

    def _marker_consumer(self, group: str) -> Any:
        """A consumer of ``group`` (never subscribed): its group metadata goes into the
        publishing transactions, its offset fetch reads the marker."""
        consumer = self.marker_consumers.get(group)
        if consumer is None:
            ck = require_client()
            consumer = self.marker_consumers[group] = ck.Consumer(client_config(self.sink.conf, **{
                "group.id": group, "enable.auto.commit": False,
                "isolation.level": "read_committed"}))
        return consumer

    def _publish(self, producer: Any, t: dict, records: list[list]) -> None:
        """Publish epoch ``t`` (its ``records``, validated or this writer's own) in one
        Kafka transaction with its marker."""
        ck = require_client()
        ident = (t["job"], t["subtask"], t["epoch"])
        if ident in self.published:
            return
        failures: list = []

        def delivered(err, msg) -> None:
            # only ``err``: when librdkafka has just raised a fatal error (a fenced producer),
            # calling a method of ``msg`` here ends in a SystemError ("returned a result with
            # an exception set") instead of the KafkaException below
            if err is not None:
                failures.append(err)

        topic = self.sink.topic
        placed = self.placement.get(t["subtask"])
        if placed is None:
            placed = self.placement[t["subtask"]] = self.sink.partition_of(t["subtask"])
        where = (f"epoch {t['epoch']} of subtask {t['subtask']} (job {t['job']}, "
                 f"{t['count']} records) to topic {topic!r}")
        try:
            producer.begin_transaction()
            for key, value, ts in records:
                kwargs = {"timestamp": ts, **placed} if ts is not None else placed
                while True:
                    try:
                        producer.produce(topic, value, key, on_delivery=delivered, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.05)
            # the records are on the broker before the marker is sent: a broker that fails to
            # hide an interrupted transaction can then show the records without the marker
            # (published again: duplicates) but never the marker without every record
            # (skipped on restore: a loss)
            producer.flush(METADATA_TIMEOUT_S)
            if not failures:
                # the marker: the group's offset on the marker topic := the epoch, committed
                # by this transaction (Kafka's transactional offset commit, KIP-98)
                group = self._marker_group(t["subtask"], t["job"], _job_name(t))
                producer.send_offsets_to_transaction(
                    [ck.TopicPartition(self.sink.marker_topic, 0, t["epoch"])],
                    self._marker_consumer(group).consumer_group_metadata(), METADATA_TIMEOUT_S)
            if failures:
                producer.abort_transaction(METADATA_TIMEOUT_S)
                raise KafkaPublishError(f"Kafka sink {self.ctx.operator_uid}: publishing {where} "
                                        f"failed: {failures[0].str()}; aborted")
            producer.commit_transaction(METADATA_TIMEOUT_S)
        except (ck.KafkaException, SystemError) as exc:
            # a SystemError out of the client carries librdkafka's error as its context
            cause = exc if isinstance(exc, ck.KafkaException) else exc.__context__
            why = (cause.args[0].str() if isinstance(cause, ck.KafkaException)
                   else f"{type(exc).__name__}: {exc}")
            raise KafkaPublishError(
                f"Kafka sink {self.ctx.operator_uid}: publishing {where} failed: "
                f"{why} (the epoch stays in the checkpoint; a restore publishes it)") from None
        self.published.add(ident)
        log.info("Kafka sink %s: published %s", self.ctx.operator_uid, where)

    def _published_epoch(self, origin: int, job: str, job_name: str | None = None) -> int:
        """The last epoch of job ``job``'s subtask ``origin`` published (-1: none): the
        marker group's committed offset, read after ``init_transactions`` aborted any open
        transaction of that subtask's transactional.id (so no marker is pending), with
        ``read_committed`` (librdkafka then asks for stable offsets, KIP-447)."""
        ck = require_client()
        group = self._marker_group(origin, job, job_name)
        try:
            found = self._marker_consumer(group).committed(
                [ck.TopicPartition(self.sink.marker_topic, 0)], timeout=METADATA_TIMEOUT_S)[0]
        except ck.KafkaException as exc:
            raise KafkaPublishError(
                f"Kafka sink {self.ctx.operator_uid}: could not read the commit marker of "
                f"subtask {origin} (consumer group {group!r}, topic "
                f"{self.sink.marker_topic!r}): {exc.args[0].str()}") from None
        return found.offset if found.offset >= 0 else -1

    def discard_held(self, transactions: Sequence[Transaction]) -> None:
        """Fenced: the held epochs are only in the fenced job's own checkpoints."""

    def close(self) -> None:
        for producer in self.producers.values():
            producer.flush(5)
        self.producers.clear()
        self.held.clear()
        self.held_bytes = 0
        for consumer in self.marker_consumers.values():
            consumer.close()
        self.marker_consumers.clear()


class _AtLeastOnceWriter(SinkWriter):
    def __init__(self, sink: KafkaSink, ctx: ConnectorContext) -> None:
        ck = require_client()
        self.sink = sink
        self.ctx = ctx
        self.failures: list = []
        self.producer = ck.Producer(client_config({**sink.producer_defaults, **sink.conf},
                                                  **{"enable.idempotence": True, "linger.ms": 5}))
        self.placed = sink.partition_of(ctx.subtask_index)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failures.append((err, msg.topic(), msg.partition()))

    def write(self, records: list[dict]) -> None:
        for key, value, ts in self.sink.encode_batch(records):
            kwargs = {"timestamp": ts, **self.placed} if ts is not None else self.placed
            while True:
                try:
                    self.producer.produce(self.sink.topic, value, key, on_delivery=self._delivered,
                                          **kwargs)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.poll(0)

    def pre_commit(self, checkpoint_id: int) -> list[Transaction]:
        left = self.producer.flush(METADATA_TIMEOUT_S)
        if left or self.failures:
            what = self.failures[0] if self.failures else (f"{left} records undelivered", "?", "?")
            raise KafkaPublishError(
                f"Kafka sink {self.ctx.operator_uid}: records of checkpoint {checkpoint_id} were "
                f"not delivered to topic {self.sink.topic!r} ({what[1]}:{what[2]}: {what[0]}); "
                "checkpoint declined")
        return []

    def commit(self, transactions: Sequence[Transaction]) -> None:
        pass

    def recover(self, transactions: Sequence[Transaction]) -> None:
        pass

    def close(self) -> None:
        self.producer.flush(5)
