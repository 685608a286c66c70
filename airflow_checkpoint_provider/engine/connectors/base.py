"""Connector contracts: replayable sources and two-phase-commit sinks.

Sources are split based (as in Flink's FLIP-27): a source names a fixed list of splits that
does not depend on the parallelism; split ``j`` of ``n`` runs on subtask ``j % parallelism``.
Each split's read position is operator state, so a restore (at any parallelism) rewinds
every split to where the checkpoint saw it.

Sinks are exactly-once through two-phase commit: records of one checkpoint epoch go into a
transaction; at the barrier the writer pre-commits it (makes it durable but invisible) and
returns a msgpack-able description that goes into the checkpoint; when the coordinator
reports the checkpoint complete, the writer commits; after a failure the restored
descriptions are committed again (commit is idempotent) and every other transaction is
aborted. What a sink can do beyond that (discard committed output, run fenced, relocate,
upsert) it declares with the protocols of :mod:`.capabilities`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import UnsafeRestoreFallbackError
from .capabilities import SupportsDiscardCommitted, SupportsFencing, Transaction

__all__ = [
    "ConnectorContext", "Sink", "SinkWriter", "Source", "SourceContext", "SplitReader",
    "Transaction", "dataset_for_location", "iceberg_dataset",
]


@dataclass(frozen=True)
class ConnectorContext:
    """What a split reader or a sink writer knows about where it runs: the job (``job_id``,
    ``job_name``), the operator (``operator_uid``), the subtask (``subtask_index`` of
    ``parallelism``) and the run attempt (``attempt``, counted from 0 and increasing with
    each restart of the job: the token that tells a writer of this attempt from a zombie of
    an earlier one, e.g. in a staged file's name)."""

    job_id: str
    job_name: str
    operator_uid: str
    subtask_index: int
    parallelism: int
    attempt: int
    #: the job runs fenced (a blue-green validation run): a source must not acknowledge
    #: positions upstream where they are shared state (a replication slot); a sink's
    #: transactions are pre-committed and never committed (:class:`~.capabilities.SupportsFencing`)
    fenced: bool = False


#: The context of a split reader: the same class as :class:`ConnectorContext` (before issue 53
#: sinks got it under this name too; it stays for sources and for sinks written then).
SourceContext = ConnectorContext


class SplitReader:
    """Reads one split from a position."""

    def read_batch(self, max_records: int) -> list[dict] | None:
        """Return up to ``max_records`` records; ``[]`` if nothing is available right now
        (unbounded sources); ``None`` once the split is exhausted."""
        raise NotImplementedError

    def position(self) -> object:
        """The msgpack-able position after the last record returned."""
        raise NotImplementedError

    def notify_checkpoint_complete(self, checkpoint_id: int, position: object) -> None:
        """Checkpoint ``checkpoint_id`` completed and holds ``position`` for this split: what
        came before it is durable, so the reader may acknowledge it upstream (a CDC source
        confirms its replication slot up to there). Called in the reader's task thread; the
        default does nothing."""

    def close(self) -> None:
        pass


class Source:
    """A replayable source."""

    #: Modules that every slot running this connector imports (its client library). The
    #: local runner's fork server imports them once, before it forks the job's slots, instead
    #: of each slot importing them again. Only modules that start no thread at import: a
    #: process that runs threads cannot fork safely.
    slot_imports: tuple[str, ...] = ()

    def splits(self) -> Sequence[str]:
        """Stable split ids; the same list on every run of the job."""
        raise NotImplementedError

    def open_split(self, split_id: str, position: object | None, ctx: SourceContext) -> SplitReader:
        """Open a reader for ``split_id`` at ``position`` (``None``: from the start)."""
        raise NotImplementedError

    def lineage_dataset(self) -> tuple[str, str] | None:
        """``(namespace, name)`` of what this connector reads or writes, in OpenLineage's
        dataset naming; ``None`` when it has no external dataset (a generator)."""
        return None

    def describe(self) -> str:
        return type(self).__name__

    def check_restore(self, operator_uid: str, positions: Mapping[str, object], *,
                      checkpoint_id: int, location: str, job_name: str) -> None:
        """Whether this source of job ``job_name`` can restart from ``positions`` (split ->
        position recorded in checkpoint ``checkpoint_id`` at ``location``; ``{}`` and -1:
        empty state; finished splits are left out).
        Raise :class:`~..errors.RestoreError` saying why not (e.g. a replication slot
        acknowledged past the position: those changes are gone). Called by the job master
        before a restore changes anything (a fallback makes sinks remove output); must not
        change anything itself. Default: any position is fine (replayable sources)."""


class SinkWriter:
    """One subtask's writer of a two-phase-commit sink. Its transactions are
    :data:`~.capabilities.Transaction` values (msgpack-able: they go into the checkpoint).

    ``accepts_arrow``: ``write`` takes ``pyarrow.RecordBatch`` batches as they arrive;
    otherwise the engine converts batches to lists of dicts first (the slow path).
    ``accepts_rows`` (only read when ``accepts_arrow``): ``write`` also takes lists of dicts
    as they arrive, so the engine does not build a batch from rows for it.

    In a fenced job a writer may release each epoch's staged transactions early:
    :class:`~.capabilities.SupportsDiscardHeld`.
    """

    accepts_arrow: bool = False
    accepts_rows: bool = False

    def write(self, records: list[dict]) -> None:
        raise NotImplementedError

    def pre_commit(self, checkpoint_id: int) -> Sequence[Transaction]:
        """Make the current transaction durable and start a new one. Return msgpack-able
        descriptions of the transactions to commit once ``checkpoint_id`` completes."""
        raise NotImplementedError

    def commit(self, transactions: Sequence[Transaction]) -> None:
        """Make pre-committed transactions visible. Must be idempotent."""
        raise NotImplementedError

    def abort(self, transactions: Sequence[Transaction]) -> bool:
        """The checkpoint that pre-committed ``transactions`` was aborted (it never
        completes). A writer may undo them and carry their records into the open
        transaction; it returns True then (the transactions are forgotten). Default: keep
        them, committed with the next checkpoint that completes."""
        return False

    def recover(self, transactions: Sequence[Transaction]) -> None:
        """Called on restore before any write: commit ``transactions`` (pre-committed in the
        restored checkpoint, so they belong to the output; untrusted, as they come from a
        snapshot) and abort anything else."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class Sink:
    """A two-phase-commit sink: :meth:`create_writer` makes each subtask's
    :class:`SinkWriter`. Capabilities beyond that are the protocols of
    :mod:`.capabilities`, declared as further bases."""

    #: As :attr:`Source.slot_imports`.
    slot_imports: tuple[str, ...] = ()

    def create_writer(self, ctx: ConnectorContext) -> SinkWriter:
        raise NotImplementedError

    def lineage_dataset(self) -> tuple[str, str] | None:
        """``(namespace, name)`` of what this connector reads or writes, in OpenLineage's
        dataset naming; ``None`` when it has no external dataset (a generator)."""
        return None

    def describe(self) -> str:
        return type(self).__name__

    def check_restore(self, operator_uid: str, *, checkpoint_id: int,
                      discard: Mapping[str, int], location: str) -> None:
        """Whether this sink can go back to checkpoint ``checkpoint_id`` (at ``location``;
        -1: empty state) and remove what the jobs in ``discard`` committed after it (job id
        -> the checkpoint after which that job's output goes; -1: all of it). Raise
        :class:`~..errors.RestoreError` saying why not. Called by the job master before any
        sink discards or rewrites anything; must not change anything itself. Default: the
        discard needs :meth:`can_discard_committed`."""
        if discard and not self.can_discard_committed():
            jobs = ", ".join(f"job {job} after checkpoint {after}" if after >= 0
                             else f"job {job} (all of it)" for job, after in sorted(discard.items()))
            raise UnsafeRestoreFallbackError(
                f"the output committed by {jobs} would be written again, and this sink "
                "cannot remove it (it cannot discard committed output)")

    def can_hold_commits(self) -> bool:
        """Whether a fenced job (``fence_sinks=True``, a blue-green validation run) can run
        this sink: its pre-committed transactions stay invisible until :meth:`SinkWriter.commit`
        (which a fenced job never calls) and ``discard_staged_of_job(operator_uid, job_id)``
        removes what a job staged. A sink whose writes are visible before the commit (an
        upsert mode, a direct write) returns ``False``: fenced mode refuses it. Default: the
        sink supports :class:`~.capabilities.SupportsFencing`."""
        return isinstance(self, SupportsFencing)

    def can_discard_committed(self) -> bool:
        """Whether :meth:`discard_committed_after` really removes what a job committed (or
        the sink keeps nothing, or its writes are idempotent). ``restore="latest"`` refuses
        to fall back past another job's committed output when a sink cannot remove it (that
        output would be written twice). Default: the sink supports
        :class:`~.capabilities.SupportsDiscardCommitted`."""
        return isinstance(self, SupportsDiscardCommitted)


def dataset_for_location(location: str) -> tuple[str, str]:
    """OpenLineage dataset naming of a file or object-store location: ``("s3://bucket",
    "key/path")`` for S3, ``("file", "/absolute/path")`` for a local path or ``file://``."""
    import os
    from urllib.parse import urlsplit

    if location.startswith("s3://") or location.startswith("s3a://"):
        parts = urlsplit(location)
        return f"s3://{parts.netloc}", parts.path.strip("/")
    if location.startswith("file://"):
        location = urlsplit(location).path
    return "file", os.path.abspath(location)


def iceberg_dataset(catalog: dict[str, str], identifier: str) -> tuple[str, str]:
    """An Iceberg table's dataset: its warehouse (or catalog URI, without credentials) and
    ``namespace.table``."""
    from urllib.parse import urlsplit

    where = catalog.get("warehouse") or catalog.get("uri") or "iceberg"
    parts = urlsplit(where)
    if parts.password or parts.username:
        where = parts._replace(netloc=parts.hostname or "").geturl()
    return where.rstrip("/"), identifier
