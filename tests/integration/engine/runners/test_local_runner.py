"""The local runner end to end: restarts, retention, bad input, at-least-once."""

import os
import shutil

import pytest
from pipelines import (
    check_exactly_once,
    expected_running_sums,
    failing_pipeline,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    CorruptCheckpointError,
    JobFailedError,
    RestartStrategy,
    RestoreError,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore


@pytest.mark.timeout(120)
def test_restart_strategy_gives_up_after_its_attempts_and_records_each_restart(workdir):
    p = failing_pipeline(str(workdir), RestartStrategy.fixed_delay(attempts=2, delay_ms=10))
    with pytest.raises(JobFailedError, match="bad record") as info:
        p.run()
    result = info.value.result
    assert result.status == "FAILED" and result.restarts == 2
    store = MetadataStore(p.metadata_url)
    job = store.get_job(result.job_id)
    assert job.status == "FAILED" and "bad record" in job.failure_reason
    attempts = store.list_attempts(result.job_id)
    assert [a.attempt for a in attempts] == [0, 1, 2]
    assert all("bad record" in a.failure_reason for a in attempts)


def test_exponential_backoff_delays_grow_to_the_cap():
    s = RestartStrategy.exponential_backoff(attempts=5, initial_delay_ms=100, max_delay_ms=500)
    assert [s.delay_for(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert s.can_restart(4) and not s.can_restart(5)
    assert not RestartStrategy.none().can_restart(0)


@pytest.mark.timeout(120)
def test_retention_keeps_three_checkpoints_and_deletes_the_rest(workdir):
    p = running_sum_pipeline(str(workdir), num_records=20_000, rate=8000, interval_ms=100)
    result = p.run()
    assert result.checkpoints_completed > 5
    job_dir = os.path.dirname(result.latest_checkpoint)
    assert len(os.listdir(job_dir)) == 3
    store = MetadataStore(p.metadata_url)
    rows = store.list_checkpoints(result.job_id)
    completed = [r for r in rows if r.status == "COMPLETED"]
    assert len(completed) == 3
    assert sorted(os.listdir(job_dir)) == sorted(f"chk-{r.checkpoint_id}" for r in completed)
    assert all(r.status in ("SUBSUMED", "COMPLETED", "FAILED") for r in rows)
    assert completed[-1].task_stats and completed[-1].state_size > 0


@pytest.mark.timeout(120)
def test_restore_latest_continues_from_the_previous_jobs_checkpoint(workdir):
    # A bounded job's final checkpoint holds its end state; a new job restoring it has
    # nothing left to read and must not emit anything twice.
    first = running_sum_pipeline(str(workdir), num_records=5000)
    r1 = first.run()
    second = running_sum_pipeline(str(workdir), num_records=5000)
    r2 = second.run(restore="latest")
    assert r2.restored_from == r1.latest_checkpoint
    check_exactly_once(str(workdir / "out"), expected_running_sums(5000, 50, 7))
    assert os.path.exists(r1.latest_checkpoint), "NO_CLAIM: the restored checkpoint is kept"


def test_unknown_restore_path_is_a_one_line_error(workdir):
    p = running_sum_pipeline(str(workdir))
    with pytest.raises(RestoreError, match=r"restore path .*/nope does not exist"):
        p.run(restore=str(workdir / "nope"))


@pytest.mark.timeout(120)
def test_corrupt_metadata_and_state_files_are_rejected_naming_the_file(workdir):
    p = running_sum_pipeline(str(workdir), num_records=3000)
    result = p.run()
    chk = result.latest_checkpoint
    bad_meta = str(workdir / "bad-meta")
    shutil.copytree(chk, bad_meta)
    with open(os.path.join(bad_meta, "_metadata"), "r+b") as f:
        data = bytearray(f.read())
        data[data.index(b'"checkpoint_id": ') + len(b'"checkpoint_id": ')] ^= 0x01
        f.seek(0)
        f.write(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="_metadata fails its checksum"):
        running_sum_pipeline(str(workdir), num_records=3000).run(restore=bad_meta)

    bad_state = str(workdir / "bad-state")
    shutil.copytree(chk, bad_state)
    state_file = next(n for n in sorted(os.listdir(bad_state)) if n.endswith(".state"))
    with open(os.path.join(bad_state, state_file), "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        f.seek(0)
        f.write(bytes(data))
    # state files are verified before the job is created: an explicit restore fails loudly
    with pytest.raises(CorruptCheckpointError, match=f"state file .*{state_file} does not match its checksum"):
        running_sum_pipeline(str(workdir), num_records=3000).run(restore=bad_state)


@pytest.mark.timeout(120)
def test_at_least_once_mode_loses_nothing(workdir):
    p = running_sum_pipeline(str(workdir), num_records=10_000, mode="at_least_once")
    result = p.run()
    assert result.status == "FINISHED"
    check_exactly_once(str(workdir / "out"), expected_running_sums(10_000, 50, 7))
