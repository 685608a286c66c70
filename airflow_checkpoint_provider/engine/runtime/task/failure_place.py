"""Where in a task an exception was raised: the operator (name, uid, kind, class) and the
phase of the task's life (:data:`PHASES`).

The task's loops wrap their calls into operators in ``try``/``except`` blocks that
:func:`mark` the exception on its way up (free when nothing is raised); the innermost mark
wins, so a failure in operator 3 while operator 1's timer pushes records into it is
operator 3's, in phase ``processing``. The task's failure handler reads the mark
(:func:`place_of`) into the :class:`~..protocol.messages.TaskFailed` message the job master
turns into the failure reason.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the phases of a task: open (no state restored) or restore (state restored), processing
#: records (and ending the input), timers (event-time timers and windows firing on a
#: watermark, processing-time timers), the synchronous snapshot of a checkpoint, the commit
#: (a completed checkpoint) or abort (an aborted one) of its sink transactions, and close
PHASES = (
    "open",
    "restore",
    "processing",
    "timer",
    "end_input",
    "snapshot",
    "commit",
    "abort",
    "close",
)

_ATTR = "_ckpt_failure_place"


@dataclass(frozen=True)
class FailurePlace:
    """The operator a failure happened in and the phase."""

    operator: str  # "process 'winning-bids' (WinningBid)"
    uid: str
    phase: str


def describe_node(node) -> str:
    """``kind 'name' (Class)`` of a graph node: what a user recognizes in their pipeline."""
    payload = getattr(node, "payload", None)
    what = ""
    if payload is not None:
        describe = getattr(payload, "describe", None)
        if node.kind in ("source", "sink") and callable(describe):
            try:
                what = str(describe())
            except Exception:  # noqa: BLE001 - only a label
                what = type(payload).__name__
        else:
            what = getattr(payload, "__qualname__", None) or type(payload).__name__
    return f"{node.kind} {node.name!r}" + (f" ({what})" if what and what not in node.name else "")


def mark(exc: BaseException, node, phase: str) -> None:
    """Record on ``exc`` that it was raised in ``node``'s ``phase`` unless an inner block
    already did."""
    if getattr(exc, _ATTR, None) is not None:
        return
    try:
        setattr(exc, _ATTR, FailurePlace(describe_node(node), node.uid or "", phase))
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass


def place_of(exc: BaseException) -> FailurePlace | None:
    """The place :func:`mark` recorded on ``exc`` (or on the exception it was raised from)."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 10:
        place = getattr(e, _ATTR, None)
        if isinstance(place, FailurePlace):
            return place
        e = e.__cause__ or e.__context__
        seen += 1
    return None
