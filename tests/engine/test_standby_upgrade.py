"""Standby start for upgrades (``restore="standby:JOB"``, issue 41).

v2 starts while v1 runs, waits without a job row, and restores what v1 leaves: its stop
savepoint (savepoint upgrade) or its latest checkpoint (cancelled: last-state). Both under
load, compared with the failure-free output; and the refusals of a standby with nothing to
wait for. Local runner, bounded input: ~20-40 s per upgrade test.
"""

from __future__ import annotations

import os
import time

import pytest
from pipelines import (
    Background,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import ConfigurationError, read_committed

N, KEYS, SEED, RATE = 12_000, 50, 7, 1000


def _upgrade(root: str, *, stop: str) -> tuple:
    out = os.path.join(root, "out")
    v1_bg = Background(running_sum_pipeline(root, name="rs", num_records=N, num_keys=KEYS,
                                            seed=SEED, rate=RATE, out=out))
    v1 = v1_bg.wait_running(min_checkpoints=2)
    v2_p = running_sum_pipeline(root, name="rs", num_records=N, num_keys=KEYS, seed=SEED,
                                out=out)
    v2_p.version = "v2"
    v2_bg = Background(v2_p, restore=f"standby:{v1.job_id}")
    time.sleep(1.0)  # the standby waits: no job row of its own while v1 runs
    assert [j.job_id for j in v1_bg.store.list_jobs(job_name="rs")] == [v1.job_id]
    assert "error" not in v2_bg.outcome and v2_bg.thread.is_alive()
    req = v1_bg.request(v1.job_id, stop, {})
    assert req.status == "SUCCEEDED", req.error
    v1_result = v1_bg.result()
    result = v2_bg.result(timeout=180)
    assert result.status == "FINISHED", result.failure_reason
    assert result.job_id != v1.job_id
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
