"""VerifyRestoreOperator against a running job's latest checkpoint: the compatible v2
passes, the incompatible v2 fails the task naming the operator and the state, before
anything is stopped."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from provider_helpers import EXAMPLE, completed_checkpoints, start_job, wait_for

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator


@pytest.mark.timeout(180)
def test_verify_restore_passes_v2_and_names_what_breaks_v2_incompatible(metadata_url, tmp_path,
                                                                         monkeypatch):
    # checkpoints outlive a check (at 500 ms three newer ones subsume it meanwhile)
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "4000")
    job_id = start_job(metadata_url, tmp_path)
    store = MetadataStore(metadata_url)
    wait_for(lambda: completed_checkpoints(store, job_id), 60, "a completed checkpoint")
    ok = VerifyRestoreOperator(task_id="verify", pipeline=f"{EXAMPLE}:build_v2",
                               job_name="versioned-sum", parallelism=2).execute({})
    assert ok["ok"] and ok["parallelism"]["running-sum"] == 2
    with pytest.raises(AirflowException, match="operator 'running-sum', state 'sum'") as err:
        VerifyRestoreOperator(task_id="verify", pipeline=f"{EXAMPLE}:build_v2_incompatible",
                              job_name="versioned-sum").execute({})
    print(err.value)
    assert store.get_job(job_id).status == "RUNNING", "nothing was stopped"
    store.close()


def test_needs_a_snapshot_or_a_job():
    with pytest.raises(ValueError, match="give snapshot="):
        VerifyRestoreOperator(task_id="v", pipeline=f"{EXAMPLE}:build_v2")
