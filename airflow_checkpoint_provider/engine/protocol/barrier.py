"""The checkpoint barrier: what sources inject and tasks align on (Flink's
``CheckpointBarrier`` with its ``CheckpointOptions``: id, timestamp, kind, target location).

On a data channel a barrier is one ``BARRIER`` frame holding the msgpack list
``[checkpoint_id, timestamp_ms, kind, location, unaligned]``; :meth:`CheckpointBarrier.decode`
is the only reader of that list and checks every field. An *unaligned* barrier overtakes the
records queued ahead of it at the receiving task (see :mod:`..runtime.mailbox`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..serialization import packb, unpackb
from .errors import ProtocolError


class BarrierKind(StrEnum):
    """What a barrier asks of the tasks it passes."""

    #: a periodic (or requested) checkpoint
    CHECKPOINT = "CHECKPOINT"
    #: a savepoint; the job goes on
    SAVEPOINT = "SAVEPOINT"
    #: stop-with-savepoint: sources emit nothing after it
    SAVEPOINT_STOP = "SAVEPOINT_STOP"
    #: stop-with-savepoint with ``--drain``: sources end their input first
    SAVEPOINT_DRAIN = "SAVEPOINT_DRAIN"

    @property
    def is_savepoint(self) -> bool:
        return self is not BarrierKind.CHECKPOINT

    @property
    def stops_sources(self) -> bool:
        return self in (BarrierKind.SAVEPOINT_STOP, BarrierKind.SAVEPOINT_DRAIN)


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    checkpoint_id: int
    timestamp_ms: int
    kind: BarrierKind
    #: where the tasks write this checkpoint's files
    location: str
    #: an unaligned checkpoint: the barrier overtakes in-flight records, which become
    #: channel state (savepoints are always aligned)
    unaligned: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint_id, int) or isinstance(self.checkpoint_id, bool) \
                or self.checkpoint_id < 1:
            raise ProtocolError(f"barrier: checkpoint id {self.checkpoint_id!r} is not a "
                                "positive integer")
        if not isinstance(self.timestamp_ms, int) or isinstance(self.timestamp_ms, bool):
            raise ProtocolError(f"barrier {self.checkpoint_id}: timestamp "
                                f"{self.timestamp_ms!r} is not an integer")
        try:
            object.__setattr__(self, "kind", BarrierKind(self.kind))
        except ValueError:
            raise ProtocolError(f"barrier {self.checkpoint_id}: unknown kind "
                                f"{self.kind!r}") from None
        if not isinstance(self.location, str) or not self.location:
            raise ProtocolError(f"barrier {self.checkpoint_id}: location {self.location!r} "
                                "is not a path")
        if not isinstance(self.unaligned, bool):
            raise ProtocolError(f"barrier {self.checkpoint_id}: unaligned flag "
                                f"{self.unaligned!r} is not a boolean")
        if self.unaligned and self.kind.is_savepoint:
            raise ProtocolError(f"barrier {self.checkpoint_id}: a savepoint cannot be unaligned")

    def encode(self) -> bytes:
        return packb([self.checkpoint_id, self.timestamp_ms, self.kind.value, self.location,
                      self.unaligned])

    def as_unaligned(self) -> CheckpointBarrier:
        return CheckpointBarrier(self.checkpoint_id, self.timestamp_ms, self.kind, self.location,
                                 True)

    @classmethod
    def decode(cls, payload: bytes) -> CheckpointBarrier:
        fields = unpackb(payload)
        if not isinstance(fields, list) or len(fields) != 5:
            raise ProtocolError(f"barrier frame: expected [id, timestamp, kind, location, "
                                f"unaligned], "
                                f"got {fields!r:.200}")
        return cls(*fields)
