"""aggregate(count_distinct) end to end: exact against an independent reference, exactly
once under exceptions and SIGKILL (compared with a failure-free run), a savepoint taken at
parallelism 2 restored at 3, on the heap and RocksDB backends."""

from __future__ import annotations

import pytest
from perf_pipelines import distinct_pipeline, expected_distinct, final_distinct
from scenarios import run_with_faults_and_failure_free, savepoint_then_restore_rescaled

from airflow_checkpoint_provider.engine import GeneratorSource, Pipeline, PipelineDefinitionError
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

N, KEYS, SEED = 20_000, 30, 7


@pytest.fixture(scope="module")
def expected():
    return expected_distinct(N, KEYS, SEED)


@pytest.fixture(scope="module")
def failure_free(tmp_path_factory):
    """``failure_free(backend)``: the result and output directory of the failure-free job
    on ``backend``, run once per module and backend: the failure-free test checks it, the
    faulty test compares its own output with it (the same pipeline, no faults, any rate)."""
    runs: dict[str, tuple] = {}

    def get(backend: str) -> tuple:
        if backend not in runs:
            root = tmp_path_factory.mktemp(f"distinct-free-{backend}")
            with pytest.MonkeyPatch.context() as env:  # as the workdir fixture does
                env.delenv("CKPT_METADATA_URL", raising=False)
                result = _distinct(backend)(str(root)).run()
            runs[backend] = (result, str(root / "out"))
        return runs[backend]

    return get


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_failure_free_run_gives_the_exact_distinct_counts(failure_free, expected, backend):
    result, out = failure_free(backend)
    assert result.status == "FINISHED" and result.restarts == 0
    assert final_distinct(out) == expected
    snap = load_snapshot(result.latest_checkpoint)
    handles = [s["keyed"] for s in snap.operators["distinct"]["subtasks"] if s.get("keyed")]
    assert handles and all(h["type"] == "arrow" for h in handles)


def _distinct(backend):
    def make(root, **options):
        return distinct_pipeline(root, num_records=N, num_keys=KEYS, seed=SEED,
                                 state_backend=backend, **options)
    return make


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_exceptions_and_sigkill_still_give_the_failure_free_results(workdir, expected, backend,
                                                                   failure_free):
    result, free_out = failure_free(backend)
    assert result.status == "FINISHED" and result.restarts == 0
    free, faulty = run_with_faults_and_failure_free(_distinct(backend), workdir,
                                                    free_out=free_out)
    assert final_distinct(faulty) == final_distinct(free) == expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_savepoint_at_two_restores_at_three_with_exact_counts(workdir, tmp_path, expected,
                                                              backend):
    out = savepoint_then_restore_rescaled(_distinct(backend), workdir, tmp_path, rate=2000)
    assert final_distinct(out) == expected


def test_count_distinct_is_refused_where_it_is_not_supported():
    from airflow_checkpoint_provider.engine import TumblingWindows, WatermarkStrategy

    p = Pipeline("bad")
    stream = p.source(GeneratorSource(10), uid="gen")
    with pytest.raises(PipelineDefinitionError, match="ttl"):
        stream.key_by("key").aggregate(uid="a", ttl=1000, n=("count_distinct", "value"))
    timed = p.source(GeneratorSource(10, event_time_step_ms=1), uid="gen2",
                     watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                         0, timestamp_field="ts"))
    with pytest.raises(PipelineDefinitionError, match="KeyedStream.aggregate"):
        timed.key_by("key").window(TumblingWindows(10)).aggregate(
            uid="w", n=("count_distinct", "value"))
