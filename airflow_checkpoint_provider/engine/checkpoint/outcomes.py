"""The coordinator's typed vocabulary (Flink's ``CheckpointFailureReason`` and
``TaskAcknowledgeResult``): what a task acknowledges, what became of an acknowledgement,
and why a pending checkpoint was aborted."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskAck:
    """One task's acknowledgement of a checkpoint: its operators' snapshot handles by uid
    (states, operator state, keyed handle, channel state) and its metrics at the barrier
    (sizes, records, watermark, end of input)."""

    operators: dict[str, dict] = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)


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
