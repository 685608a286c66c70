"""Snapshots shared by the state-as-tables tests (each made once per module)."""

import shutil

import pytest
from pipelines import Background, aggregate_pipeline, running_sum_pipeline, versioned_pipeline

from airflow_checkpoint_provider.engine.catalog import MetadataStore

N, KEYS, SEED = 2000, 20, 7
SAVEPOINT_N = 4000


def latest_checkpoint(pipeline) -> str:
    """The newest completed checkpoint of a finished pipeline: its final checkpoint, taken
    after end of input, holds the state of every record."""
    rec = MetadataStore(pipeline.metadata_url).latest_completed_checkpoint(job_name=pipeline.name)
    assert rec is not None
    return rec.location


def finished(root, backend: str = "heap", *, aggregate: bool = False) -> str:
    if aggregate:
        p = aggregate_pipeline(str(root), num_records=N, num_keys=KEYS, seed=SEED)
    else:
        p = running_sum_pipeline(str(root), num_records=N, num_keys=KEYS, seed=SEED)
        p.state_backend = backend
    assert p.run().status == "FINISHED"
    return latest_checkpoint(p)


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


def copy_output(root, tmp_path):
    """The stopped job's sink directory (committed files and pre-committed transactions),
    copied for one restore."""
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    return out
