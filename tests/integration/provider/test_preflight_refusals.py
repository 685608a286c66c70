"""Issue 36, item 5: refusals come before a job start and name their cause.

* the pre-flight check of a blue-green (``fence_sinks``) refuses a sink that fenced mode
  refuses (a PostgreSQL upsert sink), instead of the ~70 s Spark app start of green;
* a hand-over snapshot that its running job subsumed (retired, files deleted) is named as
  such, with what to do, instead of ``operator None: RestoreError: restore path ... does
  not exist``.

No job runs (a few seconds; the pipelines are only built).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from airflow.sdk.exceptions import AirflowException
from provider_helpers import EXAMPLE

from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator


def test_preflight_refuses_a_sink_fenced_mode_refuses(metadata_url, tmp_path):
    op = VerifyRestoreOperator(task_id="preflight", pipeline="rollback_pipelines:postgres_upsert",
                               snapshot=str(tmp_path / "sp"), fence_sinks="True")
    with pytest.raises(AirflowException, match=r"operator 'totals-upsert'.*fence_sinks.*"
                       r"postgres\(totals, upsert\)"):
        op.execute({})


def test_preflight_without_fencing_does_not_check_it(metadata_url, tmp_path):
    op = VerifyRestoreOperator(task_id="preflight", pipeline="rollback_pipelines:postgres_upsert",
                               snapshot=str(tmp_path / "sp"), fence_sinks="False")
    with pytest.raises(AirflowException) as err:
        op.execute({})
    assert "fence_sinks" not in str(err.value) and "does not exist" in str(err.value)


def test_a_subsumed_handover_checkpoint_is_named_with_what_to_do(metadata_url, store, tmp_path):
    location = str(tmp_path / "checkpoints" / "blue" / "j1" / "chk-3")
    store.create_job(job_id="c" * 32, job_name="blue", parallelism=1)
    store.add_pending_checkpoint("c" * 32, 3, kind="CHECKPOINT", trigger_time=datetime.now(UTC),
                                 location=location)
    store.complete_checkpoint("c" * 32, 3, complete_time=datetime.now(UTC), duration_ms=1,
                              state_size=1, checkpointed_size=1, task_stats=[])
    store.set_checkpoint_status("c" * 32, [3], "SUBSUMED")  # its files are gone
    op = VerifyRestoreOperator(task_id="preflight", pipeline=f"{EXAMPLE}:build_v2",
                               snapshot=location)
    with pytest.raises(AirflowException, match=r"does not exist \(cause: checkpoint 3 of job "
                       r"c{32} was subsumed.*handover='savepoint'"):
        op.execute({})
