"""What the coordinator server hands the job master's event loop, one event per slot frame
or connection end (read by :class:`~.attempt.AttemptRun` with ``match``).

Each control connection's reader thread puts them on ``CoordinatorServer.events``:

* :class:`SlotMessage` -- a decoded control message from a slot;
* :class:`SlotInvalid` -- the connection sent a frame the protocol refuses (too large,
  malformed); the server closed it;
* :class:`SlotLost` -- the connection ended (the slot process exited or the network broke).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.frames import ControlConnection
from ...protocol.messages import Message


@dataclass(frozen=True)
class SlotMessage:
    conn: ControlConnection
    msg: Message


@dataclass(frozen=True)
class SlotInvalid:
    conn: ControlConnection
    reason: str


@dataclass(frozen=True)
class SlotLost:
    conn: ControlConnection


SlotEvent = SlotMessage | SlotInvalid | SlotLost
