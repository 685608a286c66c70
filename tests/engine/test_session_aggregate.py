"""window(SessionWindows).aggregate(), vectorized, end to end: the sessions of the
out-of-order generator input against the independent reference of event_time_pipelines,
exactly once under exceptions and SIGKILL (compared with a failure-free run), a savepoint
at parallelism 2 restored at 3, heap and RocksDB."""

from __future__ import annotations

import shutil

import pytest
from event_time_pipelines import committed_sessions, expected_sessions
from perf_pipelines import session_aggregate_pipeline
from pipelines import Background, FaultPlan


@pytest.fixture(scope="module")
def expected():
    return expected_sessions()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_exceptions_and_sigkill_still_give_the_failure_free_sessions(workdir, expected,
                                                                     backend):
    free = workdir / "free"
    free.mkdir()
    result = session_aggregate_pipeline(str(free), state_backend=backend).run()
    assert result.status == "FINISHED" and result.restarts == 0
    assert committed_sessions(str(free / "out")) == expected
    points = [("record", 900), ("kill", 6_000), ("record", 11_000), ("kill", 17_500)]
    faults = FaultPlan(str(workdir / "faults"), points)
    result = session_aggregate_pipeline(str(workdir), rate=3000, faults=faults,
                                        state_backend=backend).run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(points) and result.restarts == len(points)
    assert result.checkpoints_completed >= 2  # restores from checkpoints, not only from scratch
    assert committed_sessions(str(workdir / "out")) == expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_savepoint_at_two_restores_at_three(workdir, tmp_path, expected, backend):
    bg = Background(session_aggregate_pipeline(str(workdir), rate=2000, state_backend=backend))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    savepoint = req.result["location"]
    root2 = tmp_path / "restored"
    out = root2 / "out"
    shutil.copytree(workdir / "out", out)
    result = session_aggregate_pipeline(str(root2), out=str(out), parallelism=3,
                                        state_backend=backend).run(restore=savepoint,
                                                                   trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == savepoint
    assert committed_sessions(str(out)) == expected
