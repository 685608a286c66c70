"""KeyedStream.top_n end to end: the committed upsert stream against an independent
reference, exactly once under exceptions and SIGKILL (compared with a failure-free run),
a savepoint at parallelism 2 restored at 3, heap and RocksDB."""

from __future__ import annotations

import pytest
from perf_pipelines import expected_topn, final_topn, topn_pipeline
from scenarios import run_with_faults_and_failure_free, savepoint_then_restore_rescaled

from airflow_checkpoint_provider.engine import GeneratorSource, Pipeline, PipelineDefinitionError

N, KEYS, SEED = 20_000, 30, 7


@pytest.fixture(scope="module")
def expected():
    return expected_topn(N, KEYS, SEED)


def _topn(backend):
    def make(root, **options):
        return topn_pipeline(root, num_records=N, num_keys=KEYS, seed=SEED,
                             state_backend=backend, **options)
    return make


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_exceptions_and_sigkill_still_give_the_failure_free_top_n(workdir, expected, backend):
    free, faulty = run_with_faults_and_failure_free(_topn(backend), workdir)
    assert final_topn(free) == final_topn(faulty) == expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_savepoint_at_two_restores_at_three(workdir, tmp_path, expected, backend):
    out = savepoint_then_restore_rescaled(_topn(backend), workdir, tmp_path, rate=2000)
    assert final_topn(out) == expected


def test_top_n_needs_a_key_field_and_a_positive_n():
    p = Pipeline("bad")
    stream = p.source(GeneratorSource(10), uid="gen")
    with pytest.raises(PipelineDefinitionError, match="needs key_by"):
        stream.key_by(lambda r: r["key"]).top_n(3, by="value", uid="t")
    with pytest.raises(PipelineDefinitionError, match="n must be an int >= 1"):
        stream.key_by("key").top_n(0, by="value", uid="t")
