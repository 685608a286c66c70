"""A restore keeps the key type: a job restored from state keyed by int that keys its
records by bool (or float) fails at once naming the operator and both types, on both state
backends, instead of running on with the restored state orphaned (heap: ``1`` and ``True``
would even share it)."""

from __future__ import annotations

import os

import pytest
from test_key_contract import Count, KeyedRecords

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    JobFailedError,
    Pipeline,
    RestartStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore


def _pipeline(root, records, backend: str, source: str = "src") -> Pipeline:
    """``source`` -> key_by -> Count 'count' -> file sink ``root/out``."""
    p = Pipeline(f"restore-keys-{backend}", state_backend=backend,
                 checkpoint=CheckpointConfig(interval_ms=100, directory=os.path.join(root, "ck")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url=f"sqlite:///{root}/meta.db")
    (p.source(KeyedRecords(records), uid=source).key_by("key")
      .process(Count(), uid="count", parallelism=2)
      .sink(FileSink(os.path.join(root, "out")), uid="out"))
    return p


def _int_keyed_checkpoint(root, backend: str) -> str:
    """The final checkpoint of a job keyed by int (keys 0..6, 200 records)."""
    p = _pipeline(root, [(k % 7, 1) for k in range(200)], backend)
    assert p.run().status == "FINISHED"
    rec = MetadataStore(p.metadata_url).latest_completed_checkpoint(job_name=p.name)
    assert rec is not None
    return rec.location


def _restored_run(root, records, backend: str, location: str):
    """A job with new input (a new source uid) restoring the keyed state and the sink."""
    p = _pipeline(root, records, backend, source="new-input")
    return p.run(restore=location, allow_non_restored_state=True)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("new_key", [True, 1.0], ids=["bool", "float"])
def test_restore_that_changes_the_key_type_fails_at_once(tmp_path, backend, new_key):
    location = _int_keyed_checkpoint(tmp_path, backend)
    before = len(list(read_committed(str(tmp_path / "out"))))
    with pytest.raises(JobFailedError) as failed:
        _restored_run(tmp_path, [(new_key, 1)] * 50, backend, location)
    result = failed.value.result
    reason = result.failure_reason
    assert result.restarts == 0, reason
    assert "operator 'count'" in reason and f"is of type {type(new_key).__name__}" in reason
    assert "has keys of type int" in reason and "a restore must keep the key type" in reason
    assert len(list(read_committed(str(tmp_path / "out")))) == before  # nothing committed


@pytest.mark.timeout(180)
def test_restore_with_the_same_key_type_continues_the_state(tmp_path):
    location = _int_keyed_checkpoint(tmp_path, "heap")
    assert _restored_run(tmp_path, [(3, 1)], "heap", location).status == "FINISHED"
    # key 3 was seen 29 times (200 records, k % 7 == 3) before the restore
    assert max(r["n"] for r in read_committed(str(tmp_path / "out")) if r["key"] == "3") == 30
