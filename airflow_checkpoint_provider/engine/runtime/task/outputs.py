"""What a task writes to: its outputs as the task loop and its checkpointing see them.

The slot builds the real ones (:class:`~..channels.RecordWriter` over network or local
channels); the task only needs what these protocols list, so the task package does not import
the channels (which import the task's mailbox: no circle between the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..batches import Batch


class OutputChannel(Protocol):
    """One channel of an output: the task closes it when it ends."""

    def close(self) -> None: ...


class RecordOutput(Protocol):
    """One output edge of a task (its records partitioned over ``channels``)."""

    @property
    def side(self) -> str | None:
        """``None``: the main output; ``"late"``: the late records of the chain's window."""

    @property
    def channels(self) -> Sequence[OutputChannel]: ...

    @property
    def emitted(self) -> int:
        """Records emitted so far (buffer debloating measures a source's output by it)."""

    def emit(self, records: Batch) -> None: ...

    def emit_event(self, kind: int, payload: bytes = b"") -> None: ...

    def available(self, timeout: float = 0.0) -> int | None: ...
