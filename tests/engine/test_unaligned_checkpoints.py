"""Unaligned checkpoints: exactly-once with in-flight records as channel state, under
backpressure from a deliberately slow sink behind a keyed exchange."""

import pytest
from click.testing import CliRunner
from pipelines import (
    Background,
    FaultPlan,
    SlowFileSink,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import CheckpointConfig, ConfigurationError, RestoreError
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

N = 6000
pytestmark = pytest.mark.slow


def _unaligned_stats(root) -> list[dict]:
    store = MetadataStore("sqlite:///" + str(root / "meta.db"))
    try:
        rows = [c for j in store.list_jobs() for c in store.list_checkpoints(j.job_id)
                if c.status in ("COMPLETED", "SUBSUMED")]
        return [t for c in rows for t in (c.task_stats or []) if t.get("unaligned")]
    finally:
        store.close()


@pytest.mark.timeout(300)
def test_unaligned_checkpoints_are_exactly_once_under_failures_and_backpressure(tmp_path):
    # the sink takes 0.3 ms a record, the sources offer more: the keyed inputs are full
    faults = FaultPlan(str(tmp_path / "faults"), [("record", 1500), ("kill", 3300),
                                                  ("record", 4700)])
    p = running_sum_pipeline(str(tmp_path), num_records=N, faults=faults,
                             sink=SlowFileSink(str(tmp_path / "out"), 0.0003),
                             interval_ms=150, unaligned=True, keyed_parallelism=2)
    result = p.run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 3 and result.restarts == len(faults.attempts_hit())
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    stats = _unaligned_stats(tmp_path)
    assert stats, "checkpoints were unaligned"
    assert sum(t["inflight_records"] for t in stats) > 0, "in-flight records were persisted"


@pytest.mark.timeout(300)
def test_aligned_timeout_turns_a_slow_checkpoint_unaligned(tmp_path):
    p = running_sum_pipeline(str(tmp_path), num_records=N, delay_s=0.0003, interval_ms=150,
                             unaligned=True, aligned_timeout_ms=20, keyed_parallelism=2)
    assert p.run().status == "FINISHED"
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    assert _unaligned_stats(tmp_path), "an aligned checkpoint turned unaligned"
    out = CliRunner().invoke(ckpt, ["checkpoints", "running-sum", "--tasks",
                                    "--db", "sqlite:///" + str(tmp_path / "meta.db")])
    assert out.exit_code == 0, out.output
    assert "unaligned" in out.output and "in flight" in out.output and "alignment" in out.output


@pytest.mark.timeout(300)
def test_savepoints_stay_aligned_and_unaligned_state_restores_only_at_its_parallelism(tmp_path):
    p = running_sum_pipeline(str(tmp_path / "a"), num_records=10**9, rate=20_000,
                             delay_s=0.0003, interval_ms=100, unaligned=True,
                             keyed_parallelism=2)
    bg = Background(p)
    job = bg.wait_running(min_checkpoints=3)
    refused = bg.request(job.job_id, "SAVEPOINT", {"unaligned": True})
    assert refused.status == "FAILED" and "savepoints are always aligned" in refused.error
    sp = bg.request(job.job_id, "SAVEPOINT", {})
    assert sp.status == "SUCCEEDED", sp.error
    chk = bg.request(job.job_id, "CHECKPOINT")
    assert chk.status == "SUCCEEDED", chk.error
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"
    savepoint = load_snapshot(sp.result["location"])
    assert all(s.channel_state is None for op in savepoint.metadata.operators.values()
               for s in op.subtasks), "a savepoint is aligned: no in-flight records"
    checkpoint = load_snapshot(chk.result["location"])
    held = [s for s in checkpoint.metadata.operators["sum"].subtasks if s.channel_state]
    assert held, "the checkpoint under backpressure holds in-flight records"
    rescaled = running_sum_pipeline(str(tmp_path / "b"), keyed_parallelism=3)
    with pytest.raises(RestoreError, match="'sum'.*unaligned checkpoint.*take a savepoint"):
        rescaled.run(restore=chk.result["location"], trust_snapshot=True)  # another DB


@pytest.mark.parametrize("options, message", [
    ({"unaligned": True, "mode": "at_least_once"}, "unaligned=True needs mode exactly_once"),
    ({"aligned_timeout_ms": 100}, "aligned_timeout_ms needs unaligned=True"),
    ({"unaligned": True, "aligned_timeout_ms": -1}, "aligned_timeout_ms must be >= 0"),
])
def test_invalid_unaligned_options_are_refused(options, message):
    with pytest.raises(ConfigurationError, match=message):
        CheckpointConfig(**options)
