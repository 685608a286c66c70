"""Capabilities of sink writers and sources as protocols (issue 53 item 5): the engine asks
``isinstance`` (never ``getattr``) before it releases a fenced epoch early or lets a source
claim its upstream state before a restore."""

from __future__ import annotations

import pytest

from airflow_checkpoint_provider.engine import DiscardSink, GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.connectors.base import SinkWriter
from airflow_checkpoint_provider.engine.connectors.capabilities import (
    SupportsClaimBeforeRestore,
    SupportsDiscardHeld,
    SupportsJobStartCheck,
)
from airflow_checkpoint_provider.engine.connectors.discard import DiscardWriter
from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
from airflow_checkpoint_provider.engine.runtime.operators.registry import open_operator
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

RELEASED: list = []


class HoldingWriter(DiscardWriter):
    """Stages one transaction per epoch; no ``discard_held``."""

    def pre_commit(self, checkpoint_id):
        return [f"txn-{checkpoint_id}"]


class ReleasingWriter(HoldingWriter):
    def discard_held(self, transactions) -> None:
        RELEASED.extend(transactions)


class WriterSink(DiscardSink):
    def __init__(self, writer) -> None:
        self.writer_class = writer

    def create_writer(self, ctx):
        return self.writer_class()


def _fenced_sink_operator(writer):
    p = Pipeline("fenced")
    p.source(GeneratorSource(10), uid="gen").sink(WriterSink(writer), uid="out")
    node = next(n for n in p.job_graph().nodes if n.uid == "out")
    ctx = RuntimeContext(job_id="j", job_name="fenced", operator_uid="out", subtask_index=0,
                         parallelism=1, attempt=0, fence_sinks=True)
    return open_operator(node, ctx, KeyGroupRange(0, 127), 128, None, None)


def test_the_engine_writers_with_discard_held_declare_it():
    from airflow_checkpoint_provider.engine.connectors.kafka.sink import _ExactlyOnceWriter
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import _PostgresWriter

    assert issubclass(_PostgresWriter, SupportsDiscardHeld)
    assert issubclass(_ExactlyOnceWriter, SupportsDiscardHeld)
    assert not issubclass(SinkWriter, SupportsDiscardHeld)
    assert SinkWriter.accepts_rows is False and SinkWriter.accepts_arrow is False


@pytest.mark.parametrize(("writer", "released"), [(ReleasingWriter, ["txn-1"]),
                                                  (HoldingWriter, [])])
def test_a_fenced_sink_releases_a_completed_epoch_only_through_discard_held(writer, released):
    RELEASED.clear()
    op = _fenced_sink_operator(writer)
    assert op.fenced
    op.snapshot(1)
    op.snapshot(2)
    op.notify_complete(1)
    assert RELEASED == released
    # a writer without the capability holds every epoch until the job ends
    assert [c for c, _ in op.pending] == ([2] if released else [1, 2])


def test_the_cdc_source_declares_its_job_start_capabilities():
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import (
        PostgresCdcSource,
    )

    assert issubclass(PostgresCdcSource, SupportsClaimBeforeRestore)
    assert issubclass(PostgresCdcSource, SupportsJobStartCheck)
    assert not isinstance(GeneratorSource(1), SupportsClaimBeforeRestore)
    assert not isinstance(GeneratorSource(1), SupportsJobStartCheck)


def test_the_job_master_calls_only_the_sources_that_have_the_job_start_capabilities():
    from types import SimpleNamespace

    from airflow_checkpoint_provider.engine.plan.graph import ExecutionGraph
    from airflow_checkpoint_provider.engine.runners.jobmaster.fencing import (
        check_job_start,
        claim_before_restore,
    )

    calls: list = []

    class SlotSource(GeneratorSource):
        def check_job_start(self, store, *, job_name, job_id, fenced, restored):
            calls.append(("check", job_name, job_id, fenced, restored))

        def claim_before_restore(self, store, *, job_name, job_id):
            calls.append(("claim", job_name, job_id))

    nodes = [SimpleNamespace(kind="source", uid="slot", name="slot", payload=SlotSource(1)),
             SimpleNamespace(kind="source", uid="gen", name="gen", payload=GeneratorSource(1))]
    graph = ExecutionGraph.__new__(ExecutionGraph)
    graph.vertices = [SimpleNamespace(nodes=nodes)]
    claim_before_restore(graph, object(), "job", "j-1")
    check_job_start(graph, object(), SimpleNamespace(name="job", fence_sinks=False), "j-1", None)
    assert calls == [("claim", "job", "j-1"), ("check", "job", "j-1", False, {})]
