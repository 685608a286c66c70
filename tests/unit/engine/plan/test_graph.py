import pytest

from airflow_checkpoint_provider.engine import (
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    Pipeline,
    PipelineDefinitionError,
)


class Noop(KeyedProcessFunction):
    def process_element(self, record, ctx):
        return record


def test_forward_edges_are_chained_and_hash_edges_are_not(tmp_path):
    p = Pipeline("g")
    (p.source(GeneratorSource(10), uid="src", parallelism=2)
      .map(lambda r: r).filter(lambda r: True)
      .key_by("key").process(Noop(), uid="proc", parallelism=3)
      .map(lambda r: r).sink(FileSink(str(tmp_path)), uid="sink"))
    g = p.execution_graph()
    assert [len(v.nodes) for v in g.vertices] == [3, 3]
    assert [v.parallelism for v in g.vertices] == [2, 3]
    assert g.vertices[1].inputs[0].partitioning == "hash"
    assert g.num_slots == 3
    assert g.vertices[1].num_input_channels() == 2


def test_forward_between_different_parallelism_becomes_rebalance(tmp_path):
    p = Pipeline("g")
    p.source(GeneratorSource(10), uid="src", parallelism=1).map(lambda r: r, parallelism=2).sink(
        FileSink(str(tmp_path)), uid="sink")
    g = p.execution_graph()
    assert g.vertices[1].inputs[0].partitioning == "rebalance"


def test_stateful_operator_without_uid_is_rejected_naming_it(tmp_path):
    p = Pipeline("g")
    p.source(GeneratorSource(10), uid="src").key_by("key").process(Noop(), uid=None).sink(
        FileSink(str(tmp_path)), uid="sink")
    with pytest.raises(PipelineDefinitionError, match="Process: Noop.*needs a stable uid"):
        p.execution_graph()


def test_duplicate_uid_is_rejected_naming_it(tmp_path):
    p = Pipeline("g")
    p.source(GeneratorSource(10), uid="dup").key_by("key").process(Noop(), uid="dup").sink(
        FileSink(str(tmp_path)), uid="sink")
    with pytest.raises(PipelineDefinitionError, match="duplicate operator uid 'dup'"):
        p.execution_graph()
