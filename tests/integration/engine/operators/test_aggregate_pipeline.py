"""The vectorized path end to end: Arrow batches from the source, hash-partitioned in numpy,
folded by the built-in aggregate operator; exactly-once under failures and across a rescale."""

import pytest
from pipelines import (
    FaultPlan,
    aggregate_pipeline,
    check_aggregate_exactly_once,
    expected_aggregates,
)
from scenarios import savepoint_then_restore_rescaled

from airflow_checkpoint_provider.engine import Pipeline, PipelineDefinitionError
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

N, KEYS, SEED = 20_000, 50, 7


@pytest.fixture(scope="module")
def expected():
    return expected_aggregates(N, KEYS, SEED)


@pytest.mark.timeout(180)
def test_failure_free_aggregate_commits_exact_totals(workdir, expected):
    p = aggregate_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED)
    result = p.run()
    assert result.status == "FINISHED" and result.restarts == 0
    check_aggregate_exactly_once(str(workdir / "out"), expected)
    snap = load_snapshot(result.latest_checkpoint)
    handles = [s["keyed"] for s in snap.operators["agg"]["subtasks"] if s.get("keyed")]
    assert handles and all(h["type"] == "arrow" for h in handles)


@pytest.mark.timeout(240)
def test_failures_mid_stream_still_commit_exact_totals(workdir, expected):
    points = [("record", 700), ("record", 6000), ("record", 12_500), ("record", 19_000)]
    faults = FaultPlan(str(workdir / "faults"), points)
    p = aggregate_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, faults=faults,
                           rate=5000, interval_ms=150)
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(points) and result.restarts == len(points)
    assert result.checkpoints_completed >= 3
    check_aggregate_exactly_once(str(workdir / "out"), expected)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_savepoint_at_two_restores_at_three_with_exact_totals(workdir, tmp_path, expected):
    def make(root, **options):
        return aggregate_pipeline(root, num_records=N, num_keys=KEYS, seed=SEED, **options)

    out = savepoint_then_restore_rescaled(make, workdir, tmp_path, rate=4000, rescale={
        "source_parallelism": 3, "keyed_parallelism": 3})
    check_aggregate_exactly_once(out, expected)


def test_aggregate_needs_a_key_field_and_valid_aggregations():
    p = Pipeline("bad")
    from airflow_checkpoint_provider.engine import GeneratorSource

    stream = p.source(GeneratorSource(10), uid="gen")
    with pytest.raises(PipelineDefinitionError, match="'totals': needs key_by"):
        stream.key_by(lambda r: r["key"]).aggregate(uid="totals", n="count")
    with pytest.raises(PipelineDefinitionError, match="n=\\('median', 'value'\\)"):
        stream.key_by("key").aggregate(uid="totals", n=("median", "value"))
    with pytest.raises(PipelineDefinitionError, match="at least one aggregation"):
        stream.key_by("key").aggregate(uid="totals")
