"""What a sink can do beyond two-phase commit, as protocols (issue 53 item 5).

Every sink is exactly-once through :class:`~.base.Sink` and :class:`~.base.SinkWriter`. Some
can do more, and the engine asks before it relies on it:

* :class:`SupportsDiscardCommitted`: remove what a job committed after a checkpoint (a
  ``restore="latest"`` falling back past corrupt checkpoints, ``ckpt sinks discard`` before
  a rollback);
* :class:`SupportsFencing`: hold pre-committed output invisible and discard what a job
  staged (a fenced, blue-green validation run; the clean-up of an ended job whose
  checkpoint a new job restored);
* :class:`SupportsDiscardUncommitted`: roll back what an ended job pre-committed for
  checkpoints that never completed (a prepared transaction holds server resources until
  then);
* :class:`SupportsRelocation`: check restored transactions before the job starts (they come
  from a snapshot: untrusted), and commit those staged where an older version of the job
  wrote;
* :class:`SupportsUpsert`: apply a changelog per key (``mode="upsert"``, ``key``): the
  pipeline puts an upsert materializer in front of it.

One capability belongs to a sink's *writer* (a subtask's :class:`~.base.SinkWriter`):

* :class:`SupportsDiscardHeld`: in a fenced job, drop each epoch's staged transactions as
  soon as its checkpoint completed or aborted (instead of holding them until the job ends).

And two to a *source* whose upstream position is shared state (a CDC source's replication
slot), which the job master calls before the tasks start:

* :class:`SupportsClaimBeforeRestore`: claim that state for the job before the snapshot to
  restore is chosen;
* :class:`SupportsJobStartCheck`: check ownership, restored positions and configuration.

A sink declares a capability by naming its protocol among its bases
(``class MySink(Sink, SupportsFencing)``): mypy then checks the methods' signatures against
the protocol. The engine tests with ``isinstance``, which (the protocols are
``runtime_checkable``) also recognises a sink that has the methods without declaring them,
as sinks written before these protocols do. :meth:`~.base.Sink.can_discard_committed` and
:meth:`~.base.Sink.can_hold_commits` answer for one instance (a sink whose capability depends
on its mode overrides them); their defaults are these ``isinstance`` tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

#: A transaction description as it goes into a checkpoint and comes back from one: a
#: msgpack-able value (a prepared-transaction id, a dict naming a staged file ...). One
#: restored from a snapshot is untrusted input: a sink checks its shape before it uses it.
Transaction: TypeAlias = None | bool | int | float | str | bytes | list[Any] | dict[str, Any]


@runtime_checkable
class SupportsDiscardCommitted(Protocol):
    """A sink that can remove what a job committed after a checkpoint (or keeps nothing, or
    writes idempotently, so that nothing needs removing)."""

    def discard_committed_after(self, operator_uid: str, job_id: str,
                                checkpoint_id: int) -> list[str]:
        """Undo what job ``job_id`` committed for checkpoints after ``checkpoint_id`` (-1:
        all of it): its records are replayed. Returns what was removed (for the log)."""
        ...


@runtime_checkable
class SupportsFencing(Protocol):
    """A sink whose pre-committed transactions stay invisible until
    :meth:`~.base.SinkWriter.commit`, and that can discard what a job staged: it can run in
    a fenced job (``fence_sinks=True``), which never commits."""

    def discard_staged_of_job(self, operator_uid: str, job_id: str) -> list[str] | None:
        """Discard everything job ``job_id`` staged (pre-committed, never committed) for
        ``operator_uid``. Returns what was discarded (for the log)."""
        ...


@runtime_checkable
class SupportsDiscardUncommitted(Protocol):
    """A sink whose pre-committed transactions hold resources until they end (PostgreSQL's
    prepared transactions), so an ended job's doomed ones are rolled back at once."""

    def discard_uncommitted_of_job(self, operator_uid: str, job_id: str,
                                   newest_completed: int) -> list[str]:
        """Roll back what job ``job_id`` pre-committed for checkpoints after its newest
        completed one (``newest_completed``; -1: none). Returns what was rolled back."""
        ...


@runtime_checkable
class SupportsRelocation(Protocol):
    """A sink that checks the transactions restored from a snapshot before any task starts
    (and may find them where an older version of the job staged them)."""

    def check_restored_transactions(self, transactions: Sequence[Transaction], *,
                                    location: str) -> None:
        """Refuse transactions this sink could not commit safely, with
        :class:`~...errors.CorruptCheckpointError` (a crafted or damaged snapshot) or a
        restore error saying where the records are and what to do."""
        ...


@runtime_checkable
class SupportsUpsert(Protocol):
    """A sink that applies a changelog per key when ``mode == "upsert"``: ``key`` names the
    columns (a primary key of the table), empty in the other modes."""

    mode: str
    key: list[str]


@runtime_checkable
class SupportsDiscardHeld(Protocol):
    """A sink writer that, in a fenced job, releases the transactions it staged for an epoch
    once that epoch's checkpoint completed or aborted (a fenced job never commits them), so
    it holds a bounded number (prepared transactions are a server resource). A writer
    without it keeps them until the job ends; the job master discards them then."""

    def discard_held(self, transactions: Sequence[Transaction]) -> None:
        """Drop ``transactions`` (staged, never to be published)."""
        ...


@runtime_checkable
class SupportsClaimBeforeRestore(Protocol):
    """A source whose upstream position is shared state it claims for the job before the
    snapshot to restore is chosen (a CDC source's explicitly named slot): a job pointed at
    another job's state is refused for that first."""

    def claim_before_restore(self, store: Any, *, job_name: str, job_id: str) -> None:
        """Claim the shared state for ``job_name``/``job_id`` in the metadata ``store``."""
        ...


@runtime_checkable
class SupportsJobStartCheck(Protocol):
    """A source that checks its upstream state before the job's tasks start: ownership,
    the restored positions (``restored``: split -> position), configuration errors no
    restart would cure. Fenced (``fenced``), it must never acknowledge upstream."""

    def check_job_start(self, store: Any, *, job_name: str, job_id: str, fenced: bool,
                        restored: dict) -> None:
        """Raise a typed error saying what to do when the job must not start."""
        ...


def upsert_columns(sink: object) -> list[str] | None:
    """The key columns of a sink in upsert mode, else ``None``."""
    if isinstance(sink, SupportsUpsert) and sink.mode == "upsert" and sink.key:
        return list(sink.key)
    return None
