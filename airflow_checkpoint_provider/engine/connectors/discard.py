"""A sink that drops every record (Flink's ``DiscardingSink``): for benchmarks and for jobs
whose only product is their state."""

from __future__ import annotations

from collections.abc import Sequence

from .base import ConnectorContext, Sink, SinkWriter
from .capabilities import SupportsDiscardCommitted, Transaction


class DiscardSink(Sink, SupportsDiscardCommitted):
    """Accepts Arrow batches and dict records alike and keeps nothing."""

    def create_writer(self, ctx: ConnectorContext) -> SinkWriter:
        return DiscardWriter()

    def discard_committed_after(self, operator_uid: str, job_id: str,
                                checkpoint_id: int) -> list[str]:
        return []  # it keeps nothing: a fallback cannot duplicate its output

    def describe(self) -> str:
        return "discard"


class DiscardWriter(SinkWriter):
    """Keeps nothing and has no transactions; subclass it for a writer that only observes
    records (e.g. a benchmark's latency probe)."""

    accepts_arrow = True
    #: lists of dict records are not converted to Arrow for it either
    accepts_rows = True

    def write(self, records) -> None:
        pass

    def pre_commit(self, checkpoint_id: int) -> list[Transaction]:
        return []

    def commit(self, transactions: Sequence[Transaction]) -> None:
        pass

    def recover(self, transactions: Sequence[Transaction]) -> None:
        pass
