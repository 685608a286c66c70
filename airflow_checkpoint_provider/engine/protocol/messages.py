"""Messages on the control connection between a slot and the job master.

Each message is a frozen dataclass with a wire ``TYPE``; :func:`encode` turns it into the
msgpack map sent in a ``CONTROL`` frame and :func:`decode` is the only reader of such maps: it
refuses an unknown type, a missing or unexpected field and a field of the wrong type
(:class:`ProtocolError`). Both ends dispatch on the message class.

A slot states :data:`PROTOCOL_VERSION` when it registers: a slot running another version of
this package (an executor with a stale install) is refused with a clear error instead of
failing later on a message it does not understand.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .barrier import BarrierKind, CheckpointBarrier
from .errors import ProtocolError

#: bumped on any incompatible change of a message or frame
PROTOCOL_VERSION = 5

M = TypeVar("M", bound="Message")
_REGISTRY: dict[str, type[Message]] = {}


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    TYPE: ClassVar[str] = ""


def _message(cls: type[M]) -> type[M]:
    if cls.TYPE in _REGISTRY:
        raise TypeError(f"message type {cls.TYPE!r} defined twice")
    _REGISTRY[cls.TYPE] = cls
    return cls


@dataclass(frozen=True, kw_only=True, slots=True)
class FromSlot(Message):
    """A message from a slot; the slot stamps its number and attempt when it sends."""

    slot: int = -1
    attempt: int = -1


@dataclass(frozen=True, kw_only=True, slots=True)
class FromTask(FromSlot):
    vertex: int
    subtask: int

    @property
    def task(self) -> tuple[int, int]:
        return self.vertex, self.subtask


# -- slot -> job master ---------------------------------------------------------------------


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Register(FromSlot):
    TYPE: ClassVar[str] = "register"
    pid: int
    host: str
    placement: dict
    version: int = PROTOCOL_VERSION


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Address(FromSlot):
    TYPE: ClassVar[str] = "address"
    address: list


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Running(FromSlot):
    """Every operator of the slot restored its state and opened. ``phases``: seconds the
    slot spent in each start-up step (register, peers, channels, restore), for the attempt's
    placement record."""

    TYPE: ClassVar[str] = "running"
    phases: dict | None = None


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class SlotFinished(FromSlot):
    TYPE: ClassVar[str] = "slot_finished"
    peak_rss_mb: float | None = None


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Ack(FromTask):
    """A task's snapshot of checkpoint ``checkpoint_id`` is written: its handles, metrics."""

    TYPE: ClassVar[str] = "ack"
    checkpoint_id: int
    operators: dict
    metrics: dict


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Decline(FromTask):
    TYPE: ClassVar[str] = "decline"
    checkpoint_id: int
    reason: str


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class TaskMetrics(FromTask):
    """Cumulative records in/out per operator uid (this attempt), and the task's input
    watermark (epoch ms; None before the first one)."""

    TYPE: ClassVar[str] = "metrics"
    counts: dict
    watermark: int | None = None
    #: late records dropped per window operator uid (cumulative, this attempt)
    late: dict | None = None
    #: other operator counters, ``{operator uid: {counter: n}}`` (cumulative, this attempt;
    #: :func:`~..runtime.task.checkpointing.operator_counters`)
    counters: dict | None = None


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class EndOfInput(FromTask):
    TYPE: ClassVar[str] = "end_of_input"


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class TaskFinished(FromTask):
    TYPE: ClassVar[str] = "task_finished"


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class TaskFailed(FromTask):
    TYPE: ClassVar[str] = "task_failed"
    error: str
    traceback: str = ""
    #: no restart can fix it (a snapshot that cannot be restored, bad input)
    fatal: bool = False
    #: where it failed (:mod:`..runtime.task.failure_place`): the operator (``kind 'name'
    #: (Class)``), its uid and the phase (restore, processing, timer, snapshot, commit,
    #: close, ...); the task's parallelism names the subtask as ``i/n``
    operator: str = ""
    uid: str = ""
    phase: str = ""
    parallelism: int = 0


# -- job master -> slot ---------------------------------------------------------------------


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class JobDescription(Message):
    """The job (graph, restore assignments, settings), cloudpickled."""

    TYPE: ClassVar[str] = "job"
    payload: bytes


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Peers(Message):
    TYPE: ClassVar[str] = "peers"
    #: slot number (as a string: msgpack map keys) -> [host, port] of its data server
    peers: dict


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Trigger(Message):
    """Inject a barrier at the sources."""

    TYPE: ClassVar[str] = "trigger"
    checkpoint_id: int
    timestamp: int
    kind: str
    location: str
    #: unaligned from the start: every slot gets the trigger, so that the inputs of its
    #: non-source tasks read ahead to the barrier (see :class:`Unalign`)
    unaligned: bool = False

    def barrier(self) -> CheckpointBarrier:
        return CheckpointBarrier(self.checkpoint_id, self.timestamp, BarrierKind(self.kind),
                                 self.location, self.unaligned)


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Unalign(Message):
    """Checkpoint ``checkpoint_id`` turns unaligned (it started aligned and its alignment
    exceeded ``aligned_timeout_ms``, or it is unaligned from the start): the non-source
    tasks' inputs read ahead to its barriers, which overtake queued records."""

    TYPE: ClassVar[str] = "unalign"
    checkpoint_id: int


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Notify(Message):
    """Checkpoint ``checkpoint_id`` completed: commit what it covers."""

    TYPE: ClassVar[str] = "notify"
    checkpoint_id: int


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Abort(Message):
    TYPE: ClassVar[str] = "abort"
    checkpoint_id: int


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Finish(Message):
    """Every task ends (after the final checkpoint or a stop)."""

    TYPE: ClassVar[str] = "finish"


@_message
@dataclass(frozen=True, kw_only=True, slots=True)
class Recycle(Message):
    """This attempt ends and the slot's process hosts the next one (``attempt``): its tasks
    stop (what they staged is never published), then the slot registers again as that
    attempt, in the same process (a PROMOTE's warm slots: no new placement, no process
    start)."""

    TYPE: ClassVar[str] = "recycle"
    attempt: int


# -- codec ------------------------------------------------------------------------------------


def encode(msg: Message) -> dict[str, Any]:
    """The wire map of ``msg``."""
    out: dict[str, Any] = {"type": msg.TYPE}
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        out[f.name] = value.value if isinstance(value, BarrierKind) else value
    return out


_FIELD_TYPES: dict[type, dict[str, tuple[type, ...]]] = {}


def _field_types(cls: type[Message]) -> dict[str, tuple[type, ...]]:
    """Field name -> accepted Python types (``X | None`` accepts None; float accepts int)."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        accepted: dict[str, tuple[type, ...]] = {}
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
            kinds = tuple(typing.get_origin(o) or o for o in options)
            if float in kinds:
                kinds += (int,)
            accepted[f.name] = tuple(type(None) if k is None else k for k in kinds)
        _FIELD_TYPES[cls] = accepted
    return _FIELD_TYPES[cls]


def decode(wire: Any) -> Message:
    """The message of a wire map; :class:`ProtocolError` unless it is well-formed."""
    if not isinstance(wire, dict):
        raise ProtocolError(f"control message is not a map: {wire!r:.200}")
    fields = dict(wire)
    kind = fields.pop("type", None)
    cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown control message type {kind!r}")
    accepted = _field_types(cls)
    unexpected = sorted(set(fields) - set(accepted))
    if unexpected:
        raise ProtocolError(f"{kind} message: unexpected fields {unexpected}")
    for name, value in fields.items():
        ok = accepted[name]
        if not isinstance(value, ok) or (isinstance(value, bool) and bool not in ok):
            raise ProtocolError(f"{kind} message: field {name!r} = {value!r:.100} is not "
                                f"{' or '.join(t.__name__ for t in ok)}")
    try:
        return cls(**fields)
    except TypeError as exc:  # a required field is missing
        raise ProtocolError(f"{kind} message: {exc}") from None
