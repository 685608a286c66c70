"""A sink that drops every record (Flink's ``DiscardingSink``): for benchmarks and for jobs
whose only product is their state."""

from __future__ import annotations

from .base import Sink, SinkWriter, SourceContext


class DiscardSink(Sink):
    """Accepts Arrow batches and dict records alike and keeps nothing."""

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        return DiscardWriter()

    def can_discard_committed(self) -> bool:
        return True  # it keeps nothing: a fallback cannot duplicate its output

    def describe(self) -> str:
        return "discard"


class DiscardWriter(SinkWriter):
    """Keeps nothing and has no transactions; subclass it for a writer that only observes
    records (e.g. a benchmark's latency probe)."""

    accepts_arrow = True

    def write(self, records) -> None:
        pass

    def pre_commit(self, checkpoint_id: int) -> list[object]:
        return []

    def commit(self, transactions: list[object]) -> None:
        pass

    def recover(self, transactions: list[object]) -> None:
        pass
