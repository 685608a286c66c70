"""Snapshots for the state-as-tables tests (tests/integration/engine/state_io/)."""

import shutil

from pipelines import aggregate_pipeline, running_sum_pipeline

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


def copy_output(root, tmp_path):
    """The stopped job's sink directory (committed files and pre-committed transactions),
    copied for one restore."""
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    return out
