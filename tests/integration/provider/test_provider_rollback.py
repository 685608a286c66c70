"""Issue 36, item 1: a rollback never republishes what v2 committed, and a sensor that loses
its deferral race decides on the metadata DB.

dag.test() of ``savepoint_upgrade_restore`` against real jobs (local runner, bounded example
job with a file sink) and a real SQLite metadata DB. Airflow's bookkeeping fault (the
scheduler marks the sensor FAILED while v2 did checkpoint, `task-state-changed-externally`)
is simulated by making the sensor's ``execute`` raise. ~40-60 s each.
"""

from __future__ import annotations

import glob
import json
from collections import Counter

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from provider_helpers import EXAMPLE, run_dag, start_job, wait_for, xcom

from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor

pytestmark = pytest.mark.usefixtures("airflow_db")

RECORDS = 20_000  # v1 at 200 records/s is still running when it is stopped (~100 s of input)


def _conf(tmp_path, **overrides) -> dict:
    conf = {"job_name": "versioned-sum", "v1_pipeline": f"{EXAMPLE}:build_v1",
            "v2_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            # v2 and the restarted v1 read the rest of the bounded input fast; their directory
            # is the worker's $CKPT_EXAMPLE_DIR (tmp_path/example: the metadata_url fixture)
            "job_env": {"CKPT_EXAMPLE_RECORDS": RECORDS, "CKPT_EXAMPLE_RATE": 20000},
            "upgrade_mode": "savepoint", "max_checkpoint_age_s": None,
            "rollback_decision": False}
    conf.update(overrides)
    return conf


def _bounded_v1(metadata_url, tmp_path, store, monkeypatch) -> str:
    monkeypatch.setenv("CKPT_EXAMPLE_RECORDS", str(RECORDS))
    monkeypatch.setenv("CKPT_EXAMPLE_RATE", "200")
    job_id = start_job(metadata_url, tmp_path)
    wait_for(lambda: [c for c in store.list_checkpoints(job_id) if c.status == "COMPLETED"],
             60, "a checkpoint of v1")
    return job_id


def _output(tmp_path) -> Counter:
    """(key, count) of every committed output record: each input record gives one."""
    seen: Counter = Counter()
    for path in glob.glob(str(tmp_path / "example" / "output" / "**" / "part-*"),
                          recursive=True):
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    seen[(r["key"], r["count"])] += 1
    return seen


def _lost_deferral(monkeypatch, tries_lost: int | None) -> list:
    """The sensor's first ``tries_lost`` tries (``None``: every try) end FAILED as Airflow's
    bookkeeping would mark them, whatever the metadata DB says."""
    real = CheckpointCompletedSensor.execute
    calls: list = []

    def execute(self, context):
        calls.append(context["ti"].try_number)
        if tries_lost is None or len(calls) <= tries_lost:
            raise AirflowException("simulated: task-state-changed-externally")
        return real(self, context)

    monkeypatch.setattr(CheckpointCompletedSensor, "execute", execute)
    return calls


@pytest.mark.timeout(300)
def test_a_sensor_that_lost_its_deferral_rechecks_the_db_and_the_upgrade_succeeds(
        airflow_db, metadata_url, store, tmp_path, monkeypatch):
    _bounded_v1(metadata_url, tmp_path, store, monkeypatch)
    calls = _lost_deferral(monkeypatch, tries_lost=1)

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore", _conf(tmp_path))

    assert len(calls) == 2, calls  # retried once, decided on the facts
    assert tis["wait_v2_checkpoint"] == "success" and tis["upgraded"] == "success", tis
    assert tis["cancel_v2"] == tis["restart_v1"] == "skipped", tis
    assert tis["ask_rollback"] == tis["decide_rollback"] == tis["rollback_ok"] == "skipped", tis
    assert state == "success"


@pytest.mark.timeout(300)
def test_rollback_after_v2_committed_discards_v2_output_and_publishes_nothing_twice(
        airflow_db, metadata_url, store, tmp_path, monkeypatch):
    v1 = _bounded_v1(metadata_url, tmp_path, store, monkeypatch)
    _lost_deferral(monkeypatch, tries_lost=None)  # every try: the rollback runs

    state, tis, dr = run_dag(airflow_db, "savepoint_upgrade_restore", _conf(tmp_path))

    assert tis["wait_v2_checkpoint"] == "failed" and tis["restart_v1"] == "success", tis
    # the guard removed v2's output: nobody is asked
    assert tis["ask_rollback"] == tis["decide_rollback"] == "skipped", tis
    assert tis["rollback_ok"] == "success", tis
    assert state == "failed"
    v2 = store.get_job(xcom(dr, "start_v2", key="job_id"))
    guard = xcom(dr, "guard_rollback")
    assert guard["job_id"] == v2.job_id and guard["committed"], guard
    assert guard["discarded"]["file-sink"], "v2 committed part files: they were removed"
    v1_again = xcom(dr, "restart_v1")
    assert v1_again != v1
    wait_for(lambda: store.get_job(v1_again).status == "FINISHED", 120, "v1 restarted to end")
    seen = _output(tmp_path)
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    missing = RECORDS - len(seen)
    print(f"rollback after v2 committed: {len(seen)} distinct of {RECORDS} records, "
          f"{duplicates} duplicates, {missing} missing")
    assert duplicates == 0 and missing == 0


def test_rollback_guard_refuses_when_a_sink_cannot_remove_v2_output(metadata_url, store):
    """v2 ran to its end into a PostgreSQL 2PC sink (appends: nothing can be removed): the
    rollback is refused, naming the sink; nothing is touched (no server is needed)."""
    from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator

    store.create_job(job_id="a" * 32, job_name="pg-rollback", parallelism=1, version="v2",
                     restored_from="/snapshots/sp-1")
    store.set_job_status("a" * 32, "FINISHED")
    op = GuardRollbackOperator(task_id="guard_rollback", job="a" * 32,
                               pipeline="rollback_pipelines:postgres_2pc")

    with pytest.raises(AirflowFailException, match=r"rollback refused: job pg-rollback .*"
                       r"'orders-2pc' \(postgres\(orders, 2pc\)\) cannot remove them"):
        op.execute({})


def test_rollback_guard_passes_a_v2_that_committed_nothing(metadata_url, store):
    from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator

    store.create_job(job_id="b" * 32, job_name="pg-rollback", parallelism=1, version="v2",
                     restored_from="/snapshots/sp-1")
    store.set_job_status("b" * 32, "FAILED", failure_reason="boom")
    op = GuardRollbackOperator(task_id="guard_rollback", job="b" * 32,
                               pipeline="rollback_pipelines:postgres_2pc")
    assert op.execute({}) == {"job_id": "b" * 32, "committed": False, "checkpoints": [],
                              "discarded": {}}


def _completed(store, job_id: str, chk: int) -> None:
    from datetime import UTC, datetime

    store.add_pending_checkpoint(job_id, chk, kind="CHECKPOINT", trigger_time=datetime.now(UTC),
                                 location=f"/ckpt/chk-{chk}")
    store.complete_checkpoint(job_id, chk, complete_time=datetime.now(UTC), duration_ms=5,
                              state_size=10, checkpointed_size=10, task_stats=[])


def test_a_sensor_try_decides_on_the_db_before_deferring_and_at_its_timeout(metadata_url, store):
    """A retry after a lost deferral: the condition already holds, so the try succeeds at
    once instead of deferring again; a timeout event is checked against the DB too."""
    store.create_job(job_id="f" * 32, job_name="orders", parallelism=1)
    store.set_job_status("f" * 32, "RUNNING")
    _completed(store, "f" * 32, 1)
    sensor = CheckpointCompletedSensor(task_id="s", job="orders", deferrable=True, timeout=60)
    assert sensor.execute({})["checkpoint_id"] == 1  # no TaskDeferred
    late = sensor.execute_complete({}, {"status": "timeout", "message": "timed out"})
    assert late["checkpoint_id"] == 1 and late["status"] == "success"
    store.set_job_status("f" * 32, "FAILED", failure_reason="boom")
    ended = CheckpointCompletedSensor(task_id="s", job="orders", after_checkpoint_id=1)
    with pytest.raises(AirflowFailException, match="FAILED: boom"):  # facts: no retry helps
        ended.execute({})
