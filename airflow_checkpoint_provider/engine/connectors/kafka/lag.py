"""Consumer lag of a :class:`~.source.KafkaSource`: per partition, the partition's end offset
minus the position the checkpoint recorded.

Measured (the slot side). Each partition reader reports its lag with every checkpoint it
takes (the engine's ``source_lag`` task statistic, :func:`partition_lag`): the end offset is
the one carried by the consumer's latest fetch response for that partition (librdkafka's
cached watermark: the high watermark, or the last stable offset with ``read_committed``),
never a ListOffsets request. That costs no request per checkpoint, and it is right on
brokers whose ListOffsets(latest) is not (Tansu 0.6 answers the number of record batches
there; its fetch responses carry the true high watermark). The position is the offset the
checkpoint records, or past it when nothing is left to read (a transaction's commit marker
occupies an offset no record is read from: a caught-up reader of a transactional topic has
lag 0, not 1). Lags are in offsets, so commit markers still waiting to be read count.
Unknown (``None``) until the consumer received its first fetch response for the partition;
an unknown lag never counts as caught up.

Recorded. Nothing new in the metadata DB's schema: the lag travels in the checkpoint's
per-task statistics (``checkpoints.task_stats``), one entry per source operator uid::

    {"source_lag": {"<uid>": {"lag_records": 12,
                              "partitions": {"orders:0": {"offset": 40, "end_offset": 52,
                                                          "lag": 12}, ...}}}}

Read (``ckpt jobs``, ``ckpt report``, the metrics, the ``KafkaCaughtUpSensor``):
:func:`consumer_lag` sums a completed checkpoint's entries into one :class:`ConsumerLag`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: the ``source_lag`` entry key that marks a Kafka source's lag (a CDC source's has
#: ``lag_bytes`` and ``lag_seconds``)
LAG_KEY = "lag_records"


def partition_lag(end_offset: int | None, offset: int, *, read_to: int | None = None,
                  stop_at: int | None = None) -> dict[str, Any]:
    """One partition's lag: ``{"offset", "end_offset", "lag"}``.

    :param end_offset: the partition's end offset from the latest fetch response (``None``
        or negative: none received yet, the lag is unknown).
    :param offset: the next offset the reader will read (what the checkpoint records).
    :param read_to: where the consumer is when the reader holds no fetched record of the
        partition (its position passed the commit markers after ``offset``); counts when
        further than ``offset``.
    :param stop_at: a bounded reader's exclusive end: the lag is what is left up to it.
    """
    if end_offset is None or end_offset < 0:
        return {"offset": offset, "end_offset": None, "lag": None}
    end = end_offset if stop_at is None else min(end_offset, stop_at)
    at = offset if read_to is None else max(offset, read_to)
    return {"offset": offset, "end_offset": end_offset, "lag": max(0, end - at)}


def merge_task_lag(into: dict[str, Any] | None, split: str,
                   measured: Mapping[str, Any]) -> dict[str, Any]:
    """Add one reader's :func:`partition_lag` to an operator's ``source_lag`` entry of a
    task (``{"lag_records", "partitions"}``; the total is ``None`` once one is unknown)."""
    entry: dict[str, Any] = into if into is not None else {LAG_KEY: 0, "partitions": {}}
    entry["partitions"][split] = dict(measured)
    if entry[LAG_KEY] is not None:
        entry[LAG_KEY] = None if measured["lag"] is None else entry[LAG_KEY] + measured["lag"]
    return entry


@dataclass(frozen=True)
class ConsumerLag:
    """The Kafka consumer lag a completed checkpoint recorded, summed over a job's sources.

    :ivar total: records (offsets) behind, over every partition; ``None`` when one
        partition's lag is unknown.
    :ivar partitions: ``{(operator uid, "topic:partition"): lag or None}``.
    :ivar offsets: ``{(operator uid, "topic:partition"): (checkpointed offset, end offset)}``.
    :ivar checkpoint_id: the checkpoint it comes from (``None`` when not from one).
    """

    total: int | None
    partitions: dict[tuple[str, str], int | None] = field(default_factory=dict)
    offsets: dict[tuple[str, str], tuple[int | None, int | None]] = field(default_factory=dict)
    checkpoint_id: int | None = None

    @property
    def known(self) -> bool:
        return self.total is not None

    def by_topic_partition(self) -> dict[str, int | None]:
        """``{"topic:partition": lag}`` (summed over sources reading the same partition)."""
        out: dict[str, int | None] = {}
        for (_, split), lag in sorted(self.partitions.items(), key=lambda kv: _split_key(kv[0][1])):
            if split in out:
                have = out[split]
                out[split] = None if have is None or lag is None else have + lag
            else:
                out[split] = lag
        return out

    def describe(self, *, limit: int = 12) -> str:
        """``"12 records (orders:0 12, orders:1 0, ...)"``, at most ``limit`` partitions."""
        parts = self.by_topic_partition()
        shown = ", ".join(f"{s} {'?' if lag is None else lag}"
                          for s, lag in list(parts.items())[:limit])
        more = f", ... {len(parts) - limit} more" if len(parts) > limit else ""
        total = "unknown" if self.total is None else f"{self.total} records"
        return f"{total} ({shown}{more})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON document: ``{"total", "checkpoint_id", "partitions": [{"operator",
        "partition", "offset", "end_offset", "lag"}]}``."""
        return {"total": self.total, "checkpoint_id": self.checkpoint_id,
                "partitions": [{"operator": uid, "partition": split,
                                "offset": self.offsets.get((uid, split), (None, None))[0],
                                "end_offset": self.offsets.get((uid, split), (None, None))[1],
                                "lag": lag}
                               for (uid, split), lag in sorted(
                                   self.partitions.items(),
                                   key=lambda kv: (kv[0][0], _split_key(kv[0][1])))]}


def _split_key(split: str) -> tuple[str, int]:
    topic, _, partition = split.rpartition(":")
    return (topic, int(partition)) if partition.isdigit() else (split, -1)


def consumer_lag(task_stats: Iterable[Mapping[str, Any]] | None, *,
                 checkpoint_id: int | None = None) -> ConsumerLag | None:
    """The Kafka consumer lag in a checkpoint's per-task statistics; ``None`` when it holds
    none (no Kafka source, or statistics of a job that did not record them)."""
    partitions: dict[tuple[str, str], int | None] = {}
    offsets: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    found = False
    for task in task_stats or ():
        for uid, entry in (task.get("source_lag") or {}).items():
            if not isinstance(entry, Mapping) or LAG_KEY not in entry:
                continue  # another kind of source (a CDC source's replication lag)
            found = True
            for split, measured in (entry.get("partitions") or {}).items():
                lag = measured.get("lag") if isinstance(measured, Mapping) else None
                partitions[(uid, split)] = lag if isinstance(lag, int) else None
                if isinstance(measured, Mapping):
                    offsets[(uid, split)] = (measured.get("offset"), measured.get("end_offset"))
    if not found:
        return None
    values = list(partitions.values())
    total = None if any(v is None for v in values) else sum(v for v in values if v is not None)
    return ConsumerLag(total=total, partitions=partitions, offsets=offsets,
                       checkpoint_id=checkpoint_id)


def checkpoint_consumer_lag(checkpoint: Any) -> ConsumerLag | None:
    """:func:`consumer_lag` of a :class:`~...catalog.CheckpointRecord`."""
    if checkpoint is None:
        return None
    return consumer_lag(checkpoint.task_stats, checkpoint_id=checkpoint.checkpoint_id)


__all__ = ["LAG_KEY", "ConsumerLag", "checkpoint_consumer_lag", "consumer_lag",
           "merge_task_lag", "partition_lag"]
