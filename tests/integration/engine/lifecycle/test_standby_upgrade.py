"""Standby start for upgrades (``restore="standby:JOB"``, issue 41).

v2 starts while v1 runs, waits without a job row, and restores what v1 leaves: its stop
savepoint (savepoint upgrade) or its latest checkpoint (cancelled: last-state). Both under
load, compared with the failure-free output; and the refusals of a standby with nothing to
wait for. Local runner, bounded input: ~20-40 s per upgrade test.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from pipelines import (
    Background,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import ConfigurationError, read_committed
from airflow_checkpoint_provider.engine.client import StandbyCanceled

N, KEYS, SEED, RATE = 12_000, 50, 7, 1000


def _wait_standby(store, job_id: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while (rec := store.get_standby(job_id)) is None:
        assert time.monotonic() < deadline, f"standby {job_id} never said READY"
        time.sleep(0.05)
    return rec


def _upgrade(root: str, *, stop: str) -> tuple:
    out = os.path.join(root, "out")
    v1_bg = Background(running_sum_pipeline(root, name="rs", num_records=N, num_keys=KEYS,
                                            seed=SEED, rate=RATE, out=out))
    v1 = v1_bg.wait_running(min_checkpoints=2)
    v2_p = running_sum_pipeline(root, name="rs", num_records=N, num_keys=KEYS, seed=SEED,
                                out=out)
    v2_p.version = "v2"
    v2_id = uuid.uuid4().hex
    v2_bg = Background(v2_p, restore=f"standby:{v1.job_id}", job_id=v2_id)
    ready = _wait_standby(v1_bg.store, v2_id)  # the signal the Airflow upgrade waits for
    assert (ready.status, ready.waits_for_job_id, ready.job_name) == ("READY", v1.job_id, "rs")
    time.sleep(0.5)  # the standby waits: no job row of its own while v1 runs
    assert [j.job_id for j in v1_bg.store.list_jobs(job_name="rs")] == [v1.job_id]
    assert "error" not in v2_bg.outcome and v2_bg.thread.is_alive()
    req = v1_bg.request(v1.job_id, stop, {})
    assert req.status == "SUCCEEDED", req.error
    v1_result = v1_bg.result()
    result = v2_bg.result(timeout=180)
    assert result.status == "FINISHED", result.failure_reason
    assert result.job_id == v2_id != v1.job_id
    taken = v1_bg.store.get_standby(v2_id)
    assert taken.status == "TAKEN_OVER" and taken.restore_location == result.restored_from
    check_exactly_once_rows(list(read_committed(out)), expected_running_sums(N, KEYS, SEED))
    return v1_bg.store, v1, v1_result, req, result


@pytest.mark.timeout(300)
def test_standby_restores_the_stop_savepoint_exactly_once(tmp_path):
    _, _, v1_result, req, result = _upgrade(str(tmp_path), stop="STOP_WITH_SAVEPOINT")
    assert v1_result.status == "STOPPED"
    assert result.restored_from == req.result["location"]


@pytest.mark.timeout(300)
def test_standby_after_a_cancel_restores_the_latest_checkpoint_exactly_once(tmp_path):
    store, v1, v1_result, _, result = _upgrade(str(tmp_path), stop="CANCEL")
    assert v1_result.status == "CANCELED"
    latest = store.latest_completed_checkpoint(job_id=v1.job_id, kind=None)
    assert result.restored_from == latest.location


@pytest.mark.timeout(120)
def test_standby_with_nothing_to_wait_for_is_refused(tmp_path):
    root = str(tmp_path)
    done = running_sum_pipeline(root, name="rs", num_records=200).run()
    with pytest.raises(ConfigurationError, match="is already FINISHED; a standby waits"):
        running_sum_pipeline(root, name="rs", num_records=200).run(
            restore=f"standby:{done.job_id}")
    with pytest.raises(ConfigurationError, match="no job matches 'nope'"):
        running_sum_pipeline(root, name="rs", num_records=200).run(restore="standby:nope")
    with pytest.raises(ConfigurationError, match="needs a job"):
        running_sum_pipeline(root, name="rs", num_records=200).run(restore="standby:")


@pytest.mark.timeout(120)
def test_a_withdrawn_standby_ends_canceled_without_a_job_row_and_v1_keeps_running(tmp_path):
    root = str(tmp_path)
    v1_bg = Background(running_sum_pipeline(root, name="rs", num_records=N, num_keys=KEYS,
                                            seed=SEED, rate=RATE))
    v1 = v1_bg.wait_running(min_checkpoints=1)
    v2_id = uuid.uuid4().hex
    v2_bg = Background(running_sum_pipeline(root, name="rs", num_records=N),
                       restore=f"standby:{v1.job_id}", job_id=v2_id)
    assert _wait_standby(v1_bg.store, v2_id).status == "READY"
    assert v1_bg.store.request_standby_cancel(v2_id).cancel_requested_at is not None
    v2_bg.thread.join(timeout=30)
    assert isinstance(v2_bg.outcome.get("error"), StandbyCanceled), v2_bg.outcome
    rec = v1_bg.store.get_standby(v2_id)
    assert rec.status == "CANCELED" and "nothing restored" in rec.detail
    assert v1_bg.store.get_job(v2_id) is None
    assert v1_bg.store.get_job(v1.job_id).status == "RUNNING"
    assert v1_bg.request(v1.job_id, "CANCEL").status == "SUCCEEDED"
    v1_bg.result()


@pytest.mark.timeout(120)
def test_a_standby_withdrawn_before_it_was_up_ends_as_soon_as_it_is(tmp_path):
    root = str(tmp_path)
    v1_bg = Background(running_sum_pipeline(root, name="rs", num_records=N, num_keys=KEYS,
                                            seed=SEED, rate=RATE))
    v1 = v1_bg.wait_running(min_checkpoints=1)
    v2_id = uuid.uuid4().hex
    early = v1_bg.store.request_standby_cancel(v2_id, before_ready=True)  # e.g. a timed-out start
    assert early.status == "CANCELED" and v1_bg.store.request_standby_cancel(uuid.uuid4().hex) is None
    v2_bg = Background(running_sum_pipeline(root, name="rs", num_records=N),
                       restore=f"standby:{v1.job_id}", job_id=v2_id)
    v2_bg.thread.join(timeout=30)
    assert isinstance(v2_bg.outcome.get("error"), StandbyCanceled), v2_bg.outcome
    assert v1_bg.store.get_standby(v2_id).status == "CANCELED"
    assert v1_bg.store.get_job(v2_id) is None
    assert v1_bg.store.get_job(v1.job_id).status == "RUNNING"
    assert v1_bg.request(v1.job_id, "CANCEL").status == "SUCCEEDED"
    v1_bg.result()
