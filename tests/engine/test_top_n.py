"""KeyedStream.top_n end to end: the committed upsert stream against an independent
reference, exactly once under exceptions and SIGKILL (compared with a failure-free run),
a savepoint at parallelism 2 restored at 3, heap and RocksDB."""

from __future__ import annotations

import shutil

import pytest
from perf_pipelines import expected_topn, final_topn, topn_pipeline
from pipelines import Background, FaultPlan

from airflow_checkpoint_provider.engine import GeneratorSource, Pipeline, PipelineDefinitionError

N, KEYS, SEED = 20_000, 30, 7


@pytest.fixture(scope="module")
def expected():
    return expected_topn(N, KEYS, SEED)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_exceptions_and_sigkill_still_give_the_failure_free_top_n(workdir, expected, backend):
    free = workdir / "free"
    free.mkdir()
    result = topn_pipeline(str(free), num_records=N, num_keys=KEYS, seed=SEED,
                           state_backend=backend).run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert final_topn(str(free / "out")) == expected
    points = [("record", 900), ("kill", 6_000), ("record", 11_000), ("kill", 17_500)]
    faults = FaultPlan(str(workdir / "faults"), points)
    result = topn_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, rate=3000,
                           faults=faults, state_backend=backend).run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(points) and result.restarts == len(points)
    assert result.checkpoints_completed >= 2  # restores from checkpoints, not only from scratch
    assert final_topn(str(workdir / "out")) == expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_savepoint_at_two_restores_at_three(workdir, tmp_path, expected, backend):
    bg = Background(topn_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED,
                                  rate=2000, state_backend=backend))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    savepoint = req.result["location"]
    root2 = tmp_path / "restored"
    out = root2 / "out"
    shutil.copytree(workdir / "out", out)
    result = topn_pipeline(str(root2), num_records=N, num_keys=KEYS, seed=SEED, out=str(out),
                           parallelism=3, state_backend=backend).run(restore=savepoint,
                                                                     trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == savepoint
    assert final_topn(str(out)) == expected


def test_top_n_needs_a_key_field_and_a_positive_n():
    p = Pipeline("bad")
    stream = p.source(GeneratorSource(10), uid="gen")
    with pytest.raises(PipelineDefinitionError, match="needs key_by"):
        stream.key_by(lambda r: r["key"]).top_n(3, by="value", uid="t")
    with pytest.raises(PipelineDefinitionError, match="n must be an int >= 1"):
        stream.key_by("key").top_n(0, by="value", uid="t")
