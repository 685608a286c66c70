"""The exceptions of the PostgreSQL connectors: the change-data-capture source's
(:mod:`.cdc`) with what they carry (:class:`Holder` of a slot, :class:`Blocker` of a wait),
and the engine's errors the sink raises (re-exported here, so a caller catches every
PostgreSQL connector error from one module)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import (
    ConfigurationError,
    DeterministicError,
    EngineError,
    SinkLockTimeoutError,
    SinkTransactionConflictError,
)

__all__ = [
    "Blocker", "CdcConfigurationError", "CdcError", "Holder", "ReplicationError",
    "SinkLockTimeoutError", "SinkTransactionConflictError", "SlotAheadError", "SlotHeldError",
    "SlotWaitTimeoutError",
]


class ReplicationError(EngineError):
    """The replication connection failed or the server sent what the decoder cannot read."""


class CdcError(DeterministicError):
    """The change stream cannot continue as it is (DDL, TRUNCATE on a captured table): a
    restart would meet the same change again, so the job fails without restarting."""


class SlotAheadError(CdcError):
    """The replication slot was confirmed past the reader's position: another reader (a
    second job on the slot, a fenced green) acknowledged changes this job never emitted."""


class CdcConfigurationError(ConfigurationError, CdcError):
    """A configuration the CDC source cannot run with (missing table, publication without
    the table, slot of another plugin or database): fails the job at once, no restarts."""


class SlotHeldError(CdcConfigurationError):
    """The job's replication slot is held by a reader that is not a run of this job (another
    tool, a session without the CDC source's ``application_name``): fails the job at once."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


class SlotWaitTimeoutError(CdcError):
    """Creating the replication slot, or a snapshot split's start, waited longer than
    ``slot_wait_timeout_s`` for transactions older than it: the message names them
    (:attr:`blockers`). Fails the job without restarts (a restart would wait again)."""

    def __init__(self, message: str, blockers: list[Blocker]) -> None:
        super().__init__(message)
        self.blockers = blockers


@dataclass(frozen=True)
class Holder:
    """The walsender holding a replication slot (``pg_replication_slots.active_pid``)."""

    pid: int
    application_name: str | None
    user: str | None
    client: str | None
    connected_s: float | None

    def describe(self) -> str:
        age = f", connected {self.connected_s:.0f} s ago" if self.connected_s is not None else ""
        return (
            f"PID {self.pid} (application_name {self.application_name!r}, user "
            f"{self.user}, client {self.client or 'local socket'}{age})"
        )


@dataclass(frozen=True)
class Blocker:
    """A transaction a wait is waiting for."""

    kind: str  # "prepared" or "session"
    database: str | None
    user: str | None
    age_s: float
    gid: str | None = None
    pid: int | None = None
    application_name: str | None = None
    state: str | None = None

    def describe(self) -> str:
        if self.kind == "prepared":
            return (
                f"prepared transaction gid {self.gid!r} (database {self.database}, owner "
                f"{self.user}, prepared {self.age_s:.0f} s ago)"
            )
        return (
            f"session pid {self.pid} (database {self.database}, user {self.user}, "
            f"application_name {self.application_name!r}, state {self.state!r}, "
            f"transaction open {self.age_s:.0f} s)"
        )
