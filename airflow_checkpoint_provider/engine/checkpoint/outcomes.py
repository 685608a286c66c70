"""The coordinator's typed vocabulary (Flink's ``CheckpointFailureReason`` and
``TaskAcknowledgeResult``): what a task acknowledges, what became of an acknowledgement,
and why a pending checkpoint was aborted."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..snapshot.handles import (
    ChannelStateHandle,
    KeyedStateHandle,
    key_group_range,
    keyed_handle_from_dict,
)
from ..snapshot.paths import mapping, non_negative_int, sequence


@dataclass(frozen=True)
class OperatorAck:
    """One operator's snapshot in a task's ack (Flink's ``OperatorSubtaskState``): its state
    descriptors by name, its operator (non-keyed) state, the handle of its keyed state
    file(s) and the key groups they hold, and the in-flight records of an unaligned
    checkpoint. Decoded (and its handles validated) where the ack arrives
    (:meth:`TaskAck.from_wire`)."""

    states: dict[str, dict] = field(default_factory=dict)
    operator_state: tuple = ()
    keyed: KeyedStateHandle | None = None
    key_group_range: tuple[int, int] | None = None
    channel_state: ChannelStateHandle | None = None

    @classmethod
    def from_wire(cls, entry: object, *, location: str, field: str) -> OperatorAck:
        """Decode one entry of ``Ack.operators`` (the wire protocol's JSON-like mapping);
        :class:`~..errors.CorruptCheckpointError` naming the field if it is malformed."""
        d = mapping(entry, field=field, location=location)
        states = mapping(d.get("states") or {}, field=f"{field}.states", location=location)
        for name, meta in states.items():
            mapping(meta, field=f"{field}.states[{name!r}]", location=location)
        kgr = (key_group_range(d["key_group_range"], field=f"{field}.key_group_range",
                               location=location)
               if d.get("key_group_range") is not None else None)
        keyed = (keyed_handle_from_dict(d["keyed"], location=location, field=f"{field}.keyed")
                 if d.get("keyed") is not None else None)
        channel = (ChannelStateHandle.from_dict(d["channel_state"], location=location,
                                                field=f"{field}.channel_state")
                   if d.get("channel_state") is not None else None)
        return cls(dict(states), tuple(sequence(d.get("operator_state") or [],
                                                field=f"{field}.operator_state",
                                                location=location)),
                   keyed, kgr, channel)


@dataclass(frozen=True)
class AckMetrics:
    """A task's statistics at the barrier (``Ack.metrics``). The fields the driver acts on
    are typed; ``reported`` is the whole mapping as the task sent it (timings, records per
    operator, in-flight bytes, debloating, counters ...), stored as the task's row of the
    checkpoint's ``task_stats``."""

    #: bytes of state the snapshot references / bytes this checkpoint uploaded
    state_size: int = 0
    checkpointed_size: int = 0
    #: the task had reached the end of its input (FLIP-147): recorded per subtask
    finished: bool = False
    #: ``{operator: [in, out]}`` up to the barrier, and the input watermark
    records: dict[str, Any] | None = None
    watermark: int | None = None
    reported: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, metrics: object, *, location: str) -> AckMetrics:
        m = mapping(metrics or {}, field="metrics", location=location)
        records = m.get("records")
        watermark = m.get("watermark")
        return cls(
            state_size=non_negative_int(m.get("state_size", 0), field="metrics.state_size",
                                        location=location),
            checkpointed_size=non_negative_int(m.get("checkpointed_size", 0),
                                               field="metrics.checkpointed_size",
                                               location=location),
            finished=bool(m.get("finished")),
            records=records if isinstance(records, dict) else None,
            watermark=watermark if isinstance(watermark, int) else None,
            reported=dict(m))


@dataclass(frozen=True)
class TaskAck:
    """One task's acknowledgement of a checkpoint: its operators' snapshots by uid and its
    metrics at the barrier. The wire protocol's :class:`~..protocol.messages.Ack` carries
    them as mappings; :meth:`from_wire` decodes them where the ack arrives."""

    operators: dict[str, OperatorAck] = field(default_factory=dict)
    metrics: AckMetrics = field(default_factory=AckMetrics)

    @classmethod
    def from_wire(cls, operators: object = None, metrics: object = None, *,
                  location: str = "(ack)") -> TaskAck:
        """Decode ``Ack.operators`` and ``Ack.metrics``; ``location`` (the checkpoint's
        directory) names the ack in a :class:`~..errors.CorruptCheckpointError`."""
        ops = mapping(operators or {}, field="operators", location=location)
        return cls({str(uid): OperatorAck.from_wire(entry, location=location,
                                                    field=f"operators[{uid!r}]")
                    for uid, entry in ops.items()},
                   AckMetrics.from_wire(metrics, location=location))


class AckResult(enum.Enum):
    """What became of an acknowledgement (:meth:`.coordinator.PendingCheckpoint.acknowledge`)."""

    #: recorded; the checkpoint still waits for other tasks
    SUCCESS = "success"
    #: recorded, and it was the last one: the checkpoint can complete
    LAST = "last"
    #: the task had already acknowledged this checkpoint (dropped)
    DUPLICATE = "duplicate"
    #: no such pending checkpoint (it was aborted, completed or never triggered): a late
    #: ack, dropped
    UNKNOWN = "unknown"
    #: the task is not one this checkpoint waits for (dropped)
    NOT_AWAITED = "not awaited"


class CheckpointFailureReason(enum.StrEnum):
    """Why a pending checkpoint was aborted."""

    #: a task declined it (its snapshot failed)
    DECLINED = "declined"
    #: not completed within ``timeout_ms``
    EXPIRED = "expired"
    #: a newer checkpoint completed first
    SUBSUMED = "subsumed"
    #: the attempt failed over; pending checkpoints cannot complete
    JOB_FAILOVER = "job failover"
    #: the ``_metadata`` file could not be written (a storage outage)
    METADATA_FILE_UNWRITABLE = "metadata file unwritable"
    #: the metadata DB did not record it in time
    METADATA_DB_UNAVAILABLE = "metadata DB unavailable"

    @property
    def counts_as_failure(self) -> bool:
        """Whether it counts against ``tolerable_failures`` (a subsumed checkpoint or a
        failover does not: nothing about checkpointing failed)."""
        return self not in (CheckpointFailureReason.SUBSUMED, CheckpointFailureReason.JOB_FAILOVER)


@dataclass(frozen=True)
class CheckpointFailure:
    """An abort's reason and its message (the text of the checkpoint row's
    ``failure_reason``, the log and the listeners)."""

    reason: CheckpointFailureReason
    message: str

    def __str__(self) -> str:
        return self.message
