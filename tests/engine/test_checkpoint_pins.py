"""A pinned checkpoint of a running job survives its subsumption (a last-state hand-over
restores it after the job has moved on), with the RocksDB shared files it references; the
files go once the pin is released. Without the pin the same checkpoint is deleted."""

from __future__ import annotations

import os
import time

import pytest

from airflow_checkpoint_provider.engine.client import pin_checkpoint, unpin_savepoint
from tests.pipelines import Background, running_sum_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _completed(bg, job_id):
    return sorted((c for c in bg.store.list_checkpoints(job_id) if c.status == "COMPLETED"),
                  key=lambda c: c.checkpoint_id)


def _wait(predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _pipeline(root: str, name: str, **kwargs):
    p = running_sum_pipeline(root, name=name, rate=2_000, interval_ms=150, retained=1,
                             **kwargs)
    p.state_backend = "rocksdb"  # incremental: checkpoints share SST files
    return p


def test_a_pinned_checkpoint_outlives_its_subsumption_until_unpinned(tmp_path):
    root = str(tmp_path / "blue")
    bg = Background(_pipeline(root, "pinned-blue", num_records=200_000))
    job = bg.wait_running(min_checkpoints=2)
    unpinned = _completed(bg, job.job_id)[-1]
    _wait(lambda: bg.store.get_checkpoint(job.job_id, unpinned.checkpoint_id).status
          == "SUBSUMED", "the unpinned checkpoint was never subsumed")
    _wait(lambda: not os.path.exists(unpinned.location),
          "a subsumed checkpoint without a pin kept its files")

    pinned = _completed(bg, job.job_id)[-1]
    pin = pin_checkpoint(bg.store, job.job_id, pinned.checkpoint_id, holder="handover:test",
                         ttl_seconds=600, reason="last-state hand-over")
    assert pin is not None, "the newest completed checkpoint could not be pinned"
    _wait(lambda: bg.store.get_checkpoint(job.job_id, pinned.checkpoint_id).status
          == "SUBSUMED", "the pinned checkpoint was never subsumed")
    newest = _completed(bg, job.job_id)[-1].checkpoint_id
    _wait(lambda: _completed(bg, job.job_id)[-1].checkpoint_id >= newest + 3,
          "the job completed no more checkpoints")
    assert os.path.exists(os.path.join(pinned.location, "_metadata"))
    # a subsumed checkpoint is refused: its files may be gone already
    assert pin_checkpoint(bg.store, job.job_id, unpinned.checkpoint_id, holder="late",
                          ttl_seconds=60) is None

    # restored while the job goes on: every shared file it references is still there
    # a fenced green (blue-green validation): the same sink and metadata DB, publishes nothing
    other = _pipeline(str(tmp_path / "green"), "pinned-green", num_records=200_000,
                      out=os.path.join(root, "out"))
    other.metadata_url = bg.pipeline.metadata_url
    restored = Background(other, restore=pinned.location, fence_sinks=True)
    green = restored.wait_running(min_checkpoints=1)
    restored.request(green.job_id, "CANCEL")
    assert restored.result().status == "CANCELED"
    assert restored.result().restored_from == pinned.location

    assert unpin_savepoint(bg.store, holder="handover:test") == 1
    _wait(lambda: not os.path.exists(pinned.location),
          "the released checkpoint's files were not deleted")
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"
