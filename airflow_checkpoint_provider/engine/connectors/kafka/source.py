"""``KafkaSource``: topic partitions as the engine's splits, read positions in checkpoints.

Splits and assignment. The split list is ``"<topic>:<partition>"`` for every partition of
``topics`` (or of the topics matching ``topic_pattern``), sorted by topic then partition,
listed once by the job master when the job starts; split ``j`` runs on subtask
``j % parallelism`` (:mod:`..base`). A restore at another parallelism gets every split's
position from the union list state and reassigns the splits the same way.

Positions. A split's position is ``{"offset": next offset to read, "end": exclusive end
offset or None}``. The start offset (earliest, latest, the consumer group's committed offset,
a timestamp, or explicit offsets) is resolved to a number when a split is first opened and
recorded from then on, as is the end offset of ``stop_at="latest"``: a restore resumes at
the checkpointed offset and stops where the first run would have stopped, whatever the
group's offsets or the topic's end are by then. The consumer group's offsets are committed
only after a checkpoint completed (they are for lag monitoring) and never decide a restore;
``start="group"`` uses them only for splits that have no checkpointed position.

Reading. One ``confluent_kafka.Consumer`` per source subtask (shared by its split readers,
partitions assigned manually: no group rebalancing), ``isolation.level=read_committed`` by
default, ``auto.offset.reset=error``: an offset that is no longer in the partition fails the
job (:class:`~.errors.KafkaOffsetOutOfRangeError`) instead of silently skipping records, as
does a deleted partition and a broker unreachable for ``broker_timeout_s``.

Event time. Records carry the Kafka timestamp as ``_timestamp`` (epoch ms) with
``metadata=True``; a ``WatermarkStrategy`` on that field (or on a value field) gives
per-partition watermarks and idle-partition handling, since the engine keeps a watermark
per split.

End offsets and timestamps. ``start="latest"``, ``stop_at="latest"`` and
``start=<timestamp>`` are resolved by :mod:`.offsets` from what fetch responses report, not
from ListOffsets alone: Tansu 0.6 (the test broker) answers ListOffsets(latest) with the
number of record batches instead of the end offset and ListOffsets(timestamp) with 0. The
same end offsets refuse a restored offset past the end of its partition (a topic deleted
and recreated, or truncated), which a broker would otherwise answer with
OFFSET_OUT_OF_RANGE (Kafka) or not at all (Tansu: the read just waits).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa

from ..base import Source, SourceContext, SplitReader
from .batches import ArrowBatchDecoder
from .client import (
    METADATA_TIMEOUT_S,
    base_config,
    client_config,
    list_partitions,
    require_client,
)
from .codec import add_metadata, value_record
from .debezium import DebeziumJson
from .errors import (
    KafkaConfigurationError,
    KafkaOffsetOutOfRangeError,
    KafkaPartitionMissingError,
    KafkaUnavailableError,
)
from .lag import merge_task_lag, partition_lag
from .offsets import end_offsets, first_offset_at

log = logging.getLogger(__name__)

_STARTS = ("earliest", "latest", "group")
#: messages fetched from the shared consumer per call
_FETCH = 1000
#: messages a subtask's consumer buffers at most across its partitions
_MAX_BUFFERED = 20_000


def split_id(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def parse_split(split: str) -> tuple[str, int]:
    topic, _, partition = split.rpartition(":")
    if not topic or not partition.isdigit():
        raise KafkaConfigurationError(f"{split!r} is not a Kafka split id (<topic>:<partition>)")
    return topic, int(partition)


class KafkaSource(Source):
    """Read Kafka topics with their positions in the engine's checkpoints.

    :param bootstrap_servers: ``"host:port,host:port"`` or a list.
    :param topics: the topics to read (each must exist) -- or
    :param topic_pattern: a regular expression (``re.fullmatch``) over topic names, resolved
        when the job starts, and again every ``discover_interval_s`` while it runs.
    :param discover_interval_s: with ``topic_pattern`` and no ``stop_at``: look for new
        topics (and partitions) matching it this often; a partition found while the job runs
        starts at its earliest offset. Splits are then owned by a hash of their id (the
        engine's continuous-source assignment), so every subtask agrees on a new split's
        owner without coordination.
    :param start: where a partition without a checkpointed position starts: ``"earliest"``
        (default), ``"latest"``, ``"group"`` (the group's committed offset, else earliest),
        an ``int`` timestamp in epoch ms, or ``{(topic, partition): offset}`` (partitions not
        named start at earliest).
    :param stop_at: ``None`` (unbounded), ``"latest"`` (each partition's end offset when the
        split is first opened) or ``{(topic, partition): end_offset}`` (exclusive; partitions
        not named are read until their end offset when first opened): the job finishes once
        every partition reached its end.
    :param group_id: consumer group whose offsets are committed after each completed
        checkpoint (lag monitoring); default ``ckpt-<job name>-<uid>``. ``commit_offsets=False``
        commits nothing; a fenced job (blue-green validation run) never commits.
    :param isolation: ``"read_committed"`` (default) or ``"read_uncommitted"``.
    :param value_format: ``"json"`` (values are JSON objects: the record is that dict),
        ``"bytes"`` (the record is ``{"value": bytes}``), a function ``bytes -> dict``, or
        ``"debezium-json"`` / :class:`~.debezium.DebeziumJson` (Debezium change events as
        changelog rows with ``_op`` +I/-U/+U/-D; tombstones skipped).
    :param metadata: add ``_topic``, ``_partition``, ``_offset``, ``_timestamp`` (epoch ms)
        and ``_key`` (bytes or None) to each record.
    :param arrow: emit each batch as a ``pyarrow.RecordBatch`` (the vectorized operators'
        input: ``aggregate``, ``map_batches``) instead of a list of dicts: JSON values are
        parsed by pyarrow's JSON reader straight into columns, metadata fields are columns
        (:mod:`.batches`).
    :param schema: with ``arrow=True``, the ``pyarrow.Schema`` of the values: their columns
        (fields it does not name are dropped, missing ones are null) and types (a value that
        does not convert fails the job naming its topic, partition, offset and field).
        Default: inferred from each batch, a column keeping its type from one batch to the
        next.
    :param broker_timeout_s: how long every broker may stay unreachable before the job fails
        (and the longest a metadata request may take, up to 15 s).
    :param consumer_config: more librdkafka settings for the consumer.
    """

    slot_imports = ("confluent_kafka",)

    def __init__(self, bootstrap_servers: str | Sequence[str], *, topics: Sequence[str] | None = None,
                 topic_pattern: str | None = None,
                 start: str | int | Mapping[tuple[str, int], int] = "earliest",
                 stop_at: str | Mapping[tuple[str, int], int] | None = None,
                 group_id: str | None = None, commit_offsets: bool = True,
                 isolation: str = "read_committed",
                 value_format: str | Callable[[bytes], dict] | DebeziumJson = "json",
                 metadata: bool = False,
                 arrow: bool = False, schema: pa.Schema | None = None,
                 broker_timeout_s: float = 30.0, discover_interval_s: float | None = None,
                 consumer_config: Mapping[str, object] | None = None) -> None:
        if (topics is None) == (topic_pattern is None):
            raise KafkaConfigurationError("KafkaSource: give exactly one of topics=[...] or topic_pattern=...")
        if isinstance(topics, str):
            raise KafkaConfigurationError(f"KafkaSource: topics must be a list, not the string "
                                          f"{topics!r} (write [{topics!r}])")
        if not (start in _STARTS or (isinstance(start, int) and not isinstance(start, bool))
                or isinstance(start, Mapping)):
            raise KafkaConfigurationError(
                f"KafkaSource: start={start!r}: use 'earliest', 'latest', 'group', a timestamp in "
                "epoch ms or {(topic, partition): offset}")
        if not (stop_at is None or stop_at == "latest" or isinstance(stop_at, Mapping)):
            raise KafkaConfigurationError(
                f"KafkaSource: stop_at={stop_at!r}: use None, 'latest' or {{(topic, partition): end_offset}}")
        if isolation not in ("read_committed", "read_uncommitted"):
            raise KafkaConfigurationError(f"KafkaSource: isolation={isolation!r}: use "
                                          "'read_committed' or 'read_uncommitted'")
        if value_format == DebeziumJson.name:
            value_format = DebeziumJson()
        if not (value_format in ("json", "bytes") or callable(value_format)
                or isinstance(value_format, DebeziumJson)):
            raise KafkaConfigurationError(f"KafkaSource: value_format={value_format!r}: use 'json', "
                                          "'bytes', 'debezium-json' or a function bytes -> dict")
        if schema is not None and (not arrow or not isinstance(schema, pa.Schema)):
            raise KafkaConfigurationError(
                f"KafkaSource: schema={schema!r:.100}: a pyarrow.Schema, with arrow=True (the "
                "columns of the Arrow batches)")
        if discover_interval_s is not None and (topic_pattern is None or stop_at is not None
                                                or discover_interval_s <= 0):
            raise KafkaConfigurationError(
                "KafkaSource: discover_interval_s needs topic_pattern, no stop_at (a job that "
                "discovers topics never finishes) and a positive interval")
        #: the engine's continuous-source hook: list the splits again this often
        self.monitor_interval = discover_interval_s
        self.retain_seconds = None
        self.conf = base_config(bootstrap_servers, consumer_config)
        self.topics = list(topics) if topics is not None else None
        self.topic_pattern = topic_pattern
        self.start = dict(start) if isinstance(start, Mapping) else start
        self.stop_at = dict(stop_at) if isinstance(stop_at, Mapping) else stop_at
        self.group_id = group_id
        self.commit_offsets = commit_offsets
        self.isolation = isolation
        self.value_format = value_format
        self.metadata = metadata
        self.arrow = arrow
        self.schema = schema
        self.broker_timeout_s = broker_timeout_s

    # -- the driver side ----------------------------------------------------------------
    def splits(self) -> list[str]:
        found = list_partitions(self.conf, topics=self.topics, pattern=self.topic_pattern,
                                timeout=min(METADATA_TIMEOUT_S, self.broker_timeout_s))
        return [split_id(t, p) for t in sorted(found) for p in range(found[t])]

    def lineage_dataset(self) -> tuple[str, str] | None:
        name = ",".join(self.topics) if self.topics is not None else f"/{self.topic_pattern}/"
        return f"kafka://{self.conf['bootstrap.servers'].split(',')[0]}", name

    def describe(self) -> str:
        what = ",".join(self.topics) if self.topics is not None else f"/{self.topic_pattern}/"
        return f"kafka({what})"

    def check_restore(self, operator_uid: str, positions: Mapping[str, object], *,
                      checkpoint_id: int, location: str, job_name: str) -> None:
        """Every checkpointed partition must still exist (a deleted topic, or one recreated
        with fewer partitions, would otherwise be skipped silently)."""
        if not positions:
            return
        topics = sorted({parse_split(s)[0] for s in positions})
        have = list_partitions(self.conf, pattern="|".join(map(_escape, topics)),
                               timeout=min(METADATA_TIMEOUT_S, self.broker_timeout_s))
        gone = [s for s in sorted(positions) if parse_split(s)[1] >= have.get(parse_split(s)[0], 0)]
        if gone:
            raise KafkaPartitionMissingError(
                f"source {operator_uid!r} of job {job_name!r}: checkpoint {checkpoint_id} at "
                f"{location} holds positions of partition(s) that no longer exist on Kafka: "
                + ", ".join(f"{s} at offset {_offset_of(positions[s])}" for s in gone)
                + "; restore with a pipeline that no longer reads them, or recreate them")
        # a resume offset past a partition's end: the topic was recreated or truncated
        ends = end_offsets(self.conf, map(parse_split, positions),
                           timeout=min(METADATA_TIMEOUT_S, self.broker_timeout_s))
        past = [(s, _offset_of(positions[s]), ends[parse_split(s)]) for s in sorted(positions)
                if isinstance(_offset_of(positions[s]), int)
                and _offset_of(positions[s]) > ends[parse_split(s)]]  # type: ignore[operator]
        if past:
            raise KafkaOffsetOutOfRangeError(
                f"source {operator_uid!r} of job {job_name!r}: checkpoint {checkpoint_id} at "
                f"{location} resumes partition(s) past their end on Kafka: "
                + ", ".join(f"{s} at offset {o} (the partition ends at offset {e})"
                            for s, o, e in past)
                + "; the topic was deleted and recreated, or truncated, since the checkpoint. "
                "Restore with a pipeline that reads another topic, or start a new job")

    def modified_time(self, split: str) -> float:
        """The continuous-source hook (a file's modification time): partitions have none."""
        return 0.0

    # -- the slot side ------------------------------------------------------------------
    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        topic, partition = parse_split(split_id)
        consumer = _SharedConsumer.for_subtask(self, ctx)
        if position is None and consumer.started:  # discovered while running
            offset = consumer.watermarks(topic, partition)[0]
            end = None
        elif position is None:
            offset = self._start_offset(consumer, topic, partition)
            end = self._end_offset(consumer, topic, partition)
        else:
            offset, end = _restored(split_id, position)
            low, high = consumer.watermarks(topic, partition)
            if offset < low and (end is None or offset < end):
                raise KafkaOffsetOutOfRangeError(
                    f"Kafka partition {split_id}: the checkpoint resumes at offset {offset}, but "
                    f"the partition now starts at offset {low} (retention or a truncation "
                    f"removed offsets {offset} to {low - 1}, which this job has not read). "
                    "Restore an older checkpoint, or start a new job accepting the loss")
        if end is not None and offset > end:
            offset = end  # nothing to read (a start past the requested end)
        consumer.assign(topic, partition, offset)
        log.info("Kafka source %s: reading %s from offset %d%s", ctx.operator_uid, split_id,
                 offset, "" if end is None else f" to {end} (exclusive)")
        return _PartitionReader(self, consumer, topic, partition, offset, end, ctx)

    def _start_offset(self, consumer: _SharedConsumer, topic: str, partition: int) -> int:
        ck = require_client()
        tp = ck.TopicPartition(topic, partition)
        low = consumer.watermarks(topic, partition)[0]  # its high: see .offsets
        start = self.start
        if isinstance(start, dict):
            if (topic, partition) in start:
                return int(start[(topic, partition)])
            return low
        if start == "earliest":
            return low
        if start == "latest":
            return end_offsets(self.conf, [(topic, partition)], isolation=self.isolation)[
                (topic, partition)]
        if start == "group":
            committed = consumer.consumer.committed([tp], timeout=METADATA_TIMEOUT_S)[0]
            return committed.offset if committed.offset >= 0 else low
        # a timestamp: the first offset at or after it
        return max(low, first_offset_at(self.conf, topic, partition, int(start),
                                        isolation=self.isolation))

    def _end_offset(self, consumer: _SharedConsumer, topic: str, partition: int) -> int | None:
        if self.stop_at is None:
            return None
        if isinstance(self.stop_at, dict) and (topic, partition) in self.stop_at:
            return int(self.stop_at[(topic, partition)])
        return end_offsets(self.conf, [(topic, partition)], isolation=self.isolation)[
            (topic, partition)]

    def records(self, msg) -> list[dict]:
        """The records of one Kafka message: one (:meth:`decode`), or with a changelog format
        (:class:`~.debezium.DebeziumJson`) none to two."""
        if not isinstance(self.value_format, DebeziumJson):
            return [self.decode(msg)]
        rows = self.value_format.rows(msg.value(), f"{msg.topic()}:{msg.partition()} offset "
                                                   f"{msg.offset()}")
        if self.metadata:
            for row in rows:
                add_metadata(row, msg)
        return rows

    def decode(self, msg) -> dict:
        record = value_record(self.value_format, msg)
        if self.metadata:
            add_metadata(record, msg)
        return record

    def value_record(self, msg) -> dict:
        """The record of one message's value, without the metadata fields."""
        return value_record(self.value_format, msg)


def _escape(topic: str) -> str:
    import re
    return re.escape(topic)


def _offset_of(position: object) -> object:
    return position.get("offset") if isinstance(position, dict) else position


def _restored(split: str, position: object) -> tuple[int, int | None]:
    """A checkpointed position (untrusted input: from a ``_metadata`` file)."""
    from ...errors import CorruptCheckpointError
    if isinstance(position, dict):
        offset, end = position.get("offset"), position.get("end")
        if (isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0
                and (end is None or (isinstance(end, int) and not isinstance(end, bool)))):
            return offset, end
    raise CorruptCheckpointError(f"Kafka split {split}: position {position!r:.200} in the "
                                 "snapshot is not {'offset': int, 'end': int | None}")


class _SharedConsumer:
    """The consumer of one source subtask: its partitions are assigned by hand, fetched
    messages are buffered per partition until that partition's reader asks for them."""

    _open: dict[tuple, _SharedConsumer] = {}

    @classmethod
    def for_subtask(cls, source: KafkaSource, ctx: SourceContext) -> _SharedConsumer:
        key = (id(source), ctx.job_id, ctx.operator_uid, ctx.subtask_index, ctx.attempt)
        shared = cls._open.get(key)
        if shared is None:
            shared = cls._open[key] = cls(source, ctx, key)
        return shared

    def __init__(self, source: KafkaSource, ctx: SourceContext, key: tuple) -> None:
        ck = require_client()
        self.key = key
        self.source = source
        self.errors: list = []
        self.down_since: float | None = None
        conf = {**source.conf,
                "group.id": source.group_id or f"ckpt-{ctx.job_name}-{ctx.operator_uid}",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "error", "isolation.level": source.isolation,
                "client.id": f"ckpt-{ctx.job_name}-{ctx.operator_uid}-{ctx.subtask_index}",
                "error_cb": self._on_error}
        self.consumer = ck.Consumer(client_config(conf))
        self.buffers: dict[tuple[str, int], deque] = {}
        #: a reader fetched: partitions opened from now on were discovered while running
        self.started = False
        #: ``{(topic, partition): offset}`` of every reader of this consumer (errors name them)
        self.positions: dict[tuple[str, int], int] = {}

    def _on_error(self, err) -> None:
        ck = require_client()
        if err.code() == ck.KafkaError._ALL_BROKERS_DOWN:
            if self.down_since is None:
                self.down_since = time.monotonic()
        elif err.fatal():
            self.errors.append(err)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        ck = require_client()
        try:
            return self.consumer.get_watermark_offsets(ck.TopicPartition(topic, partition),
                                                       timeout=METADATA_TIMEOUT_S)
        except ck.KafkaException as exc:
            err = exc.args[0]
            if err.code() in (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError._UNKNOWN_PARTITION,
                              ck.KafkaError._UNKNOWN_TOPIC):
                raise KafkaPartitionMissingError(
                    f"Kafka partition {topic}:{partition} does not exist (deleted?): {err.str()}") from None
            raise KafkaUnavailableError(
                f"could not read the offsets of Kafka partition {topic}:{partition} from "
                f"{self.source.conf['bootstrap.servers']} within {METADATA_TIMEOUT_S:.0f} s: "
                f"{err.str()}") from None

    def assign(self, topic: str, partition: int, offset: int) -> None:
        ck = require_client()
        self.buffers[(topic, partition)] = deque()
        self.consumer.incremental_assign([ck.TopicPartition(topic, partition, offset)])

    def unassign(self, topic: str, partition: int) -> None:
        ck = require_client()
        self.buffers.pop((topic, partition), None)
        try:
            self.consumer.incremental_unassign([ck.TopicPartition(topic, partition)])
        except ck.KafkaException:
            pass
        if not self.buffers:
            self.close()

    def close(self) -> None:
        """Close the consumer; in the background while no broker answers (librdkafka's close
        then waits ~45 s for outstanding offset commits, which would hold the failing task,
        and with it the failover, that long)."""
        if _SharedConsumer._open.get(self.key) is self:
            del _SharedConsumer._open[self.key]
            if self.down_since is None:
                self.consumer.close()
            else:
                import threading
                threading.Thread(target=self.consumer.close, daemon=True,
                                 name="kafka-consumer-close").start()

    def position(self, topic: str, partition: int) -> int | None:
        ck = require_client()
        pos = self.consumer.position([ck.TopicPartition(topic, partition)])[0].offset
        return pos if pos >= 0 else None

    def end_offset(self, topic: str, partition: int) -> int | None:
        """The partition's end offset carried by the latest fetch response (no request;
        ``None`` before the first one): the consumer lag's end (:mod:`.lag`)."""
        ck = require_client()
        try:
            high = self.consumer.get_watermark_offsets(ck.TopicPartition(topic, partition),
                                                       cached=True)[1]
        except ck.KafkaException:
            return None
        return high if high >= 0 else None

    def fetch(self, topic: str, partition: int, positions: dict, want: int = _FETCH) -> deque:
        """The buffered messages of ``topic:partition``, fetching more if there are none
        (up to ``want``, at least :data:`_FETCH`, at most :data:`_MAX_BUFFERED`)."""
        buf = self.buffers[(topic, partition)]
        if buf or sum(map(len, self.buffers.values())) >= _MAX_BUFFERED:
            return buf  # the other partitions' readers drain theirs first
        self.started = True
        msgs = self.consumer.consume(min(max(want, _FETCH), _MAX_BUFFERED), timeout=0.005)
        for msg in msgs:
            err = msg.error()
            if err is None:
                self.down_since = None
                target = self.buffers.get((msg.topic(), msg.partition()))
                if target is not None:
                    target.append(msg)
                continue
            self._raise(err, msg, positions)
        if self.errors:
            raise KafkaUnavailableError(f"the Kafka consumer failed: {self.errors[0].str()} "
                                        f"(partitions {_where(positions)})")
        if not msgs and self.down_since is not None and \
                time.monotonic() - self.down_since > self.source.broker_timeout_s:
            raise KafkaUnavailableError(
                f"no Kafka broker of {self.source.conf['bootstrap.servers']} answered for "
                f"{self.source.broker_timeout_s:.0f} s while reading {_where(positions)}; the "
                "task fails (the restart strategy restores the last checkpoint)")
        return buf

    def _raise(self, err, msg, positions: dict) -> None:
        ck = require_client()
        code = err.code()
        where = f"{msg.topic()}:{msg.partition()}" if msg.topic() else _where(positions)
        if code == ck.KafkaError._PARTITION_EOF:
            return
        if code in (ck.KafkaError._AUTO_OFFSET_RESET, ck.KafkaError.OFFSET_OUT_OF_RANGE):
            key = (msg.topic(), msg.partition())
            low, high = self.watermarks(*key) if msg.topic() else (None, None)
            if msg.topic():
                try:  # the end as fetches report it (Tansu's ListOffsets: a batch count)
                    high = end_offsets(self.source.conf, [key], timeout=5.0)[key]
                except KafkaUnavailableError:
                    pass
            raise KafkaOffsetOutOfRangeError(
                f"Kafka partition {where}: offset {positions.get(key)} to read from is out of "
                f"range (the partition holds offsets {low} to {high}): retention or a truncation "
                "removed records this job has not read. Restore from an older checkpoint, or "
                "start a new job (start='earliest') accepting the loss") from None
        if code in (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError._UNKNOWN_PARTITION,
                    ck.KafkaError._UNKNOWN_TOPIC):
            raise KafkaPartitionMissingError(
                f"Kafka partition {where} no longer exists (read up to offset "
                f"{positions.get((msg.topic(), msg.partition()))}): its topic was deleted") from None
        if code == ck.KafkaError._ALL_BROKERS_DOWN:
            if self.down_since is None:
                self.down_since = time.monotonic()
            return
        if err.fatal() or not err.retriable():
            if code in (ck.KafkaError._TRANSPORT, ck.KafkaError._RESOLVE):
                return  # librdkafka reconnects; _ALL_BROKERS_DOWN bounds how long
            raise KafkaUnavailableError(f"Kafka partition {where}: {err.str()} (offsets "
                                        f"{_where(positions)})") from None


def _where(positions: dict) -> str:
    return ", ".join(f"{t}:{p} at offset {o}" for (t, p), o in sorted(positions.items())) or "none"


class _PartitionReader(SplitReader):
    def __init__(self, source: KafkaSource, consumer: _SharedConsumer, topic: str, partition: int,
                 offset: int, end: int | None, ctx: SourceContext) -> None:
        self.source = source
        self.consumer = consumer
        self.topic, self.partition = topic, partition
        self.offset = offset
        self.end = end
        self.commit = source.commit_offsets and not ctx.fenced
        self.positions = consumer.positions
        self.positions[(topic, partition)] = offset
        self.decoder = ArrowBatchDecoder(
            source.value_format, source.schema, source.metadata, source.value_record,
            source.records) if source.arrow else None

    def read_batch(self, max_records: int) -> list[dict] | pa.RecordBatch | None:
        if self.end is not None and self.offset >= self.end:
            return None
        buf = self.consumer.fetch(self.topic, self.partition, self.positions, max_records)
        out: list = []
        # the dict path decodes each message as it goes; the Arrow path the whole batch
        arrow, records = self.decoder is not None, self.source.records
        while buf and len(out) < max_records:
            msg = buf[0]
            offset = msg.offset()
            if self.end is not None and offset >= self.end:
                self.offset = self.end
                buf.clear()
                break
            buf.popleft()
            if offset < self.offset:
                continue  # fetched before a re-assignment
            if arrow:
                out.append(msg)
            else:
                out.extend(records(msg))
            self.offset = offset + 1
        if not out and self.end is not None:
            # read_committed skips transaction markers: the consumer's position passes them
            pos = self.consumer.position(self.topic, self.partition)
            if pos is not None and pos >= self.end and not buf:
                self.offset = max(self.offset, self.end)
        self.positions[(self.topic, self.partition)] = self.offset
        if not out and self.end is not None and self.offset >= self.end:
            return None
        if out and self.decoder is not None:
            return self.decoder.decode(out)
        return out

    def position(self) -> dict:
        return {"offset": self.offset, "end": self.end}

    def lag(self) -> dict:
        """The engine's ``source_lag`` hook, called with every checkpoint: this partition's
        consumer lag (:func:`.lag.partition_lag`) as the entry of its source operator."""
        drained = not self.consumer.buffers.get((self.topic, self.partition))
        measured = partition_lag(
            self.consumer.end_offset(self.topic, self.partition), self.offset,
            read_to=self.consumer.position(self.topic, self.partition) if drained else None,
            stop_at=self.end)
        return merge_task_lag(None, split_id(self.topic, self.partition), measured)

    def notify_checkpoint_complete(self, checkpoint_id: int, position: object) -> None:
        """Commit the checkpointed offset to the consumer group (for lag monitoring)."""
        if not self.commit or not isinstance(position, dict) or self.consumer.down_since is not None:
            return
        ck = require_client()
        try:
            self.consumer.consumer.commit(offsets=[ck.TopicPartition(
                self.topic, self.partition, int(position["offset"]))], asynchronous=True)
        except ck.KafkaException as exc:  # lag monitoring only: never fails the job
            log.warning("Kafka source: committing %s:%d offset %s to the group failed: %s",
                        self.topic, self.partition, position["offset"], exc)

    def close(self) -> None:
        self.positions.pop((self.topic, self.partition), None)
        self.consumer.unassign(self.topic, self.partition)

