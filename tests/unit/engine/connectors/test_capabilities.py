"""Sink capabilities as protocols (issue 53 item 5): the engine's sinks declare them, a sink
written against the base class before them is still recognised by its methods, and the old
module paths of the connectors keep working with a DeprecationWarning."""

from __future__ import annotations

import pickle
import warnings

import pytest

from airflow_checkpoint_provider.engine.connectors.base import (
    ConnectorContext,
    Sink,
    SinkWriter,
    SourceContext,
)
from airflow_checkpoint_provider.engine.connectors.capabilities import (
    SupportsDiscardCommitted,
    SupportsDiscardUncommitted,
    SupportsFencing,
    SupportsRelocation,
    SupportsUpsert,
    upsert_columns,
)
from airflow_checkpoint_provider.engine.connectors.discard import DiscardSink
from airflow_checkpoint_provider.engine.connectors.files.sink import FileSink
from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink
from airflow_checkpoint_provider.engine.errors import ConfigurationError, UnsafeRestoreFallbackError

URL = "postgresql://nobody@127.0.0.1:1/none"


class OldStyleSink(Sink):
    """A third-party sink written before the protocols: it has the methods, names none."""

    def create_writer(self, ctx):
        return SinkWriter()

    def discard_committed_after(self, operator_uid, job_id, checkpoint_id):
        return []

    def discard_staged_of_job(self, operator_uid, job_id):
        return []


class PlainSink(Sink):
    def create_writer(self, ctx):
        return SinkWriter()


def test_the_file_sink_declares_discard_fencing_and_relocation(tmp_path):
    sink = FileSink(str(tmp_path / "out"))
    assert isinstance(sink, SupportsDiscardCommitted)
    assert isinstance(sink, SupportsFencing)
    assert isinstance(sink, SupportsRelocation)
    assert not isinstance(sink, SupportsUpsert)
    assert sink.can_hold_commits() and sink.can_discard_committed()


def test_the_postgres_sink_answers_by_its_mode():
    two_pc = PostgresSink(URL, "t", ["a"])
    upsert = PostgresSink(URL, "t", ["a", "b"], mode="upsert", key=["a"])
    for sink in (two_pc, upsert):
        assert isinstance(sink, SupportsFencing)
        assert isinstance(sink, SupportsDiscardUncommitted)
        assert isinstance(sink, SupportsRelocation)
        assert isinstance(sink, SupportsUpsert)
        assert not isinstance(sink, SupportsDiscardCommitted)  # nothing it could remove
    assert two_pc.can_hold_commits() and not two_pc.can_discard_committed()
    assert not upsert.can_hold_commits() and upsert.can_discard_committed()  # idempotent
    assert upsert_columns(upsert) == ["a"]
    assert upsert_columns(two_pc) is None


def test_the_discard_sink_can_be_restored_past_committed_output():
    sink = DiscardSink()
    assert isinstance(sink, SupportsDiscardCommitted) and sink.can_discard_committed()
    assert not sink.can_hold_commits()
    sink.check_restore("out", checkpoint_id=3, discard={"job-1": 3}, location="here")


def test_a_sink_written_before_the_protocols_is_recognised_by_its_methods():
    sink = OldStyleSink()
    assert isinstance(sink, SupportsDiscardCommitted) and isinstance(sink, SupportsFencing)
    assert sink.can_discard_committed() and sink.can_hold_commits()
    sink.check_restore("out", checkpoint_id=3, discard={"job-1": 3}, location="here")


def test_a_sink_without_capabilities_refuses_a_discard_and_fencing():
    sink = PlainSink()
    assert not sink.can_discard_committed() and not sink.can_hold_commits()
    assert not isinstance(sink, SupportsRelocation)
    with pytest.raises(UnsafeRestoreFallbackError, match="cannot remove it"):
        sink.check_restore("out", checkpoint_id=3, discard={"job-1": -1}, location="here")


def test_fencing_refuses_a_sink_that_cannot_hold_commits(tmp_path):
    from airflow_checkpoint_provider.engine.plan.graph import ExecutionGraph
    from airflow_checkpoint_provider.engine.runners.jobmaster.fencing import (
        check_fencing,
        discard_held,
    )

    class Node:
        kind = "sink"

        def __init__(self, uid, payload):
            self.uid, self.name, self.payload = uid, uid, payload

    class Vertex:
        def __init__(self, *nodes):
            self.nodes = list(nodes)

    graph = ExecutionGraph.__new__(ExecutionGraph)
    graph.vertices = [Vertex(Node("files", FileSink(str(tmp_path / "out"))),
                             Node("plain", PlainSink()))]
    with pytest.raises(ConfigurationError, match="'plain'"):
        check_fencing(graph, "job")
    assert discard_held(graph, "job-1") == 0  # the plain sink is skipped, not called


def test_sinks_get_a_connector_context():
    assert SourceContext is ConnectorContext
    ctx = ConnectorContext("job-1", "orders", "out", 1, 2, 0)
    assert (ctx.subtask_index, ctx.parallelism, ctx.attempt, ctx.fenced) == (1, 2, 0, False)


@pytest.mark.parametrize("old, name, new", [
    ("postgres", "PostgresSink", "postgres.sink"),
    ("files", "FileSink", "files.sink"),
    ("files", "read_committed", "files.sink"),
    ("file_source", "FileSource", "files.source"),
    ("delta", "DeltaSink", "lakehouse.delta"),
    ("iceberg", "IcebergSink", "lakehouse.iceberg"),
    ("table_source", "DeltaTableSource", "lakehouse.table_source"),
    ("postgres_cdc", "PostgresCdcSource", "postgres.cdc.source"),
    ("lakehouse", "StagedTableSink", "lakehouse.staged"),
])
def test_an_old_module_path_still_imports_with_a_deprecation_warning(old, name, new):
    import importlib
    import sys

    base = "airflow_checkpoint_provider.engine.connectors"
    shim = importlib.import_module(f"{base}.{old}")
    shim.__dict__.pop(name, None)  # forget an earlier test's cached read
    with pytest.warns(DeprecationWarning, match=f"import {name} from {base}.{new}"):
        value = getattr(shim, name)
    assert value is getattr(importlib.import_module(f"{base}.{new}"), name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(sys.modules[f"{base}.{old}"], name) is value  # once per name


def test_an_object_pickled_under_an_old_module_path_still_loads():
    old = b"cairflow_checkpoint_provider.engine.connectors.postgres\nPostgresSink\n."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert pickle.loads(old) is PostgresSink
    new = pickle.dumps(PostgresSink)
    assert b"connectors.postgres.sink" in new


def test_the_old_private_dsn_helper_has_a_public_home():
    import sys

    from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

    sys.modules["airflow_checkpoint_provider.engine.connectors.postgres"].__dict__.pop("_dsn", None)
    with pytest.warns(DeprecationWarning, match="libpq_dsn"):
        from airflow_checkpoint_provider.engine.connectors.postgres import _dsn
    assert _dsn is libpq_dsn
    assert libpq_dsn("postgresql+psycopg://u@h/db") == "postgresql://u@h/db"
