"""Snapshots shared by the state-as-tables tests (each made once per module)."""

import pytest
from pipelines import Background, versioned_pipeline
from state_snapshots import SAVEPOINT_N, finished


@pytest.fixture(scope="module")
def heap_checkpoint(tmp_path_factory) -> str:
    return finished(tmp_path_factory.mktemp("heap"))


@pytest.fixture(scope="module")
def stopped_savepoint(tmp_path_factory):
    """versioned v1 (sum -> audit, parallelism 2) stopped with a savepoint mid-stream:
    ``(root, savepoint)``; ``root/out`` holds the output committed before it."""
    root = tmp_path_factory.mktemp("stopped")
    bg = Background(versioned_pipeline(str(root), "v1", num_records=SAVEPOINT_N, rate=2000))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    return root, req.result["location"]
