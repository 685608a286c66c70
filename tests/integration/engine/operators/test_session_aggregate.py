"""window(SessionWindows).aggregate(), vectorized, end to end: the sessions of the
out-of-order generator input against the independent reference of event_time_pipelines,
exactly once under exceptions and SIGKILL (compared with a failure-free run), a savepoint
at parallelism 2 restored at 3, heap and RocksDB."""

from __future__ import annotations

import pytest
from event_time_pipelines import committed_sessions, expected_sessions
from perf_pipelines import session_aggregate_pipeline
from scenarios import run_with_faults_and_failure_free, savepoint_then_restore_rescaled


@pytest.fixture(scope="module")
def expected():
    return expected_sessions()


def _sessions(backend):
    def make(root, **options):
        return session_aggregate_pipeline(root, state_backend=backend, **options)
    return make


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_exceptions_and_sigkill_still_give_the_failure_free_sessions(workdir, expected,
                                                                     backend):
    free, faulty = run_with_faults_and_failure_free(_sessions(backend), workdir)
    assert committed_sessions(free) == committed_sessions(faulty) == expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_savepoint_at_two_restores_at_three(workdir, tmp_path, expected, backend):
    out = savepoint_then_restore_rescaled(_sessions(backend), workdir, tmp_path, rate=2000)
    assert committed_sessions(out) == expected
